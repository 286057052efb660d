"""The dispatch plan's launch: a program a bin for plans of up to ``ONE_LAUNCH_SLOTS`` slots (one launch; 2048 for
385-512 experts), chunks of slots beyond (two launches: the chunks' histograms, then the placing), with no host
round trip either way. A one-launch program loads the smallest slot class holding the plan, on warps by that class
and its histogram (``slot_warps``).

In eager mode the host time of a plan is paid on every layer of every token: after a call's first launch on a GPU,
later calls of the same key launch the compiled binaries through their C launchers directly (``_DirectPlan``), as
route() does (kernels/launch.py), skipping the rule and Triton's per-call binder.

Beyond one launch, two costs pull the chunk apart: each placing program sorts its chunk (a sort's time grows with its
keys), and each sums the histograms of every chunk before its own (programs x bins entries). ``chunk_slots`` takes
the smallest class in ``CHUNK_CLASSES`` whose programs sum no more than ``TABLE_ENTRIES`` histogram entries, and
``chunk_warps`` gives a program warps by its histogram's bins and its chunk. The rules come from an H100 sweep of
every chunk of 256-4096 slots at 2, 4 and 8 warps (benchmarks/NOTES.md, plan v2.2)."""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton

from ..plan_call import MAP_BINS, PlanCall
from ._plan import BLOCKS, COUNT, GROUPED, PER_BIN, PLACE_CHUNK, plan_kernel
from .launch import _current_device, _direct_launch_supported, _hooks_installed, _raw_stream, programmatic_launch_ok

ONE_LAUNCH_SLOTS = 4096  # plans of up to this many slots (T * K) take one launch, every program loading them all
WIDE_ONE_LAUNCH_SLOTS = 2048  # the same for histograms of WIDE_BINS bins or more (385-512 experts: Kimi-K2's 384)
WIDE_BINS = 512
# what a one-launch program loads: the first class holding the plan, and its warps
SLOT_CLASSES = (32, 128, 256, 512, 1024, 2048, ONE_LAUNCH_SLOTS)
CHUNK_CLASSES = (256, 1024, 2048)  # slots a program counts, sorts and places beyond: the chunk_slots choices
TABLE_ENTRIES = 49152  # histogram entries (programs x bins) a placing program sums before a larger chunk pays
TABLE_ROWS = 16  # workspace histograms a placing program sums at once
FILL_ENTRIES = 256  # entries of a fill a program writes at once


def chunk_slots(slots: int, bins: int) -> int:
    """The chunk of a two-launch plan of ``slots`` slots whose histograms have ``bins`` bins: the smallest class
    whose programs sum at most ``TABLE_ENTRIES`` entries each, else the largest."""
    return next((size for size in CHUNK_CLASSES if triton.cdiv(slots, size) * bins <= TABLE_ENTRIES),
                CHUNK_CLASSES[-1])


def one_launch_bins(experts: int) -> int:
    """The histogram of a one-launch program: a bin an expert, rounded up to a power of two (the dropped slots are
    counted apart)."""
    return triton.next_power_of_2(experts)


def one_launch_limit(bins: int) -> int:
    """The most slots a plan with a one-launch histogram of ``bins`` bins takes in one launch."""
    return WIDE_ONE_LAUNCH_SLOTS if bins >= WIDE_BINS else ONE_LAUNCH_SLOTS


def slot_warps(slots: int, bins: int) -> int:
    """A one-launch program's warps by its slot class and histogram: one up to 128 lanes, two at 256, four up to
    1024, at 2048 four for 256 bins or more and eight below, eight at 4096 (an H100 sweep, benchmarks/NOTES.md,
    plan v2.3)."""
    if slots <= 128:
        return 1
    if slots <= 256:
        return 2
    if slots <= 1024 or (slots <= 2048 and bins >= 256):
        return 4
    return 8


def chunk_warps(bins: int, chunk: int) -> int:
    """A chunk program's warps: a warp per 64 bins of the histogram it sums, 2 to 8, and at least 4 for chunks of
    2048 slots (with 2, the count and the sort spill scalar registers on AMD's gfx942 and gfx950)."""
    return min(max(bins // 64, chunk // 512, 2), 8)


class PlanLaunch(NamedTuple):
    """The launches of one plan: its programs, and the kernel's compile-time parameters and warps."""

    programs: int
    constexprs: dict  # of the placing launch; the counting launch (two launches) differs as counting() says
    num_warps: int

    @property
    def launches(self) -> int:
        return 1 if self.constexprs["STAGE"] == PER_BIN else 2


def plan_launch(call: PlanCall, programmatic: bool = False) -> PlanLaunch:
    """How a plan call is launched (a pure function of the call: tests read it without running a kernel).
    ``programmatic``: launched with programmatic dependent launch (``launch.programmatic_launch_ok``), so that the
    launch overlaps the end of the stream's previous kernel (route()'s, in ``route_plan``). The map's role and the
    scatter index are runtime arguments (``plan_arguments``): they choose no binary."""
    common = dict(LAYOUT=BLOCKS if call.block_size else GROUPED, ROWS=TABLE_ROWS, TAIL=FILL_ENTRIES,
                  GRID_WAIT=programmatic)
    bins = one_launch_bins(call.experts)
    if call.slots <= one_launch_limit(bins):
        slots = next(size for size in SLOT_CLASSES if call.slots <= size)
        programs = (call.local_experts if call.map_mode == MAP_BINS else call.experts) + 1  # a bin each, the dropped
        # both layouts share the binary: PER_BIN reads the layout as a runtime argument (plan_arguments)
        return PlanLaunch(programs, dict(STAGE=PER_BIN, BINS=bins, SLOTS=slots, **{**common, "LAYOUT": BLOCKS}),
                          slot_warps(slots, bins))
    bins = chunk_bins(call.experts)
    chunk = chunk_slots(call.slots, bins)
    return PlanLaunch(triton.cdiv(call.slots, chunk), dict(STAGE=PLACE_CHUNK, BINS=bins, SLOTS=chunk, **common),
                      chunk_warps(bins, chunk))


def chunk_bins(experts: int) -> int:
    """The histogram of the chunked path: a bin an expert and one for the dropped slots, rounded up to a power of
    two."""
    return triton.next_power_of_2(experts + 1)


def counting(constexprs: dict) -> dict:
    """The counting launch's constexprs: the layout does not reach it, so both layouts share one binary."""
    return {**constexprs, "STAGE": COUNT, "LAYOUT": BLOCKS}


def launch_plan(call: PlanCall, ids: torch.Tensor, expert_map: torch.Tensor | None, sorted_ids=None, expert_ids=None,
                post_padded=None, scatter=None, permutation=None, offsets=None, launch: PlanLaunch | None = None) -> None:
    """Build the plan of ``ids`` (contiguous [T, K]) into the given buffers (those of its layout). ``launch`` forces
    the launches (tests); without it a GPU call whose key launched before takes the direct path."""
    index = None  # the GPU of a call that may take the direct path
    if launch is None and ids.is_cuda:
        index = ids.get_device()
        if index != _current_device():  # Triton launches on the current device, as the direct path does
            with torch.cuda.device(index):
                return launch_plan(call, ids, expert_map, sorted_ids, expert_ids, post_padded, scatter, permutation,
                                   offsets)
        launch = _launches.get((call, index)) or _remember(_launches, (call, index),
                                                           plan_launch(call, programmatic_launch_ok(index)))
    elif launch is None:
        launch = plan_launch(call)
    args, constexprs = plan_arguments(call, ids, expert_map, sorted_ids, expert_ids, post_padded, scatter,
                                      permutation, offsets, launch)
    key = None if index is None else _direct_key(call, index, args)
    direct = _direct.get(key)
    if direct is not None and not _hooks_installed():
        stream = _raw_stream(index)
        for run, function, cooperative, pdl, metadata, constants in direct.kernels:
            run(launch.programs, 1, 1, stream, function, cooperative, pdl, None, None, metadata, None, None, None,
                *args, *constants)
        return
    options = dict(num_warps=launch.num_warps, launch_pdl=True) if constexprs["GRID_WAIT"] else dict(
        num_warps=launch.num_warps)
    compiled = []
    if launch.launches == 2:
        compiled.append(plan_kernel[(launch.programs,)](*args, **counting(constexprs), **options))
    compiled.append(plan_kernel[(launch.programs,)](*args, **constexprs, **options))
    if key is not None and key not in _direct:
        stages = [counting(constexprs)] * (launch.launches == 2) + [constexprs]
        _remember(_direct, key, _DirectPlan(compiled, stages) if all(map(_direct_launch_supported, compiled)) else None)


# The direct path's caches: a plan call's launches by (call, device), and its binaries' C launchers by the key below.
# Each is cleared when it reaches CACHE_ENTRIES (a key per token count: an engine's eager batch sizes).
CACHE_ENTRIES = 4096
_launches: dict[tuple, PlanLaunch] = {}
_direct: dict[tuple, "_DirectPlan | None"] = {}
_INT32_LIMIT = 2**31  # Triton types an int argument i32 below it, i64 from it (a different binary)


class _DirectPlan:
    """A plan key's compiled launches (the counting one first where there are two), each as its C launcher and what
    it is called with besides the arguments: Triton's launch without its per-call binder."""

    __slots__ = ("kernels",)

    def __init__(self, compiled: list, stages: list[dict]):
        self.kernels = tuple(
            (kernel.run.launch, kernel.function, kernel.run.launch_cooperative_grid, kernel.run.launch_pdl,
             kernel.packed_metadata, _constants(kernel, constexprs)) for kernel, constexprs in zip(compiled, stages))


def _constants(kernel, constexprs: dict) -> tuple:
    """The constexprs' values in the kernel's parameter order, as the C launcher takes them after the arguments."""
    return tuple(constexprs[name] for name, kind in kernel.src.signature.items() if kind == "constexpr")


def _direct_key(call: PlanCall, index: int, args: tuple) -> tuple | None:
    """What Triton's binder keys a plan launch on beyond its constexprs (which the call and device fix): each
    pointer's dtype (the ids' and the map's can differ) and 16-byte alignment, and the width of the buffer lengths
    (the other int arguments follow from the call). None where a length needs 64 bits (Triton's own path then)."""
    if args[13] >= _INT32_LIMIT:
        return None
    unaligned = 0
    for bit, tensor in enumerate(args[:9]):
        unaligned |= (tensor.data_ptr() & 15 != 0) << bit
    return call, index, args[0].dtype, args[1].dtype, unaligned


def _remember(cache: dict, key, value):
    if len(cache) >= CACHE_ENTRIES:
        cache.clear()
    cache[key] = value
    return value


def forget_plan_launchers() -> None:
    """Drop the direct path's caches (tests; the next call of each key goes through Triton's binder)."""
    _launches.clear()
    _direct.clear()


def plan_arguments(call: PlanCall, ids, expert_map, sorted_ids, expert_ids, post_padded, scatter, permutation,
                   offsets, launch: PlanLaunch) -> tuple[tuple, dict]:
    """The kernel's runtime arguments and constexprs; the counting launch's workspace allocated here where the plan
    takes two launches. A pointer the launch does not use (the other layout's buffers, a missing scatter index or
    map, the workspace of one launch) is given one of the layout's own int32 outputs, never read or written there,
    so that a binary does not depend on which of them a call passes nor on the ids' dtype."""
    blocks = call.block_size > 0
    spare = sorted_ids if blocks else permutation
    counts = spare
    if launch.launches == 2:
        counts = torch.empty(launch.programs * launch.constexprs["BINS"], dtype=torch.int32, device=ids.device)
    args = (ids, spare if expert_map is None else expert_map, counts,
            sorted_ids if blocks else spare, expert_ids if blocks else spare, post_padded if blocks else spare,
            scatter if scatter is not None else spare,
            spare if blocks else permutation, spare if blocks else offsets,
            call.slots, call.experts, call.local_experts, max(call.block_size, 1),
            sorted_ids.shape[0] if blocks else 0, expert_ids.shape[0] if blocks else 0, launch.programs,
            call.map_mode, int(scatter is not None), BLOCKS if blocks else GROUPED)
    return args, launch.constexprs
