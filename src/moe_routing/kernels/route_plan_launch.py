"""route_plan in one launch (kernels/_route_plan.py): which calls take it, the tile its program routes with, and
the launch.

A call of one token (``ONE_PROGRAM_TOKENS``) whose rule is the bitonic kernel's takes it: one program routes the row
on the rule's own plan (route()'s binary at decode: one row on one warp), then builds the plan. Larger calls, and
calls the rounds kernel routes, take route()'s launch and then the plan kernel's (plan_launch.py): one program
routing more rows side by side on a streaming tile was slower than the two launches on an H100 at every count tried
(2, 4, 8 and 16 tokens: benchmarks/NOTES.md, "route_plan in one program").

As for route() and the plan kernel, a GPU call whose key launched before calls the compiled binary's C launcher
directly, skipping Triton's per-call binder (``_launchers``).
"""

from __future__ import annotations

import torch
import triton

from ..call import RoutingCall
from ..plan_call import ONE_PROGRAM_TOKENS, PlanCall
from ._plan import BLOCKS, GROUPED
from ._route_plan import route_plan_kernel
from .launch import (_current_device, _direct_launch_supported, _hooks_installed, _int_class, _raw_stream,
                     dense_outputs, rule_plan)
from .plan_launch import FILL_ENTRIES, _remember, chunk_bins
from .rules import Plan

# the constexprs' names in the kernel's parameter order: the C launcher takes their values after the arguments
_CONSTEXPR_NAMES = tuple(p.name for p in getattr(route_plan_kernel, "params", ()) if p.is_constexpr)


def one_program_tile(routing: Plan, tokens: int) -> Plan | None:
    """The routing tile of a one-program route_plan of ``tokens`` tokens, from the rule's plan for the call
    (``routing``): that plan itself, or None where the call takes two launches (the rule's kernel is not the
    bitonic one, or more than ``ONE_PROGRAM_TOKENS`` tokens)."""
    if routing.name != "bitonic" or not 1 <= tokens <= ONE_PROGRAM_TOKENS:
        return None
    return routing


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
            args = _arguments(call, plan_call, logits, bias, weights, ids, padding, expert_map, sorted_ids,
                              expert_ids, post_padded, permutation, offsets)
            launch, function, cooperative, pdl, metadata, constants = direct
            launch(1, 1, 1, _raw_stream(index), function, cooperative, pdl, None, None, metadata, None, None, None,
                   *args, *constants)
            return True
    tile = one_program_tile(rule_plan(call, logits, bias, dense_outputs(weights, ids, call.topk)), call.tokens)
    if tile is None:
        if key is not None:
            _remember(_launchers, key, _TWO_LAUNCHES)
        return False
    constexprs = {**tile.constexprs, **plan_constexprs(call, tile)}
    options = dict(num_warps=tile.num_warps)
    if constexprs["GRID_WAIT"]:
        options["launch_pdl"] = True
    args = _arguments(call, plan_call, logits, bias, weights, ids, padding, expert_map, sorted_ids, expert_ids,
                      post_padded, permutation, offsets)
    compiled = route_plan_kernel[(1,)](*args, **constexprs, **options)
    if key is not None and key not in _launchers:
        entry = None
        if _direct_launch_supported(compiled):
            runner = compiled.run
            entry = (runner.launch, compiled.function, runner.launch_cooperative_grid, runner.launch_pdl,
                     compiled.packed_metadata, tuple(constexprs[name] for name in _CONSTEXPR_NAMES))
        _remember(_launchers, key, entry if entry is not None else _TRITON_PATH)
    return True


def one_program_tiles(routing: Plan) -> list[tuple[int, Plan]]:
    """(tokens, tile) of a shape's one-program launches, from the rule's plan at one token (compile-check): the
    rule's plan itself at the largest token count it takes, or none."""
    tile = one_program_tile(routing, ONE_PROGRAM_TOKENS)
    return [] if tile is None else [(ONE_PROGRAM_TOKENS, tile)]


def plan_constexprs(call: RoutingCall, tile: Plan) -> dict:
    """The plan part's constexprs: the histogram's bins (a bin an expert, the last for the dropped slots), the slots
    the tile's rows hold (one binary a tile), the fill's stretch."""
    return {"BINS": chunk_bins(call.experts), "SLOTS": max(16, triton.next_power_of_2(tile.rows * call.topk)),
            "TAIL": FILL_ENTRIES}


def one_program_arguments(call: RoutingCall, tile: Plan, logits, bias) -> tuple[tuple, dict, PlanCall]:
    """The arguments, plan constexprs and plan call of a one-program launch of ``call`` on ``logits`` with ``tile``
    (any device: compile-check binds them without launching), int32 ids and the blocks layout at block size 16."""
    from ..plan_call import check_plan_call

    weights = torch.empty(call.tokens, call.topk, device=logits.device)
    ids = torch.empty(call.tokens, call.topk, dtype=torch.int32, device=logits.device)
    plan_call = check_plan_call(ids, call.experts, 16)
    buffers = [torch.empty(64, dtype=torch.int32, device=logits.device) for _ in range(3)]
    args = _arguments(call, plan_call, logits, bias, weights, ids, None, None, *buffers, None, None)
    return args, plan_constexprs(call, tile), plan_call


def _arguments(call: RoutingCall, plan_call: PlanCall, logits, bias, weights, ids, padding, expert_map, sorted_ids,
               expert_ids, post_padded, permutation, offsets) -> tuple:
    """The kernel's runtime arguments. A plan pointer the call does not use (the other layout's buffers, a missing
    map) is given one of the layout's own outputs, never read or written there."""
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


def forget_route_plan_launchers() -> None:
    """Drop the cached launchers (tests: the next call of each key goes through Triton's binder)."""
    _launchers.clear()
