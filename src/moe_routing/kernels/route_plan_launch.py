"""The routing stage's launches: route() and the dispatch plan in one launch where the plan fits one (up to
``plan_launch.ONE_LAUNCH_SLOTS`` slots), in two beyond (route() with the plan's counting, then the placing), with
no host round trip (kernels/_route_plan.py).

Calls whose route() plan is not the bitonic kernel's (softmax with a bias or grouped, grouped sqrt-softplus: the
rounds kernel) and ids that are not contiguous take route()'s launch and the plan's launches one after the other
(``stage_launch`` says None)."""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton

from ..call import RoutingCall
from ..plan_call import PlanCall
from ._route_plan import route_plan_kernel
from ._plan import plan_kernel
from .launch import _raw_stream, dense_outputs, programmatic_launch_ok, rule_plan, triton_arguments
from .plan_launch import ONE_LAUNCH_SLOTS, PER_BIN, PlanLaunch, counting, plan_arguments, plan_launch
from .rules import Plan


class StageLaunch(NamedTuple):
    """The routing stage's launches: route()'s plan, the dispatch plan's, the first launch's warps."""

    route: Plan
    plan: PlanLaunch
    num_warps: int

    @property
    def launches(self) -> int:
        return self.plan.launches


# the one launch's warps where its plan programs load ONE_LAUNCH_SLOTS lanes: with 8 (the plan kernel's own) or 4,
# the routing and plan code in one binary spill scalar registers on gfx942 (moe-routing compile-check)
WIDE_PLAN_WARPS = 16


def stage_warps(route: Plan, plan: PlanLaunch) -> int:
    """The one launch's warps: the more of route()'s plan's and the plan programs' (a program's warps do not change
    what it computes, only how fast), and ``WIDE_PLAN_WARPS`` where the plan programs load the widest slot class."""
    if plan.constexprs["STAGE"] == PER_BIN and plan.constexprs["SLOTS"] == ONE_LAUNCH_SLOTS:
        return WIDE_PLAN_WARPS
    return max(route.num_warps, plan.num_warps)


def stage_launch(route: Plan, plan: PlanLaunch, ids: torch.Tensor) -> StageLaunch | None:
    """How the routing stage of a call is launched (a pure function: tests read it without running a kernel), or
    None where route() and the plan launch one after the other: route()'s plan not the bitonic kernel's, or ids
    not contiguous (the plan's programs read them as [T * K])."""
    if route.name != "bitonic" or not ids.is_contiguous():
        return None
    return StageLaunch(route, plan, stage_warps(route, plan))


_sync_counters: dict[tuple, torch.Tensor] = {}


def sync_counter(device: torch.device) -> torch.Tensor:
    """The hand-over counter of launches on ``device``'s current stream (zero between launches; one a stream, so
    that launches on different streams, which may run at once, never share one)."""
    index = device.index if device.index is not None or device.type != "cuda" else torch.cuda.current_device()
    key = (device.type, index, _raw_stream(index) if device.type == "cuda" else 0)
    counter = _sync_counters.get(key)
    if counter is None:
        counter = _sync_counters[key] = torch.zeros(1, dtype=torch.int32, device=device)
    return counter


def launch_route_plan(call: RoutingCall, plan_call: PlanCall, logits, bias, weights, ids, padding, expert_map,
                      sorted_ids=None, expert_ids=None, post_padded=None, scatter=None, permutation=None,
                      offsets=None, placing: PlanLaunch | None = None) -> bool:
    """Route ``logits`` into ``weights``/``ids`` and build their plan into the layout's buffers in one launch (two
    beyond one launch's plans); False, launching nothing, where ``stage_launch`` says the launches stay apart.
    ``placing`` forces the plan's launches (tests: the two-launch path on small chunks)."""
    route = rule_plan(call, logits, bias, dense_outputs(weights, ids, call.topk))
    programmatic = ids.is_cuda and programmatic_launch_ok(ids.get_device())
    if placing is None:
        placing = plan_launch(plan_call, programmatic)
    stage = stage_launch(route, placing, ids)
    if stage is None:
        return False
    grid, args, kwargs, plan_args, plan_constexprs = stage_arguments(
        stage, call, plan_call, logits, bias, weights, ids, padding, expert_map, sorted_ids, expert_ids, post_padded,
        scatter, permutation, offsets, sync_counter(ids.device))
    route_plan_kernel[grid](*args, **kwargs)
    if placing.launches == 2:
        options = dict(num_warps=placing.num_warps, launch_pdl=True) if programmatic else dict(
            num_warps=placing.num_warps)
        plan_kernel[(placing.programs,)](*plan_args, **plan_constexprs, **options)
    return True


def stage_arguments(stage: StageLaunch, call: RoutingCall, plan_call: PlanCall, logits, bias, weights, ids, padding,
                    expert_map, sorted_ids, expert_ids, post_padded, scatter, permutation, offsets,
                    sync: torch.Tensor) -> tuple:
    """The first launch's grid, arguments and options, then the plan kernel's arguments and constexprs (for the
    placing launch where there is one); ``moe-routing compile-check`` binds the same ones."""
    route_args, options = triton_arguments(stage.route, call, logits, bias, weights, ids, padding)
    plan_args, plan_constexprs = plan_arguments(plan_call, ids, expert_map, sorted_ids, expert_ids, post_padded,
                                                scatter, permutation, offsets, stage.plan)
    first = plan_constexprs if stage.launches == 1 else counting(plan_constexprs)
    route_programs = triton.cdiv(call.tokens, stage.route.rows)
    options["num_warps"] = stage.num_warps
    kwargs = dict(**options, PLAN_STAGE=first["STAGE"], PLAN_LAYOUT=first["LAYOUT"], PLAN_BINS=first["BINS"],
                  PLAN_SLOTS=first["SLOTS"], PLAN_ROWS=first["ROWS"], PLAN_TAIL=first["TAIL"])
    args = (*route_args, *plan_args[1:], sync, route_programs)
    return (route_programs + stage.plan.programs,), args, kwargs, plan_args, plan_constexprs


__all__ = ["StageLaunch", "launch_route_plan", "stage_arguments", "stage_launch", "stage_warps", "sync_counter"]
