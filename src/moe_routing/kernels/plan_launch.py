"""The dispatch plan's launch: one program for small plans (one launch), chunks of slots beyond (two launches: the
chunks' histograms, then the placing), with no host round trip either way."""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton

from ..plan_call import MAP_BINS, NO_MAP, PlanCall
from ._plan import BLOCKS, COUNT, GROUPED, PLACE_COUNTED, PLACE_OWN, plan_kernel

ONE_PROGRAM_SLOTS = 4096  # plans of up to this many slots (T * K) take one program: one launch
CHUNK_SLOTS = 4096  # slots a program beyond
SUB_SLOTS = 64  # slots ranked at once (all pairs: SUB_SLOTS**2 comparisons)
FILL_ENTRIES = 1024  # entries of the blocks layout's fill a program writes at once
NUM_WARPS = 8  # (4 warps spilled scalar registers on AMD GPUs: compile-check)


class PlanLaunch(NamedTuple):
    """The launches of one plan: its programs, the slots each places, and the kernel's compile-time parameters."""

    programs: int
    chunk: int
    constexprs: dict  # of the placing launch; the counting launch (programs > 1) differs in STAGE only


def plan_launch(call: PlanCall, scatter: bool = False) -> PlanLaunch:
    """How a plan call is launched (a pure function of the call: tests read it without running a kernel)."""
    one = call.slots <= ONE_PROGRAM_SLOTS
    programs = 1 if one else triton.cdiv(call.slots, CHUNK_SLOTS)
    constexprs = dict(STAGE=PLACE_OWN if one else PLACE_COUNTED, LAYOUT=BLOCKS if call.block_size else GROUPED,
                      MAP_MODE=call.map_mode, SCATTER=scatter, BINS=triton.next_power_of_2(call.experts + 1),
                      SUB=SUB_SLOTS, TAIL=FILL_ENTRIES)
    return PlanLaunch(programs, max(call.slots, 1) if one else CHUNK_SLOTS, constexprs)


def launch_plan(call: PlanCall, ids: torch.Tensor, expert_map: torch.Tensor | None, sorted_ids=None, expert_ids=None,
                post_padded=None, scatter=None, permutation=None, offsets=None, launch: PlanLaunch | None = None) -> None:
    """Build the plan of ``ids`` (contiguous [T, K]) into the given buffers (those of its layout)."""
    if launch is None:
        launch = plan_launch(call, scatter is not None)
    args, constexprs = plan_arguments(call, ids, expert_map, sorted_ids, expert_ids, post_padded, scatter,
                                      permutation, offsets, launch)
    if launch.programs > 1:
        plan_kernel[(launch.programs,)](*args, **counting(constexprs), num_warps=NUM_WARPS)
    plan_kernel[(launch.programs,)](*args, **constexprs, num_warps=NUM_WARPS)


def counting(constexprs: dict) -> dict:
    """The counting launch's constexprs: the layout (the blocks layout's fill) and the map's role in the bins matter
    to it, so every scatter choice and both roles of a map that leave the bins global share one binary."""
    return {**constexprs, "STAGE": COUNT, "SCATTER": False,
            "MAP_MODE": MAP_BINS if constexprs["MAP_MODE"] == MAP_BINS else NO_MAP}


def plan_arguments(call: PlanCall, ids, expert_map, sorted_ids, expert_ids, post_padded, scatter, permutation,
                   offsets, launch: PlanLaunch) -> tuple[tuple, dict]:
    """The kernel's runtime arguments and constexprs (a layout's missing buffers replaced by ``ids``, never
    written); the counting launch's workspace allocated here where the plan takes two launches."""
    counts = ids
    if launch.programs > 1:
        counts = torch.empty(launch.programs * launch.constexprs["BINS"], dtype=torch.int32, device=ids.device)
    blocks = call.block_size > 0
    args = (ids, ids if expert_map is None else expert_map, counts,
            sorted_ids if blocks else ids, expert_ids if blocks else ids, post_padded if blocks else ids,
            scatter if scatter is not None else ids,
            ids if blocks else permutation, ids if blocks else offsets,
            call.slots, call.experts, call.local_experts, max(call.block_size, 1),
            sorted_ids.shape[0] if blocks else 0, expert_ids.shape[0] if blocks else 0, launch.chunk)
    return args, launch.constexprs
