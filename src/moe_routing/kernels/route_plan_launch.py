"""route_plan in one launch (kernels/_route_plan.py, kernels/_route_plan_grid.py): which calls take it, which kernel,
the tile and grid they route with, and the launch.

Calls whose rule is the bitonic kernel's take one launch where an H100 measured it faster than route()'s launch then
the plan kernel's (plan_launch.py), two elsewhere (benchmarks/NOTES.md):

* one token: the one-program kernel (``one_program_tile``), which routes the row on the rule's own plan (route()'s
  binary at decode: one row on one warp) and then builds the plan itself;
* from ``plan_call.ONE_LAUNCH_FROM``'s token count for the call's experts, up to ``ONE_LAUNCH_TOKENS``, without an
  expert map: the grid kernel (``grid_tile``) on route()'s own tile and grid, whose programs count their slots in a
  workspace (route_plan_workspace.py), wait for one another and place their own slots. Every program must be
  resident at once (``_all_resident``), else two launches.

As for route() and the plan kernel, a GPU call whose key launched before calls the compiled binary's C launcher
directly, skipping Triton's per-call binder (``_launchers``).
"""

from __future__ import annotations

import torch
import triton

from ..call import RoutingCall
from ..plan_call import NO_MAP, ONE_LAUNCH_TOKENS, PlanCall, one_launch_from
from ._plan import BLOCKS, GROUPED
from ._route_plan import route_plan_kernel
from ._route_plan_grid import PLAN, ROUTE, route_plan_grid_kernel
from .launch import (_current_device, _direct_launch_supported, _hooks_installed, _int_class, _raw_stream,
                     dense_outputs, rule_plan)
from .plan_launch import FILL_ENTRIES, _remember, chunk_bins
from .route_plan_workspace import workspace
from .rules import Plan

# the constexprs' names in each kernel's parameter order (the one-program kernel's, the grid kernel's): the C
# launcher takes their values after the arguments
_CONSTEXPR_NAMES = {grid: tuple(p.name for p in getattr(kernel, "params", ()) if p.is_constexpr)
                    for grid, kernel in ((False, route_plan_kernel), (True, route_plan_grid_kernel))}
COUNT_TILE = 256  # a count block's slots (the grid kernel's TILE): a program compares at most this many ids
COUNT_BLOCKS = 16  # calls of more count blocks take two launches (the grid kernel's EARLIER: all read at once)


def one_program_tile(routing: Plan, tokens: int) -> Plan | None:
    """The routing tile of a one-program route_plan of ``tokens`` tokens, from the rule's plan for the call
    (``routing``): that plan itself at one token where the rule's kernel is the bitonic one, else None."""
    return routing if routing.name == "bitonic" and tokens == 1 else None


def grid_tile(routing: Plan, tokens: int, mapped: bool = False) -> Plan | None:
    """The routing tile of a grid-kernel route_plan of ``tokens`` tokens (``mapped``: with an expert map), from the
    rule's plan for the call (``routing``): that plan itself, or None where the call does not take the grid kernel
    (the rule's kernel is not the bitonic one, a map, fewer tokens than ``one_launch_from`` or more than
    ``ONE_LAUNCH_TOKENS``, a program's slots more than a count block's, more than ``COUNT_BLOCKS`` count blocks)."""
    if routing.name != "bitonic" or mapped:
        return None
    first = one_launch_from(routing.constexprs["NUM_EXPERTS"])
    if first is None or not max(first, 2) <= tokens <= ONE_LAUNCH_TOKENS:
        return None
    if own_slots(routing) > COUNT_TILE or count_blocks(routing, tokens) > COUNT_BLOCKS:
        return None
    return routing


def own_slots(tile: Plan) -> int:
    """The slots a program of ``tile`` holds, rounded up to a power of two (the grid kernel's OWN)."""
    return triton.next_power_of_2(tile.rows * tile.constexprs["TOPK"])


def count_blocks(tile: Plan, tokens: int) -> int:
    """The grid kernel's count blocks for ``tokens`` tokens on ``tile``: ``COUNT_TILE // own_slots`` consecutive
    programs each."""
    return triton.cdiv(triton.cdiv(tokens, tile.rows), COUNT_TILE // own_slots(tile))


def region_entries(bins: int, blocks: int) -> int:
    """The counts a grid launch of ``blocks`` count blocks uses: every bin's total, then each block's counts where
    there are several blocks (the kernel's extent)."""
    return bins * (blocks + 1 if blocks > 1 else 1)


def launch_route_plan(call: RoutingCall, plan_call: PlanCall, logits, bias, weights, ids, padding, expert_map,
                      sorted_ids=None, expert_ids=None, post_padded=None, permutation=None, offsets=None) -> bool:
    """Route ``logits`` into ``weights``/``ids`` (dense [T, K]) and build the plan of the ids into the layout's
    buffers, in one launch; False (nothing launched) where the call takes two launches."""
    index = logits.get_device() if logits.is_cuda else None
    key = None
    if index is not None:
        if index != _current_device():  # kernels launch on the current device
            with torch.cuda.device(index):
                return launch_route_plan(call, plan_call, logits, bias, weights, ids, padding, expert_map,
                                         sorted_ids, expert_ids, post_padded, permutation, offsets)
        key = _launcher_key(call, plan_call, logits, bias, weights, ids, expert_map, padding, index)
        direct = _launchers.get(key)
        if direct is _TWO_LAUNCHES:
            return False
        if type(direct) is tuple and not _hooks_installed():
            launch, function, cooperative, pdl, metadata, constants, programs, region, largest = direct
            stream = _raw_stream(index)
            args = _arguments(call, plan_call, logits, bias, weights, ids, padding, expert_map, sorted_ids,
                              expert_ids, post_padded, permutation, offsets)
            if programs > 1:  # the grid kernel
                work = workspace(index, stream, region, largest)
                if work is None:
                    return False
                args += (work[1], work[2])
            launch(programs, 1, 1, stream, function, cooperative, pdl, None, None, metadata, None, None, None,
                   *args, *constants)
            return True
    routing = rule_plan(call, logits, bias, dense_outputs(weights, ids, call.topk))
    grid = call.tokens > 1
    if grid:
        tile, kernel = grid_tile(routing, call.tokens, plan_call.map_mode != NO_MAP), route_plan_grid_kernel
    else:
        tile, kernel = one_program_tile(routing, 1), route_plan_kernel
    if tile is None:
        if key is not None:
            _remember(_launchers, key, _TWO_LAUNCHES)
        return False
    programs = triton.cdiv(call.tokens, tile.rows)
    constexprs = {**tile.constexprs, **plan_constexprs(call, tile, grid)}
    options = dict(num_warps=tile.num_warps)
    if constexprs["GRID_WAIT"]:
        options["launch_pdl"] = True
    args = _arguments(call, plan_call, logits, bias, weights, ids, padding, expert_map, sorted_ids, expert_ids,
                      post_padded, permutation, offsets)
    region = largest = 0
    if grid:
        region = region_entries(constexprs["BINS"], count_blocks(tile, call.tokens))
        largest = region_entries(constexprs["BINS"], COUNT_BLOCKS)
        work = workspace(index, None if index is None else _raw_stream(index), region, largest)
        if work is None:
            return False
        args += (work[0], work[2])
        if index is None:  # Triton's interpreter runs the programs one after another: the two parts, one launch each
            for parts in (ROUTE, PLAN):
                kernel[(programs,)](*args, **{**constexprs, "PARTS": parts}, **options)
            return True
        compiled = kernel.warmup(*args, grid=(programs,), **constexprs, **options)
        if not _all_resident(compiled, programs, index):
            _remember(_launchers, key, _TWO_LAUNCHES)
            return False
    compiled = kernel[(programs,)](*args, **constexprs, **options)
    if key is not None and key not in _launchers:
        entry = _TRITON_PATH
        if _direct_launch_supported(compiled):
            runner = compiled.run
            entry = (runner.launch, compiled.function, runner.launch_cooperative_grid, runner.launch_pdl,
                     compiled.packed_metadata, tuple(constexprs[name] for name in _CONSTEXPR_NAMES[grid]),
                     programs, region, largest)
        _remember(_launchers, key, entry)
    return True


def _all_resident(compiled, programs: int, index: int) -> bool:
    """Whether ``programs`` programs of ``compiled`` can all run at once on device ``index`` with room to spare: at
    most half of what its multiprocessors hold by threads, registers and shared memory (NVIDIA), at most one a
    compute unit (AMD, where occupancy is not computed here). Each program waits for every other one, so a launch
    of more than can be resident would never end."""
    properties = torch.cuda.get_device_properties(index)
    units = properties.multi_processor_count
    if torch.version.hip is not None:
        return programs <= units
    threads = compiled.metadata.num_warps * 32
    per_unit = getattr(properties, "max_threads_per_multi_processor", 2048) // threads
    registers = getattr(compiled, "n_regs", 0)
    if registers:
        per_unit = min(per_unit, getattr(properties, "regs_per_multiprocessor", 65536) // (registers * threads))
    shared = compiled.metadata.shared
    if shared:
        per_unit = min(per_unit, getattr(properties, "shared_memory_per_multiprocessor", 0) // shared)
    return programs <= units * per_unit // 2


def one_launch_tiles(routing: Plan) -> list[tuple[bool, int, Plan]]:
    """(grid, tokens, tile) of a shape's one-launch kernels, from the rule's plan at one token (compile-check): the
    one-program kernel (grid False) at one token, the grid kernel at the first token count that takes it (one binary
    a routing shape: the token count is a runtime argument); none where the calls take two launches."""
    launches = []
    if one_program_tile(routing, 1) is not None:
        launches.append((False, 1, routing))
    first = one_launch_from(routing.constexprs["NUM_EXPERTS"]) if routing.name == "bitonic" else None
    if first is not None and grid_tile(routing, max(first, 2)) is not None:
        launches.append((True, max(first, 2), routing))
    return launches


def plan_constexprs(call: RoutingCall, tile: Plan, grid: bool = False) -> dict:
    """The plan part's constexprs of the one-program kernel or (``grid``) the grid kernel. The one-program kernel:
    the histogram's bins (a bin an expert, the last for the dropped slots), the slots the tile's rows hold (one
    binary a tile), the fill's stretch. The grid
    kernel: the bins, the slots of a program's rows, a count block's slots, the earlier count blocks read at once,
    the fill's stretch, both parts (none depends on the token count: one binary a tile)."""
    if not grid:
        return {"BINS": chunk_bins(call.experts), "SLOTS": max(16, triton.next_power_of_2(tile.rows * call.topk)),
                "TAIL": FILL_ENTRIES}
    return {"BINS": chunk_bins(call.experts), "OWN": own_slots(tile), "TILE": COUNT_TILE, "EARLIER": COUNT_BLOCKS,
            "TAIL": FILL_ENTRIES, "PARTS": ROUTE | PLAN}


def one_launch_arguments(call: RoutingCall, tile: Plan, logits, bias,
                         grid: bool = False) -> tuple[tuple, dict, PlanCall]:
    """The arguments, plan constexprs and plan call of a one-launch call of ``call`` on ``logits`` with ``tile``, on
    the one-program kernel or (``grid``) the grid kernel (any device: compile-check binds them without launching),
    int32 ids and the blocks layout at block size 16."""
    from ..plan_call import check_plan_call

    weights = torch.empty(call.tokens, call.topk, device=logits.device)
    ids = torch.empty(call.tokens, call.topk, dtype=torch.int32, device=logits.device)
    plan_call = check_plan_call(ids, call.experts, 16)
    buffers = [torch.empty(64, dtype=torch.int32, device=logits.device) for _ in range(4)]
    args = _arguments(call, plan_call, logits, bias, weights, ids, None, None, *buffers[:3], None, None)
    if grid:
        args += (buffers[3], 16)
    return args, plan_constexprs(call, tile, grid), plan_call


def _arguments(call: RoutingCall, plan_call: PlanCall, logits, bias, weights, ids, padding, expert_map, sorted_ids,
               expert_ids, post_padded, permutation, offsets) -> tuple:
    """The kernels' runtime arguments but the grid kernel's workspace. A plan pointer the call does not use (the
    other layout's buffers, a missing map) is given one of the layout's own outputs, never read or written there."""
    blocks = plan_call.block_size > 0
    spare = sorted_ids if blocks else permutation
    return (logits, bias, logits.stride(0), weights, ids, weights.stride(0), weights.stride(1), ids.stride(0),
            ids.stride(1), call.tokens, call.scale, padding,
            spare if expert_map is None else expert_map,
            sorted_ids if blocks else spare, expert_ids if blocks else spare, post_padded if blocks else spare,
            spare if blocks else permutation, spare if blocks else offsets,
            plan_call.slots, plan_call.local_experts, max(plan_call.block_size, 1),
            sorted_ids.shape[0] if blocks else 0, expert_ids.shape[0] if blocks else 0,
            plan_call.map_mode, BLOCKS if blocks else GROUPED)


def _launcher_key(call: RoutingCall, plan_call: PlanCall, logits, bias, weights, ids, expert_map, padding,
                  index) -> tuple:
    """What the kernel, the tile, the grid and Triton's binder depend on: the call but its scale, the plan call, the
    dtypes, the device, the logits' and bias's 16-byte alignment and the row stride's class, whether the outputs are
    dense (``launch.dense_outputs``) and whether rows are padded."""
    return (call[:7], plan_call, logits.dtype, None if bias is None else bias.dtype, ids.dtype,
            None if expert_map is None else expert_map.dtype, index, logits.data_ptr() & 15 == 0,
            None if bias is None else bias.data_ptr() & 15 == 0, _int_class(logits.stride(0)),
            dense_outputs(weights, ids, call.topk), padding is None)


# what a key holds: a direct launcher (a tuple), or one of these
_TWO_LAUNCHES = object()  # the call takes route()'s launch and the plan kernel's
_TRITON_PATH = object()  # launched through Triton's binder every time (no direct launcher)
_launchers: dict[tuple, object] = {}


def forget_route_plan_launchers() -> None:
    """Drop the cached launchers (tests: the next call of each key goes through Triton's binder)."""
    _launchers.clear()
