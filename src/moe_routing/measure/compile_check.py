"""``moe-routing compile-check``: build the kernels for NVIDIA and AMD GPUs without a GPU, and read their registers.

Triton compiles for ``sm_90`` (H100 / H200), ``gfx942`` (MI300X / MI325X) and ``gfx950`` (MI350X / MI355X) on any
machine. This compiles every plan the rules choose for the target's vendor (``rules.choose_plan(rocm=...)``; on
NVIDIA with programmatic dependent launch, as route() launches on Hopper) for models' routing shapes, over every
token class, logits dtype and logits alignment (``precompile.shape_launches``: the launches ``route()`` makes),
and every launch of the dispatch-plan kernel (``plan_kernel_launches``: both layouts, every role of an expert map,
int32 and int64 ids, one program and the two launches), with the arguments a launch passes (``kernels/targets.py``),
each distinct binary once, in several processes, and reads each binary's registers and spills: spill
stores and loads from ``ptxas -v`` (NVIDIA), register spills and scratch bytes from the amdgcn assembly (AMD). A
compile error fails the check, and so does a spill on AMD (``failures``); CI runs it for both vendors (.ci/run).
NVIDIA and AMD targets take separate runs: the kernels' math is PTX on one and plain on the other, fixed once a
process has compiled.

What it does not show: that the binaries run, or run correctly or fast, on the GPU; that needs the GPU.
"""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Callable, NamedTuple

import torch

from ..call import IDS_DTYPES
from ..precompile import MODEL_SHAPES, resolve_shapes, shape_launches

AMD_TARGETS = ("gfx942", "gfx950")
NVIDIA_TARGETS = ("sm_90",)
DEFAULT_MODELS = ("deepseek-v3", "kimi-k2", "moonlight", "qwen3-moe", "deepseek-v4")
DEFAULT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def describe(plan) -> str:
    """A plan in a few words: kernel, tile and the variants switched on."""
    c = plan.constexprs
    if plan.name == "rounds":
        return f"rounds rows={plan.rows} warps={plan.num_warps}"
    if plan.name == "route plan":
        return f"route plan rows={plan.rows} warps={plan.num_warps} slots={c['SLOTS']} bins={c['BINS']}"
    if plan.name == "route plan grid":
        return f"route plan grid rows={plan.rows} warps={plan.num_warps} own={c['OWN']} bins={c['BINS']}"
    if plan.name == "plan":
        stage = ("per bin", "count", "place chunk")[c["STAGE"]]
        layout = "grouped" if c["LAYOUT"] else "blocks"
        return f"plan {layout} {stage} slots={c['SLOTS']} bins={c['BINS']} warps={plan.num_warps}"
    switches = [name.lower() for name in ("PREFETCH", "WORDS", "ONE_PASS", "ROUNDS", "HANDOVER", "DENSE_OUT",
                                          "STORE_FIRST") if c.get(name)]
    return (f"bitonic lanes={c['LANES']} rows={plan.rows} warps={plan.num_warps} chunk={c['CHUNK']} "
            f"run={c['GROUP']}" + (f" {'+'.join(switches)}" if switches else ""))


class PlanKernelLaunch(NamedTuple):
    """A launch of the dispatch-plan kernel (kernels/_plan.py) as ``align``/``group`` make it, for compiling."""

    plan: object  # kernels.rules.Plan named "plan"
    call: object  # plan_call.PlanCall
    arguments_and_options: tuple

    def arguments(self) -> tuple[tuple, dict]:
        return self.arguments_and_options


def plan_kernel_launches(experts: int, topk: int, ids_dtype: torch.dtype, rocm: bool = True) -> list[PlanKernelLaunch]:
    """Every distinct launch of the plan kernel for ids of ``experts`` experts: both layouts, every role of an expert
    map, with and without the scatter index, every slot class of the one-launch path and both launches of the
    chunked path at every chunk class; on NVIDIA (``rocm`` False) launched programmatically, as on Hopper. (The
    map's role and the scatter index are runtime arguments: launches differing only in them share a binary, which
    ``run_compile_check`` then compiles once.)"""
    from ..kernels._plan import plan_kernel
    from ..kernels.plan_launch import (CHUNK_CLASSES, ONE_LAUNCH_SLOTS, SLOT_CLASSES, TABLE_ENTRIES, chunk_bins,
                                       counting, plan_arguments, plan_launch)
    from ..kernels.rules import Plan
    from ..plan_call import check_plan_call

    ids = torch.empty(1, topk, dtype=ids_dtype)
    expert_map = torch.empty(experts, dtype=torch.int32)
    launches, seen = [], set()
    for block_size, mapped, ignore, scatter in ((16, False, False, False), (16, False, False, True),
                                                (16, True, True, True), (16, True, False, False),
                                                (None, False, False, False), (None, True, False, False)):
        call = check_plan_call(ids, experts, block_size)
        if mapped:
            call = call._replace(map_mode=1 if ignore or block_size is None else 2)
        buffers = (torch.empty(64, dtype=torch.int32),) * 6
        # the most tokens each chunk class takes (the class's programs each summing TABLE_ENTRIES histogram entries)
        most = TABLE_ENTRIES // chunk_bins(experts)
        chunked = [max(size * most, ONE_LAUNCH_SLOTS + topk) // topk for size in CHUNK_CLASSES]
        for tokens in [max(size // topk, 1) for size in SLOT_CLASSES] + chunked:
            at = call._replace(tokens=tokens)
            launch = plan_launch(at, programmatic=not rocm)
            args, constexprs = plan_arguments(at, ids, expert_map if mapped else None, *buffers[:3],
                                              buffers[3] if scatter else None, *buffers[4:], launch)
            stages = [constexprs] if launch.launches == 1 else [counting(constexprs), constexprs]
            for stage in stages:
                # the launch's binary: its constexprs and warps, the map's dtype (where one is passed) and runtime role
                key = tuple(sorted(stage.items())) + (launch.num_warps, args[1].dtype, call.map_mode, scatter,
                                                      args[-1])  # (the last: the one-launch path's layout)
                if key not in seen:
                    seen.add(key)
                    plan = Plan("plan", plan_kernel, stage, 1, launch.num_warps)
                    options = dict(num_warps=launch.num_warps, **({} if rocm else dict(launch_pdl=True)))
                    launches.append(PlanKernelLaunch(plan, at, (args, dict(**options, **stage))))
    return launches


def route_plan_kernel_launches(shape, dtype: torch.dtype, rocm: bool = True) -> list[PlanKernelLaunch]:
    """Every distinct launch of the one-launch route_plan kernels (kernels/_route_plan.py, the one-program kernel at
    one token; kernels/_route_plan_grid.py, the grid kernel from the token count its rule gives) for a routing shape
    with ``dtype`` logits (16-byte aligned rows, int32 ids, the blocks layout: the layout, the map's role, the block
    size and the grid kernel's token count are runtime arguments), one per kernel and routing tile
    (``route_plan_launch.one_launch_tiles``); on NVIDIA launched programmatically, as on Hopper."""
    from ..kernels.launch import programmatic_plan
    from ..kernels.route_plan_launch import one_launch_arguments, one_launch_tiles
    from ..kernels.rules import Plan
    from ..kernels._route_plan import route_plan_kernel
    from ..kernels._route_plan_grid import route_plan_grid_kernel
    from ..precompile import shape_launches

    launches = []
    for routing in shape_launches(shape, dtype, "cpu", rocm=rocm, token_counts=(1,)):
        plan = routing.plan if rocm else programmatic_plan(routing.plan)
        for grid, tokens, tile in one_launch_tiles(plan):
            call = routing.call._replace(tokens=tokens)
            args, plan_constexprs, _ = one_launch_arguments(call, tile, routing.logits, routing.bias, grid)
            constexprs = {**tile.constexprs, **plan_constexprs}
            options = dict(num_warps=tile.num_warps, **({} if rocm else dict(launch_pdl=True)))
            name, kernel = ("route plan grid", route_plan_grid_kernel) if grid else ("route plan", route_plan_kernel)
            launches.append(PlanKernelLaunch(Plan(name, kernel, constexprs, tile.rows, tile.num_warps), call,
                                             (args, dict(**options, **constexprs))))
    return launches


LAYOUTS = ("aligned", "unaligned")  # logits rows on 16-byte boundaries (word loads allowed), or not


def _jobs(models, dtypes, rocm: bool, plans: bool = True, layouts=LAYOUTS,
          ids_dtypes=IDS_DTYPES) -> list[tuple[str, str, str, object]]:
    """(model, dtype, layout, launch) of every routing launch for the logits ``layouts``, then (``plans``) every
    plan-kernel launch for ids of ``ids_dtypes`` (dtype: of the ids)."""
    from ..kernels.launch import programmatic_plan

    jobs = []
    for model in models:
        shape = resolve_shapes(model)[0]
        for dtype in dtypes:
            for layout in layouts:
                for launch in shape_launches(shape, dtype, "cpu", unaligned=layout == "unaligned", rocm=rocm):
                    if not rocm:  # as launched on Hopper: waiting on the previous kernel's grid (PDL)
                        launch = launch._replace(plan=programmatic_plan(launch.plan))
                    jobs.append((model, str(dtype).removeprefix("torch."), layout, launch))
        for ids_dtype in ids_dtypes if plans else ():
            for launch in plan_kernel_launches(shape.experts, shape.topk, ids_dtype, rocm):
                jobs.append((model, f"ids {str(ids_dtype).removeprefix('torch.')}", "plan", launch))
        for dtype in dtypes if plans else ():
            for launch in route_plan_kernel_launches(shape, dtype, rocm):
                jobs.append((model, str(dtype).removeprefix("torch."), "route plan", launch))
    return jobs


_WORK: dict = {}  # what forked workers compile: set before the pool starts, read by index


def _compile_one(target: str, index: int) -> dict:
    """Compile job ``index`` of ``_WORK`` for ``target``: its registers and spills, or the compile error."""
    from ..kernels.targets import TARGETS, compile_plan

    launch = _WORK["jobs"][index][3]
    args, kwargs = launch.arguments()
    started = time.perf_counter()
    try:
        read = _WORK["resources"](compile_plan(launch.plan.kernel, TARGETS[target], args, kwargs))
    except Exception as error:  # noqa: BLE001 - a compile error is the finding, reported per plan
        message = str(error).strip().splitlines()
        read = {"ok": "ERROR", "error": f"{type(error).__name__}: {message[0] if message else ''}"[:200]}
    return {**read, "seconds": round(time.perf_counter() - started, 1)}


def run_compile_check(targets=AMD_TARGETS, models=DEFAULT_MODELS, dtypes=DEFAULT_DTYPES, jobs: int = 2,
                      progress: Callable[[dict], None] | None = None, plans: bool = True,
                      layouts=LAYOUTS, ids_dtypes=IDS_DTYPES) -> list[dict]:
    """Compile every plan for every target (all NVIDIA or all AMD); one row per (target, model, dtype, layout, plan)
    with ``ok`` "yes", "SPILLS" or "ERROR" and the registers read. Each distinct kernel (the same binary Triton would
    build: its cache key for the target) is compiled once, in ``jobs`` processes, and read into every row that
    launches it. ``plans``: the dispatch-plan kernel's launches too, for ids of ``ids_dtypes``; ``layouts``: the
    logits layouts (``LAYOUTS``)."""
    from ..kernels import INTERPRETED, _bitonic
    from ..kernels.targets import TARGETS, cache_key

    if not ids_dtypes or any(dtype not in IDS_DTYPES for dtype in ids_dtypes):
        raise ValueError(f"ids_dtypes: expected a choice of int32, int64, got {list(ids_dtypes)}")
    known = NVIDIA_TARGETS + AMD_TARGETS
    unknown = [t for t in targets if t not in known]
    if unknown:
        raise ValueError(f"targets: {unknown} not targets this check knows ({', '.join(known)})")
    rocm = targets[0] in AMD_TARGETS if targets else True
    if any((t in AMD_TARGETS) != rocm for t in targets):
        raise ValueError("targets: NVIDIA and AMD targets take separate runs (the kernels' math differs: PTX on "
                         "NVIDIA, plain on AMD, fixed once a process has compiled)")
    if not layouts or any(layout not in LAYOUTS for layout in layouts):
        raise ValueError(f"layouts: expected a choice of {', '.join(LAYOUTS)}, got {list(layouts)}")
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
    work = _jobs(models, dtypes, rocm, plans, layouts, ids_dtypes)
    kernels: dict[tuple, list[tuple[str, int]]] = {}  # distinct kernel -> the (target, job) rows it serves
    for target in targets:
        for index, (*_, launch) in enumerate(work):
            args, kwargs = launch.arguments()
            key = (target, launch.plan.kernel.__name__, cache_key(launch.plan.kernel, TARGETS[target], args, kwargs))
            kernels.setdefault(key, []).append((target, index))
    _WORK.update(jobs=work, resources=_amd_row if rocm else _nvidia_row)
    rows = []
    # forked workers inherit the launches and the math chosen above (no tensors or kernels are pickled)
    with ProcessPoolExecutor(max(1, jobs), mp_context=multiprocessing.get_context("fork")) as pool:
        futures = {pool.submit(_compile_one, *served[0]): served for served in kernels.values()}
        for future in as_completed(futures):
            read = future.result()
            for target, index in futures[future]:
                model, dtype, layout, launch = work[index]
                rows.append(dict(target=target, model=model, dtype=dtype, layout=layout,
                                 tokens=f">= {launch.call.tokens}", plan=describe(launch.plan), **read))
            if progress is not None:
                progress(rows[-1])
    _WORK.clear()
    order = {(t, m): i for i, (t, m) in enumerate((t, m) for t in targets for m in models)}
    rows.sort(key=lambda r: (order[(r["target"], r["model"])], r["dtype"], r["layout"], int(r["tokens"][3:]),
                             r["plan"]))
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
