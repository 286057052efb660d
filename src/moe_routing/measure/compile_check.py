"""``moe-routing compile-check``: build the AMD kernels without an AMD GPU, and read their register use.

Triton compiles for ``gfx942`` (MI300X / MI325X) and ``gfx950`` (MI350X / MI355X) on any machine. This compiles
every plan the rules choose on ROCm (``rules.choose_plan(rocm=True)``) for models' routing shapes, over every token
class, logits dtype and logits alignment (``precompile.shape_launches``: the launches ``route()`` makes), with the
arguments a launch passes (``kernels/targets.py``), and reads each binary's registers, register spills and scratch
bytes from its amdgcn assembly. A compile error or a spill (VGPR or SGPR) fails the check; CI runs it (.ci/run).

What it does not show: that the binaries run, or run correctly or fast, on the GPU; that needs the GPU.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Callable

import torch

from ..precompile import MODEL_SHAPES, Launch, resolve_shapes, shape_launches

AMD_TARGETS = ("gfx942", "gfx950")
DEFAULT_MODELS = ("deepseek-v3", "kimi-k2", "moonlight", "qwen3-moe")
DEFAULT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def describe(plan) -> str:
    """A plan in a few words: kernel, tile and the variants switched on."""
    c = plan.constexprs
    if plan.name == "rounds":
        return f"rounds rows={plan.rows} warps={plan.num_warps}"
    switches = [name.lower() for name in ("PREFETCH", "WORDS", "ONE_PASS", "ROUNDS", "HANDOVER", "DENSE_OUT",
                                          "STORE_FIRST") if c.get(name)]
    return (f"bitonic lanes={c['LANES']} rows={plan.rows} warps={plan.num_warps} chunk={c['CHUNK']} "
            f"run={c['GROUP']}" + (f" {'+'.join(switches)}" if switches else ""))


def _jobs(models, dtypes) -> list[tuple[str, torch.dtype, str, Launch]]:
    jobs = []
    for model in models:
        shape = resolve_shapes(model)[0]
        for dtype in dtypes:
            for layout in ("aligned", "unaligned"):
                for launch in shape_launches(shape, dtype, "cpu", unaligned=layout == "unaligned", rocm=True):
                    jobs.append((model, dtype, layout, launch))
    return jobs


def run_compile_check(targets=AMD_TARGETS, models=DEFAULT_MODELS, dtypes=DEFAULT_DTYPES, threads: int = 2,
                      progress: Callable[[dict], None] | None = None) -> list[dict]:
    """Compile every plan for every target; one row per (target, model, dtype, layout, plan) with ``ok`` "yes",
    "SPILLS" or "ERROR" and the registers read (a plan that several layouts share is compiled once; its later rows
    come from Triton's on-disk cache)."""
    from ..kernels import INTERPRETED, _bitonic
    from ..kernels.targets import TARGETS, amd_resources, compile_plan

    unknown = [t for t in targets if t not in AMD_TARGETS]
    if unknown:
        raise ValueError(f"targets: {unknown} not AMD targets this check knows ({', '.join(AMD_TARGETS)})")
    unknown = [m for m in models if m not in MODEL_SHAPES]
    if unknown:
        raise ValueError(f"models: unknown {unknown} (known: {', '.join(MODEL_SHAPES)})")
    if INTERPRETED:
        raise RuntimeError("compile-check compiles kernels: run it without TRITON_INTERPRET=1")
    _bitonic.use_plain_math()  # as on ROCm: no PTX
    jobs = _jobs(models, dtypes)

    def compile_one(target: str, model: str, dtype: torch.dtype, layout: str, launch: Launch) -> dict:
        args, kwargs = launch.arguments()
        row = dict(target=target, model=model, dtype=str(dtype).removeprefix("torch."), layout=layout,
                   tokens=f">= {launch.call.tokens}", plan=describe(launch.plan))
        started = time.perf_counter()
        try:
            found = amd_resources(compile_plan(launch.plan.kernel, TARGETS[target], args, kwargs))
        except Exception as error:  # noqa: BLE001 - a compile error is the finding, reported per plan
            message = str(error).strip().splitlines()
            return {**row, "ok": "ERROR", "error": f"{type(error).__name__}: {message[0] if message else ''}"[:200],
                    "seconds": round(time.perf_counter() - started, 1)}
        spilled = found["vgpr_spill_count"] or found["sgpr_spill_count"]
        return {**row, "ok": "SPILLS" if spilled else "yes", "vgprs": found["vgprs"], "sgprs": found["sgprs"],
                "vgpr spills": found["vgpr_spill_count"], "sgpr spills": found["sgpr_spill_count"],
                "scratch bytes": found["scratch_bytes"], "seconds": round(time.perf_counter() - started, 1)}

    rows = []
    with ThreadPoolExecutor(max(1, threads)) as pool:
        futures = [pool.submit(compile_one, target, *job) for target in targets for job in jobs]
        for future in as_completed(futures):
            rows.append(future.result())
            if progress is not None:
                progress(rows[-1])
    order = {(t, m): i for i, (t, m) in enumerate((t, m) for t in targets for m in models)}
    rows.sort(key=lambda r: (order[(r["target"], r["model"])], r["dtype"], r["layout"], int(r["tokens"][3:])))
    return rows
