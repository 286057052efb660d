"""``moe-routing report``: the main job. Is route() exact here, and how much faster than what is installed?

Stages, each with a progress bar: on a GPU, the C++ host path is built and every kernel the later stages need is
compiled in parallel first; then the correctness sweep over real models' shapes (``check``), the benchmark
(``bench``, GPU only: the ``targets`` shapes, route() beside the engine ops importable here, the
straightforward Triton kernel, ``torch.max`` and the launch floor) and the shadow comparison inside tiny models
of each family (``shadow``). ``report.md`` leads with the verdict; ``report.png`` is the bench's plot on a GPU
and the check's rows on a CPU.
"""

from __future__ import annotations

import contextlib
import datetime
import platform
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tabulate import tabulate

# the report's shadow run: prompts x prompt tokens, then new tokens decoded (every layer's router call is compared)
SHADOW_PROMPTS, SHADOW_PROMPT_TOKENS, SHADOW_NEW_TOKENS = 2, 16, 4


@dataclass
class Stages:
    """Wall time of each stage, in order (the report states them)."""

    seconds: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def run(self, name: str, total: int, unit: str):
        """A progress bar for a stage of ``total`` items; the stage's time is recorded when it ends."""
        from tqdm import tqdm

        start = time.perf_counter()
        with tqdm(total=total, desc=f"{name:<8}", unit=unit, dynamic_ncols=True, file=sys.stderr) as bar:
            yield bar
        self.seconds[name] = time.perf_counter() - start


def _compile_ahead(device: str, check_cases, check_tokens: int, bench_shapes, families, stages: Stages) -> None:
    """Build the C++ host path and compile every kernel the stages below will launch, in parallel
    (``precompile.compile_launches``), so that the stages time nothing but their own work (Triton caches the
    binaries on disk too). Each plan is compiled once (calls that choose the same plan share it); the tiny
    models' router calls are gathered while the C++ build runs."""
    from ..call import check_call
    from ..kernels import host_launch
    from ..precompile import compile_launches, launch_for
    from .check import PLAN_BLOCK_SIZES, case_inputs
    from .suite import compile_plan_kernels_ahead
    from .shadow import router_inputs

    builder = None
    if host_launch.enabled_by_environment():
        builder = threading.Thread(target=host_launch.load, daemon=True)  # a ninja build: tens of seconds
        builder.start()

    launches, planned = [], set()

    def add(logits, bias, topk, scoring, groups, kept):
        call = check_call(logits, topk, scoring, bias, groups, kept, True, 1.0, None)
        weights = torch.empty(call.tokens, call.topk, device=device)
        ids = torch.empty(call.tokens, call.topk, dtype=torch.int32, device=device)
        launch = launch_for(call, logits, bias, weights, ids)
        key = (repr(launch.plan), logits.dtype, getattr(bias, "dtype", None))
        if key not in planned:
            planned.add(key)
            launches.append(launch)

    with stages.run("compile", None, "kernel") as bar:
        for shape in bench_shapes:
            logits = torch.empty(shape.tokens, shape.experts, dtype=shape.dtype, device=device)  # never read
            bias = torch.empty(shape.experts, device=device) if shape.bias else None
            add(logits, bias, shape.topk, shape.scoring, shape.groups, shape.topk_group)
        for case in check_cases:
            logits, bias = case_inputs(case, check_tokens, device)
            add(logits, bias, case.topk, case.scoring, case.groups, case.topk_group)
        for family in families:
            for job in router_inputs(family, device, SHADOW_PROMPTS * SHADOW_PROMPT_TOKENS, SHADOW_PROMPTS):
                add(*job)
        bar.total = len(launches)
        bar.refresh()
        compile_launches(launches, 16, progress=bar.update)
        # the check's dispatch plans: both layouts, without and with its map (a rank holding every fourth expert)
        bar.set_postfix_str("dispatch plans")
        compile_plan_kernels_ahead([(check_tokens, case.topk, case.experts, len(range(1, case.experts, 4)),
                                     PLAN_BLOCK_SIZES + (None,)) for case in check_cases])
        if builder is not None:
            bar.set_postfix_str("C++ host path")
            builder.join()


def _verdict(check_rows, recorders, bench_result, stage_result=None) -> list[str]:
    """The report's first lines: exact or not, and the speed against the other arms measured here."""
    wrong = [r["case"] for r in check_rows if r["ok"] != "yes"]
    shadow_wrong = [name for name, recorder in recorders.items() if recorder.route_wrong()]
    rows = sum(r["rows"] for r in check_rows)
    if not wrong and not shadow_wrong:
        exact = (f"**Exact: yes.** {len(check_rows)} model shapes ({rows} rows with ties and NaN/inf garbage) match "
                 f"the float64 semantics, and route() matches the float64 semantics on every router call of {len(recorders)} tiny models "
                 "(rows where the model's own routing differs are near ties or the model's error: table below).")
    else:
        exact = f"**Exact: NO.** Failed: {', '.join(wrong + shadow_wrong)} (tables below)."
    lines = [exact, ""]
    if bench_result is None:
        lines.append("**Speed: not measured** (no CUDA GPU here; `moe-routing bench` needs one).")
        return lines
    from .suite import speedups

    summary = speedups(bench_result)
    if not summary:
        lines.append("**Speed:** no other arm ran beside route() here.")
        return lines
    for arm, (low, high, shapes) in summary.items():
        lines.append(f"**Speed against {arm}:** route(out=) is {low:.1f}–{high:.1f}× faster in device time "
                     f"under CUDA-graph replay on the {shapes} shapes it ran ({bench_result['gpu']}).")
    stage = speedups(stage_result, ours="moe_routing.route_plan(out=)") if stage_result else {}
    if "vLLM top-k + align" in stage:
        low, high, shapes = stage["vLLM top-k + align"]
        lines.append(f"**Routing stage against vLLM's top-k + moe_align_block_size:** vLLM's stage takes "
                     f"{low:.1f}–{high:.1f}× route_plan(out=)'s device time on the {shapes} shapes it ran "
                     "(above 1: route_plan faster).")
    engines = bench_result.get("engines_present") or []
    lines.append("")
    lines.append(f"Engine routing ops importable here: {', '.join(engines) if engines else 'none'} "
                 "(vLLM, sgl-kernel, FlashInfer and AITER are looked for).")
    return lines


def write_report(out: Path, device: str, backend: str, check_tokens: int, bench_preset: str | None,
                 shadow_families: tuple[str, ...]) -> Path:
    """Run the stages and write ``out/report.md`` (and the plots); returns its path."""
    from .check import MODEL_CASES, check_rows_plot, run_check
    from .shadow import run_shadow, shadow_table, tiny_model
    from .suite import PRESETS, REPORT_ARMS, REPORT_STAGE_TOKENS, markdown, plot, run_suite, stage_comparison, \
        write_outputs

    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    stages = Stages()
    bench_shapes = PRESETS[bench_preset] if device == "cuda" and bench_preset else []
    # the routing stage (top-k + blocks plan) beside vLLM's where vLLM aligns: the plan preset's shapes without a
    # map, at a decode, a small-prefill and a prefill size
    stage_shapes = [shape for shape in PRESETS["plan"] if shape.tokens in REPORT_STAGE_TOKENS
                    and not shape.local_experts] if bench_shapes else []
    if device == "cuda":
        _compile_ahead(device, MODEL_CASES, check_tokens, bench_shapes + stage_shapes, shadow_families, stages)

    with stages.run("check", len(MODEL_CASES), "case") as bar:
        check_rows = run_check(check_tokens, device, MODEL_CASES, progress=lambda case: bar.update())

    bench_result = stage_result = None
    if bench_shapes:
        from .arms import ENGINES

        with stages.run("bench", len(bench_shapes), "shape") as bar:
            bench_result = run_suite(bench_shapes, REPORT_ARMS + list(ENGINES), rounds=3, calls_per_graph=50,
                                     replays=20, progress=lambda shape, result: bar.update())
        write_outputs(bench_result, out)
        plot(bench_result, out / "report.png")
        with stages.run("stage", len(stage_shapes), "shape") as bar:
            stage_result = run_suite(stage_shapes, None, rounds=3, calls_per_graph=50, replays=20, host_max_tokens=0,
                                     progress=lambda shape, result: bar.update())
    else:
        check_rows_plot(check_rows, out / "report.png", backend)

    recorders = {}
    with stages.run("shadow", len(shadow_families), "model") as bar:
        for family in shadow_families:
            recorders[f"tiny {family}"] = run_shadow(tiny_model(family, device=device), SHADOW_PROMPTS,
                                                     SHADOW_PROMPT_TOKENS, SHADOW_NEW_TOKENS)
            bar.update()
    shadow_rows = shadow_table(recorders)
    total = time.perf_counter() - started

    command = " ".join(["moe-routing"] + sys.argv[1:])
    timing = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in stages.seconds.items())
    sections = [
        "# moe-routing report", "",
        *_verdict(check_rows, recorders, bench_result, stage_result), "",
        "![report](report.png)", "",
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} · `{command}` · {platform.node()} · "
        f"torch {torch.__version__} · {backend} · {total:.0f} s ({timing})",
        "", "## Correctness against float64 (`moe-routing check`)", "",
        f"{check_tokens} rows per case (3/4 ordinary, 1/8 exact ties, 1/8 NaN/inf garbage), bf16 logits; "
        "near-tie rows accept either answer.", "", tabulate(check_rows, headers="keys", tablefmt="github"),
    ]
    if bench_result is not None:
        sections += ["", "## Speed (`moe-routing bench`)", "", markdown(bench_result),
                     "Every arm's table and plot: `bench.md`, `bench.json`, `bench.png`; more shapes and arms: "
                     "`moe-routing bench --preset wide`."]
    else:
        sections += ["", "## Speed", "", "Skipped: no CUDA GPU here (`moe-routing bench` needs one)."]
    if stage_result is not None:
        sections += ["", "## The routing stage (`moe-routing bench --preset plan`)", "",
                     "route_plan (the top-k and vLLM's blocks layout) beside route() + align and vLLM's top-k op + "
                     "its `moe_align_block_size` where their ops load (installed vLLM; the plan preset also takes "
                     "`--engine-source vllm=DIR`).", *stage_comparison(stage_result)]
    sections += ["", "## Shadow comparison inside live model forwards (`moe-routing shadow`)", "",
                 f"Tiny models with random weights and each family's real routing shape, {SHADOW_PROMPTS} prompts of "
                 f"{SHADOW_PROMPT_TOKENS} tokens and {SHADOW_NEW_TOKENS} decoded tokens; the model keeps its own "
                 "routing while route() runs on the identical logits into scratch.", "",
                 tabulate(shadow_rows, headers="keys", tablefmt="github")]
    path = out / "report.md"
    path.write_text("\n".join(sections) + "\n")
    return path
