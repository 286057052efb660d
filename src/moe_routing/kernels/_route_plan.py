"""The routing stage in one launch: route()'s bitonic kernel and the dispatch plan's programs in one grid
(docs/kernels.md, "The routing stage in one launch").

Programs ``0 .. route_programs - 1`` route, each exactly as ``bitonic_kernel``'s program of the same index, then
count themselves done on a counter (a release: their weights and ids are visible to whoever reads the count). The
programs after them are the plan's: each waits until the counter holds every routing program, takes the count once
more as an acquire, and runs as ``plan_program`` of index ``pid - route_programs`` (a bin of the one-launch plan, or
a chunk's histogram when the plan takes a second, placing launch). So the plan reads ids that the same launch wrote,
and every entry is still written by one program only: the results are route()'s and align()'s / group()'s bits.

The counter: one int32 of a workspace that is zero before the launch. Plan programs add themselves to it after
waiting; the last of them (it sees every routing and plan program counted) sets it back to zero for the next launch,
which the stream orders after this one. Two launches running at once must not share a workspace
(route_plan_launch.py keeps one a device and stream).

Forward progress: a plan program only waits for programs of lower index, which the GPU dispatches first (NVIDIA and
AMD hand out a one-dimensional grid's programs in increasing order), so every routing program it waits for has
already started and never waits itself.
"""

import triton
import triton.language as tl

from ._bitonic import bitonic_kernel
from ._plan import plan_program


@triton.jit(do_not_specialize=["num_rows", "stride_w_row", "stride_w_col", "stride_i_row", "stride_i_col",
                               "num_slots", "num_experts", "local_experts", "block_size", "sorted_len",
                               "blocks_len", "programs", "map_mode", "scatter", "route_programs"],
            do_not_specialize_on_alignment=["weights_ptr", "ids_ptr"])
def route_plan_kernel(
    # route(): bitonic_kernel's arguments
    logits_ptr, bias_ptr, stride_l_row, weights_ptr, ids_ptr, stride_w_row, stride_w_col, stride_i_row, stride_i_col,
    num_rows, scale, padding_ptr,
    # the plan: plan_kernel's arguments but the ids (``ids_ptr``, [T, K] contiguous)
    map_ptr, counts_ptr, sorted_ptr, expert_ids_ptr, post_padded_ptr, scatter_ptr, permutation_ptr, offsets_ptr,
    num_slots, num_experts, local_experts, block_size, sorted_len, blocks_len, programs, map_mode, scatter,
    # the hand-over
    sync_ptr,  # int32 [1], zero before the launch and after it
    route_programs,  # programs that route (the plan's follow them)
    # bitonic_kernel's constexprs
    TOPK: tl.constexpr, SCORING: tl.constexpr, RENORMALIZE: tl.constexpr, NUM_EXPERTS: tl.constexpr,
    BLOCK_EXPERTS: tl.constexpr, NUM_GROUPS: tl.constexpr, GROUP_SIZE: tl.constexpr, TOPK_GROUP: tl.constexpr,
    BLOCK_GROUPS: tl.constexpr, BLOCK_GROUP_SIZE: tl.constexpr, ROWS: tl.constexpr, LANES: tl.constexpr,
    CHUNK: tl.constexpr, LOG2_CHUNK: tl.constexpr, GROUP: tl.constexpr, GROUPS_PER_LOAD: tl.constexpr,
    PREFETCH: tl.constexpr, WORDS: tl.constexpr, ONE_PASS: tl.constexpr, ROUNDS: tl.constexpr,
    HANDOVER: tl.constexpr, DENSE_OUT: tl.constexpr, CHECKED_STREAM: tl.constexpr, STORE_FIRST: tl.constexpr,
    GRID_WAIT: tl.constexpr,
    # plan_kernel's constexprs (``PLAN_STAGE``: PER_BIN, or COUNT when a placing launch follows)
    PLAN_STAGE: tl.constexpr, PLAN_LAYOUT: tl.constexpr, PLAN_BINS: tl.constexpr, PLAN_SLOTS: tl.constexpr,
    PLAN_ROWS: tl.constexpr, PLAN_TAIL: tl.constexpr,
):
    pid = tl.program_id(0)
    if pid < route_programs:
        bitonic_kernel(logits_ptr, bias_ptr, stride_l_row, weights_ptr, ids_ptr, stride_w_row, stride_w_col,
                       stride_i_row, stride_i_col, num_rows, scale, padding_ptr, TOPK, SCORING, RENORMALIZE,
                       NUM_EXPERTS, BLOCK_EXPERTS, NUM_GROUPS, GROUP_SIZE, TOPK_GROUP, BLOCK_GROUPS,
                       BLOCK_GROUP_SIZE, ROWS, LANES, CHUNK, LOG2_CHUNK, GROUP, GROUPS_PER_LOAD, PREFETCH, WORDS,
                       ONE_PASS, ROUNDS, HANDOVER, DENSE_OUT, CHECKED_STREAM, STORE_FIRST, GRID_WAIT)
        tl.debug_barrier()  # every thread's stores before the count
        tl.atomic_add(sync_ptr, 1, sem="release", scope="gpu")
    else:
        while tl.load(sync_ptr, volatile=True) < route_programs:  # plain reads while waiting
            pass
        passed = tl.atomic_add(sync_ptr, 1, sem="acquire", scope="gpu")
        if passed == route_programs + programs - 1:  # the last plan program: nobody reads the counter again
            tl.store(sync_ptr, 0)
        tl.debug_barrier()
        plan_program(pid - route_programs, ids_ptr, map_ptr, counts_ptr, sorted_ptr, expert_ids_ptr,
                     post_padded_ptr, scatter_ptr, permutation_ptr, offsets_ptr, num_slots, num_experts,
                     local_experts, block_size, sorted_len, blocks_len, programs, map_mode, scatter, PLAN_STAGE,
                     PLAN_LAYOUT, PLAN_BINS, PLAN_SLOTS, PLAN_ROWS, PLAN_TAIL, True)
