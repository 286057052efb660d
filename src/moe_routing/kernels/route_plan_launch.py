"""route_plan in one launch (kernels/_route_plan.py): which calls take it, the tile and grid its programs route
with, the counters its programs wait on, and the launch.

A call of up to ``ONE_LAUNCH_TOKENS`` tokens whose rule is the bitonic kernel's takes it: route()'s own tile and grid
(at decode, a program a token, one row on one warp) route the rows, wait for one another, then each places its own
slots. Calls the rounds kernel routes take route()'s launch and then the plan kernel's (plan_launch.py), as do
calls whose programs could not all be resident at once (``_all_resident``): the programs wait for one another, so
every one must be running.

The wait counts on two int32 counters a launch, zero between launches (the kernel sets them back): an eager call
takes its stream's pair, so that calls on one stream, which run one after another, share one; a call captured
into a CUDA graph takes a pair of its own, so that graphs replayed side by side never share one.

As for route() and the plan kernel, a GPU call whose key launched before calls the compiled binary's C launcher
directly, skipping Triton's per-call binder (``_launchers``).
"""

from __future__ import annotations

import torch
import triton

from ..call import RoutingCall
from ..plan_call import ONE_LAUNCH_TOKENS, PlanCall
from ._plan import BLOCKS, GROUPED
from ._route_plan import BOTH, PLAN, ROUTE, route_plan_kernel
from .launch import (_current_device, _direct_launch_supported, _hooks_installed, _int_class, _raw_stream,
                     dense_outputs, rule_plan)
from .plan_launch import FILL_ENTRIES, _remember, chunk_bins
from .rules import Plan

# the constexprs' names in the kernel's parameter order: the C launcher takes their values after the arguments
_CONSTEXPR_NAMES = tuple(p.name for p in getattr(route_plan_kernel, "params", ()) if p.is_constexpr)
COUNT_FEW = 64  # plans of up to this many slots count every slot's bin in one tile of this many (the kernel's FEW)
COUNT_SLOTS = 512  # larger plans, this many slots at a time (the kernel's SLOTS)


def one_launch_tile(routing: Plan, tokens: int) -> Plan | None:
    """The routing tile of a one-launch route_plan of ``tokens`` tokens, from the rule's plan for the call
    (``routing``): that plan itself, or None where the call takes two launches (the rule's kernel is not the
    bitonic one, or more than ``ONE_LAUNCH_TOKENS`` tokens)."""
    if routing.name != "bitonic" or not 1 <= tokens <= ONE_LAUNCH_TOKENS:
        return None
    return routing


def one_launch_ok(call: RoutingCall) -> bool:
    """Whether the call's size lets one launch route and plan it (the tile decides the rest)."""
    return 1 <= call.tokens <= ONE_LAUNCH_TOKENS


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
            stream = _raw_stream(index)
            sync = _stream_pair(index, stream)
            if sync is None:
                return False
            args = _arguments(call, plan_call, logits, bias, weights, ids, padding, expert_map, sorted_ids,
                              expert_ids, post_padded, permutation, offsets, sync[1])
            launch, function, cooperative, pdl, metadata, constants, programs = direct
            launch(programs, 1, 1, stream, function, cooperative, pdl, None, None, metadata, None, None, None,
                   *args, *constants)
            return True
    tile = one_launch_tile(rule_plan(call, logits, bias, dense_outputs(weights, ids, call.topk)), call.tokens)
    if tile is None:
        if key is not None:
            _remember(_launchers, key, _TWO_LAUNCHES)
        return False
    programs = triton.cdiv(call.tokens, tile.rows)
    constexprs = {**tile.constexprs, **plan_constexprs(call, tile)}
    options = dict(num_warps=tile.num_warps)
    if constexprs["GRID_WAIT"]:
        options["launch_pdl"] = True
    if index is None:  # Triton's interpreter runs the programs one after another: the two parts, one launch each
        for parts in (ROUTE, PLAN):
            args = _arguments(call, plan_call, logits, bias, weights, ids, padding, expert_map, sorted_ids,
                              expert_ids, post_padded, permutation, offsets, ids)
            route_plan_kernel[(programs,)](*args, **{**constexprs, "PARTS": parts}, **options)
        return True
    sync = _stream_pair(index, _raw_stream(index))
    if sync is None:
        return False
    args = _arguments(call, plan_call, logits, bias, weights, ids, padding, expert_map, sorted_ids, expert_ids,
                      post_padded, permutation, offsets, sync[0])
    compiled = route_plan_kernel.warmup(*args, grid=(programs,), **constexprs, **options)
    if not _all_resident(compiled, programs, index):
        _remember(_launchers, key, _TWO_LAUNCHES)
        return False
    route_plan_kernel[(programs,)](*args, **constexprs, **options)
    if key not in _launchers:
        entry = _TRITON_PATH
        if _direct_launch_supported(compiled):
            runner = compiled.run
            entry = (runner.launch, compiled.function, runner.launch_cooperative_grid, runner.launch_pdl,
                     compiled.packed_metadata, tuple(constexprs[name] for name in _CONSTEXPR_NAMES), programs)
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


def one_launch_tiles(routing: Plan) -> list[tuple[int, Plan]]:
    """(tokens, tile) for each distinct tile of a shape's one-launch calls, from the rule's plan at one token
    (compile-check): the largest token count of each tile."""
    tiles = {}
    for tokens in range(1, ONE_LAUNCH_TOKENS + 1):
        tile = one_launch_tile(routing, tokens)
        if tile is not None:
            tiles[repr(tile)] = (tokens, tile)
    return list(tiles.values())


def plan_constexprs(call: RoutingCall, tile: Plan, parts: int = BOTH) -> dict:
    """The plan part's constexprs: the histogram's bins (a bin an expert, the last for the dropped slots), the slots
    of a program's rows, the slots counted at once (small plans, larger ones), the fill's stretch, the parts the
    launch runs. None depends on
    the token count: one binary a tile."""
    return {"BINS": chunk_bins(call.experts), "OWN": triton.next_power_of_2(tile.rows * call.topk),
            "FEW": COUNT_FEW, "SLOTS": COUNT_SLOTS, "TAIL": FILL_ENTRIES, "PARTS": parts}


def one_launch_arguments(call: RoutingCall, tile: Plan, logits, bias) -> tuple[tuple, dict, PlanCall]:
    """The arguments, plan constexprs and plan call of a one-launch call of ``call`` on ``logits`` with ``tile``
    (any device: compile-check binds them without launching), int32 ids and the blocks layout at block size 16."""
    from ..plan_call import check_plan_call

    weights = torch.empty(call.tokens, call.topk, device=logits.device)
    ids = torch.empty(call.tokens, call.topk, dtype=torch.int32, device=logits.device)
    plan_call = check_plan_call(ids, call.experts, 16)
    buffers = [torch.empty(64, dtype=torch.int32, device=logits.device) for _ in range(4)]
    args = _arguments(call, plan_call, logits, bias, weights, ids, None, None, *buffers[:3], None, None, buffers[3])
    return args, plan_constexprs(call, tile), plan_call


def _arguments(call: RoutingCall, plan_call: PlanCall, logits, bias, weights, ids, padding, expert_map, sorted_ids,
               expert_ids, post_padded, permutation, offsets, sync) -> tuple:
    """The kernel's runtime arguments. A plan pointer the call does not use (the other layout's buffers, a missing
    map) is given one of the layout's own outputs, never read or written there; ``sync``: the launch's counters
    (a tensor or an address)."""
    blocks = plan_call.block_size > 0
    spare = sorted_ids if blocks else permutation
    return (logits, bias, logits.stride(0), weights, ids, weights.stride(0), weights.stride(1), ids.stride(0),
            ids.stride(1), call.tokens, call.scale, padding,
            spare if expert_map is None else expert_map,
            sorted_ids if blocks else spare, expert_ids if blocks else spare, post_padded if blocks else spare,
            spare if blocks else permutation, spare if blocks else offsets,
            plan_call.slots, plan_call.local_experts, max(plan_call.block_size, 1),
            sorted_ids.shape[0] if blocks else 0, expert_ids.shape[0] if blocks else 0,
            plan_call.map_mode, BLOCKS if blocks else GROUPED, sync)


def _launcher_key(call: RoutingCall, plan_call: PlanCall, logits, bias, weights, ids, expert_map, padding,
                  index) -> tuple:
    """What the tile and Triton's binder depend on: the call but its scale, the plan call, the dtypes, the device,
    the logits' and bias's 16-byte alignment and the row stride's class, whether the outputs are dense
    (``launch.dense_outputs``) and whether rows are padded."""
    return (call[:7], plan_call, logits.dtype, None if bias is None else bias.dtype, ids.dtype,
            None if expert_map is None else expert_map.dtype, index, logits.data_ptr() & 15 == 0,
            None if bias is None else bias.data_ptr() & 15 == 0, _int_class(logits.stride(0)),
            dense_outputs(weights, ids, call.topk), padding is None)


# what a key holds: a direct launcher (a tuple), or one of these
_TWO_LAUNCHES = object()  # the call takes route()'s launch and the plan kernel's
_TRITON_PATH = object()  # launched through Triton's binder every time (no direct launcher)
_launchers: dict[tuple, object] = {}

# ---- the counters the programs wait on -------------------------------------------------------------------------

SYNC_ENTRIES = 4  # int32 entries a pair of counters takes: 16 bytes, every pair aligned alike
SYNC_PAIRS = 65536  # pairs allocated at once, outside any capture (1 MiB, zeroed once; launches leave them at zero)
_pools: dict[int, list] = {}  # device -> [the current block of pairs, the next free pair in it]
_blocks: list[torch.Tensor] = []  # every block allocated: graphs captured earlier keep using their pairs
_stream_pairs: dict[tuple[int, int], tuple[torch.Tensor, int]] = {}  # (device, raw stream) -> its pair, address


def _new_pair(index: int, capturing: bool) -> torch.Tensor | None:
    """A pair of counters no launch uses yet, on device ``index``; None while capturing when the block is used up
    (a block allocated during a capture would be zeroed only when the graph runs)."""
    pool = _pools.get(index)
    if pool is None or pool[1] == SYNC_PAIRS:
        if capturing:
            return None
        pool = _pools[index] = [torch.zeros(SYNC_PAIRS * SYNC_ENTRIES, dtype=torch.int32, device=index), 0]
        _blocks.append(pool[0])
    pair = pool[0][pool[1] * SYNC_ENTRIES:(pool[1] + 1) * SYNC_ENTRIES]
    pool[1] += 1
    return pair


def _stream_pair(index: int, stream: int) -> tuple[torch.Tensor, int] | None:
    """The counters of a launch on ``stream`` of device ``index`` and their address: the stream's own pair, or a new
    pair for a launch being captured into a CUDA graph (None: none left, the call takes two launches)."""
    if torch.cuda.is_current_stream_capturing():
        pair = _new_pair(index, True)
        return None if pair is None else (pair, pair.data_ptr())
    entry = _stream_pairs.get((index, stream))
    if entry is None:
        pair = _new_pair(index, False)
        entry = _stream_pairs[(index, stream)] = (pair, pair.data_ptr())
    return entry


def forget_route_plan_launchers() -> None:
    """Drop the cached launchers (tests: the next call of each key goes through Triton's binder)."""
    _launchers.clear()
