"""``moe-routing compile-check``: build the kernels for NVIDIA and AMD GPUs without a GPU, and read their registers.

Triton compiles for ``sm_90`` (H100 / H200), ``gfx942`` (MI300X / MI325X) and ``gfx950`` (MI350X / MI355X) on any
machine. This compiles every plan the rules choose for the target's vendor (``rules.choose_plan(rocm=...)``; on
NVIDIA with programmatic dependent launch, as route() launches on Hopper) for models' routing shapes, over every
token class, logits dtype and logits alignment (``precompile.shape_launches``: the launches ``route()`` makes),
with the arguments a launch passes (``kernels/targets.py``), and reads each binary's registers and spills: spill
stores and loads from ``ptxas -v`` (NVIDIA), register spills and scratch bytes from the amdgcn assembly (AMD). A
compile error fails the check, and so does a spill on AMD (``failures``); CI runs it for both vendors (.ci/run).
NVIDIA and AMD targets take separate runs: the kernels' math is PTX on one and plain on the other, fixed once a
process has compiled.

What it does not show: that the binaries run, or run correctly or fast, on the GPU; that needs the GPU.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Callable

import torch

from ..precompile import MODEL_SHAPES, Launch, resolve_shapes, shape_launches

AMD_TARGETS = ("gfx942", "gfx950")
NVIDIA_TARGETS = ("sm_90",)
DEFAULT_MODELS = ("deepseek-v3", "kimi-k2", "moonlight", "qwen3-moe", "deepseek-v4")
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


def _jobs(models, dtypes, rocm: bool) -> list[tuple[str, torch.dtype, str, Launch]]:
    from ..kernels.launch import programmatic_plan

    jobs = []
    for model in models:
        shape = resolve_shapes(model)[0]
        for dtype in dtypes:
            for layout in ("aligned", "unaligned"):
                for launch in shape_launches(shape, dtype, "cpu", unaligned=layout == "unaligned", rocm=rocm):
                    if not rocm:  # as launched on Hopper: waiting on the previous kernel's grid (PDL)
                        launch = launch._replace(plan=programmatic_plan(launch.plan))
                    jobs.append((model, dtype, layout, launch))
    return jobs


def run_compile_check(targets=AMD_TARGETS, models=DEFAULT_MODELS, dtypes=DEFAULT_DTYPES, threads: int = 2,
                      progress: Callable[[dict], None] | None = None) -> list[dict]:
    """Compile every plan for every target (all NVIDIA or all AMD); one row per (target, model, dtype, layout, plan)
    with ``ok`` "yes", "SPILLS" or "ERROR" and the registers read (a plan that several layouts share is compiled
    once; its later rows come from Triton's on-disk cache)."""
    from ..kernels import INTERPRETED, _bitonic
    from ..kernels.targets import TARGETS, compile_plan

    known = NVIDIA_TARGETS + AMD_TARGETS
    unknown = [t for t in targets if t not in known]
    if unknown:
        raise ValueError(f"targets: {unknown} not targets this check knows ({', '.join(known)})")
    rocm = targets[0] in AMD_TARGETS if targets else True
    if any((t in AMD_TARGETS) != rocm for t in targets):
        raise ValueError("targets: NVIDIA and AMD targets take separate runs (the kernels' math differs: PTX on "
                         "NVIDIA, plain on AMD, fixed once a process has compiled)")
    unknown = [m for m in models if m not in MODEL_SHAPES]
    if unknown:
        raise ValueError(f"models: unknown {unknown} (known: {', '.join(MODEL_SHAPES)})")
    if INTERPRETED:
        raise RuntimeError("compile-check compiles kernels: run it without TRITON_INTERPRET=1")
    if rocm:
        _bitonic.use_plain_math()  # as on ROCm: no PTX
    elif not _bitonic.PTX_SIGMOID:
        raise RuntimeError("compile-check for NVIDIA targets needs the PTX math: run it where torch is not a ROCm "
                           "build, in a process that has not compiled for AMD")
    resources = _amd_row if rocm else _nvidia_row
    jobs = _jobs(models, dtypes, rocm)

    def compile_one(target: str, model: str, dtype: torch.dtype, layout: str, launch: Launch) -> dict:
        args, kwargs = launch.arguments()
        row = dict(target=target, model=model, dtype=str(dtype).removeprefix("torch."), layout=layout,
                   tokens=f">= {launch.call.tokens}", plan=describe(launch.plan))
        started = time.perf_counter()
        try:
            read = resources(compile_plan(launch.plan.kernel, TARGETS[target], args, kwargs))
        except Exception as error:  # noqa: BLE001 - a compile error is the finding, reported per plan
            message = str(error).strip().splitlines()
            return {**row, "ok": "ERROR", "error": f"{type(error).__name__}: {message[0] if message else ''}"[:200],
                    "seconds": round(time.perf_counter() - started, 1)}
        return {**row, **read, "seconds": round(time.perf_counter() - started, 1)}

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


def failures(rows: list[dict]) -> list[dict]:
    """The rows that fail the check: every compile error, and register spills on AMD targets. NVIDIA spills are
    listed, not failed: ptxas spills to local memory cached in L1, and a register cap the rules set on purpose
    (``rules.ONE_WAVE_REGISTERS``: one wave of programs) spills a little yet measured faster on the H200; the
    spilling NVIDIA plans and what is known of them are in docs/kernels.md."""
    return [r for r in rows if r["ok"] == "ERROR" or (r["ok"] == "SPILLS" and r["target"] in AMD_TARGETS)]


def _amd_row(compiled) -> dict:
    """A row's verdict and read-out for an AMD binary: spills of vector or scalar registers fail it."""
    from ..kernels.targets import amd_resources

    found = amd_resources(compiled)
    spilled = found["vgpr_spill_count"] or found["sgpr_spill_count"]
    return {"ok": "SPILLS" if spilled else "yes", "vgprs": found["vgprs"], "sgprs": found["sgprs"],
            "vgpr spills": found["vgpr_spill_count"], "sgpr spills": found["sgpr_spill_count"],
            "scratch bytes": found["scratch_bytes"]}


def _nvidia_row(compiled) -> dict:
    """A row's verdict and read-out for an NVIDIA binary: SPILLS where ptxas reports spill stores or loads (a stack
    frame alone is no spill; ``failures`` lists NVIDIA spills without failing them)."""
    from ..kernels.targets import nvidia_resources

    found = nvidia_resources(compiled)
    spilled = found["spill_stores"] or found["spill_loads"]
    return {"ok": "SPILLS" if spilled else "yes", "registers": found["registers"],
            "spill stores": found["spill_stores"], "spill loads": found["spill_loads"],
            "stack bytes": found["stack_bytes"]}
