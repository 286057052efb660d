"""The routing stage in one launch at decode and small prefill: route()'s own programs route the tokens, wait for
one another, then each places the slots of the rows it has just routed (docs/kernels.md, "Dispatch plans";
docs/semantics.md, rules 1-9).

The routing is the bitonic kernel's own code on route()'s own tile and grid (route_plan_launch.py), so the ids and
weights are the bits route() gives. Then every program waits until every program has stored its ids (a barrier
across the grid: two counters in ``sync_ptr``, zero between launches, which the last program to leave resets; the
launch makes sure every program is resident at once). After it each program reads every slot's bin, counting them
all and those before its own rows (one histogram of twice the bins, over one tile for a plan of up to ``FEW`` slots,
else ``SLOTS`` slots at a time), and places each of its own slots at its bin's
start, plus the bin's slots before its rows, plus its rank among its own slots of that bin: the slots of an expert
in ascending order, as the plan kernel places them. Every entry of the plan has one writer:

* the blocks layout: a slot's entry by its program; the padding after an expert's slots, up to its block-padded
  size, by the program of the expert's last slot; a used block's expert by the program of the block's first slot
  (every used block starts with a slot: an expert's padding is shorter than a block); the sentinel ``T * K`` past
  the used entries and -1 past the used blocks by all programs taking turns; ``num_tokens_post_padded`` by program 0;
* the grouped layout: every slot (the dropped ones last, as the last bin) by its program; the offsets by program 0.

``PARTS`` says what a launch runs: the routing (1), the plan (2) or both with the barrier between them (3). A GPU
launch runs both; Triton's interpreter, which runs the programs one after another, cannot wait across them and runs
the two parts as two launches of this kernel.
"""

import triton
import triton.language as tl

from ._bitonic import bitonic_kernel
from ._plan import _bin_sizes, _fill, _slot_bins

ROUTE, PLAN, BOTH = 1, 2, 3  # PARTS


@triton.jit(do_not_specialize=["num_rows", "stride_w_row", "stride_w_col", "stride_i_row", "stride_i_col",
                               "num_slots", "local_experts", "block_size", "sorted_len", "blocks_len", "map_mode",
                               "layout"],
            do_not_specialize_on_alignment=["weights_ptr", "ids_ptr", "map_ptr", "sorted_ptr", "expert_ids_ptr",
                                            "post_padded_ptr", "permutation_ptr", "offsets_ptr", "sync_ptr"])
def route_plan_kernel(
    # the routing's arguments: bitonic_kernel's
    logits_ptr, bias_ptr, stride_l_row, weights_ptr, ids_ptr, stride_w_row, stride_w_col, stride_i_row, stride_i_col,
    num_rows, scale, padding_ptr,
    # the plan's: the map [E] (or a dummy), the blocks layout's outputs, the grouped layout's
    map_ptr, sorted_ptr, expert_ids_ptr, post_padded_ptr, permutation_ptr, offsets_ptr,
    num_slots, local_experts, block_size, sorted_len, blocks_len,
    map_mode, layout,  # the map's role (plan_call's NO_MAP, MAP_BINS, MAP_VALUES); _plan's BLOCKS or GROUPED
    sync_ptr,  # int32 [2]: programs arrived, programs gone on (PARTS == BOTH with several programs)
    # the routing's constexprs: bitonic_kernel's
    TOPK: tl.constexpr, SCORING: tl.constexpr, RENORMALIZE: tl.constexpr, NUM_EXPERTS: tl.constexpr,
    BLOCK_EXPERTS: tl.constexpr, NUM_GROUPS: tl.constexpr, GROUP_SIZE: tl.constexpr, TOPK_GROUP: tl.constexpr,
    BLOCK_GROUPS: tl.constexpr, BLOCK_GROUP_SIZE: tl.constexpr, ROWS: tl.constexpr, LANES: tl.constexpr,
    CHUNK: tl.constexpr, LOG2_CHUNK: tl.constexpr, GROUP: tl.constexpr, GROUPS_PER_LOAD: tl.constexpr,
    PREFETCH: tl.constexpr, WORDS: tl.constexpr, ONE_PASS: tl.constexpr, ROUNDS: tl.constexpr,
    HANDOVER: tl.constexpr, DENSE_OUT: tl.constexpr, CHECKED_STREAM: tl.constexpr, STORE_FIRST: tl.constexpr,
    GRID_WAIT: tl.constexpr,
    # the plan's
    BINS: tl.constexpr,  # a power of two > E: a bin an expert (or local expert), the last for the dropped slots
    OWN: tl.constexpr,  # a power of two >= ROWS * TOPK: the slots of a program's rows
    FEW: tl.constexpr,  # plans of up to this many slots count every slot's bin in one tile of this many
    SLOTS: tl.constexpr,  # larger plans count SLOTS slots at a time
    TAIL: tl.constexpr,  # entries of a fill written at once
    PARTS: tl.constexpr,  # ROUTE, PLAN or BOTH
):
    program = tl.program_id(0)
    programs = tl.num_programs(0)
    if PARTS & 1:
        bitonic_kernel(logits_ptr, bias_ptr, stride_l_row, weights_ptr, ids_ptr, stride_w_row, stride_w_col,
                       stride_i_row, stride_i_col, num_rows, scale, padding_ptr, TOPK, SCORING, RENORMALIZE,
                       NUM_EXPERTS, BLOCK_EXPERTS, NUM_GROUPS, GROUP_SIZE, TOPK_GROUP, BLOCK_GROUPS,
                       BLOCK_GROUP_SIZE, ROWS, LANES, CHUNK, LOG2_CHUNK, GROUP, GROUPS_PER_LOAD, PREFETCH, WORDS,
                       ONE_PASS, ROUNDS, HANDOVER, DENSE_OUT, CHECKED_STREAM, STORE_FIRST, GRID_WAIT)
    if PARTS == 3:
        tl.debug_barrier()  # this program's ids stored
        if programs > 1:
            _wait_for_every_program(sync_ptr, programs)
    if PARTS & 2:
        _place_own_slots(ids_ptr, map_ptr, sorted_ptr, expert_ids_ptr, post_padded_ptr, permutation_ptr,
                         offsets_ptr, num_slots, NUM_EXPERTS, local_experts, block_size, sorted_len, blocks_len,
                         map_mode, layout, program, programs, ROWS * TOPK, BINS, OWN, FEW, SLOTS, TAIL)


@triton.jit
def _wait_for_every_program(sync_ptr, programs):
    """Wait until every program of the launch has arrived here; the writes each made before arriving are then
    visible to all. The last program to go on sets both counters back to 0 for the next launch (no program still
    reads them then: each has seen every arrival before going on)."""
    arrived = tl.atomic_add(sync_ptr, 1, sem="acq_rel", scope="gpu") + 1
    while arrived < programs:
        arrived = tl.atomic_add(sync_ptr, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()  # every thread of the program past the wait
    gone = tl.atomic_add(sync_ptr + 1, 1, sem="relaxed", scope="gpu")
    if gone == programs - 1:
        tl.atomic_xchg(sync_ptr, 0, sem="relaxed", scope="gpu")
        tl.atomic_xchg(sync_ptr + 1, 0, sem="relaxed", scope="gpu")


@triton.jit
def _place_own_slots(ids_ptr, map_ptr, sorted_ptr, expert_ids_ptr, post_padded_ptr, permutation_ptr, offsets_ptr,
                     num_slots, num_experts, local_experts, block_size, sorted_len, blocks_len, map_mode, layout,
                     program, programs, own_slots, BINS: tl.constexpr, OWN: tl.constexpr, FEW: tl.constexpr,
                     SLOTS: tl.constexpr, TAIL: tl.constexpr):
    """This program's part of the plan of ids [T * K] (dense), its own slots being
    ``[program * own_slots, (program + 1) * own_slots)``. The grouped layout comes with a block size of 1 (its
    sizes are the counts; the dropped slots, the last bin, after every expert's)."""
    DROPPED: tl.constexpr = BINS - 1
    first_own = program * own_slots
    bins_range = tl.arange(0, BINS)
    # ---- every bin's count, and its count before this program's slots (a tile of FEW slots where they all fit
    # in it, else SLOTS at a time: one binary for both, a uniform branch) -------------------------------------------
    if num_slots <= FEW:
        counts, earlier = _count_bins(ids_ptr, map_ptr, num_slots, num_experts, map_mode, first_own, BINS, FEW)
    else:
        counts, earlier = _count_bins(ids_ptr, map_ptr, num_slots, num_experts, map_mode, first_own, BINS, SLOTS)
    sizes = _bin_sizes(counts, bins_range, num_experts, block_size, 0)  # the bins >= E (the dropped one) none
    ends = tl.cumsum(sizes, 0)
    starts = ends - sizes
    total = tl.sum(sizes, 0)

    # ---- this program's slots: each at its bin's start + the bin's slots before them + its rank among them --------
    at = tl.arange(0, OWN)
    own = first_own + at
    own_ok = (at < own_slots) & (own < num_slots)
    own_bins = _slot_bins(ids_ptr, map_ptr, own, num_slots, num_experts, map_mode, DROPPED)
    rank = tl.sum(((own_bins[None, :] == own_bins[:, None]) & (at[None, :] < at[:, None])).to(tl.int32), 1)
    place = tl.gather(starts + earlier, own_bins, 0) + rank
    if layout == 0:  # (a uniform branch on a scalar)
        real = own_ok & (own_bins != DROPPED)
        tl.store(sorted_ptr + place, own, mask=real)
        value = own_bins
        if map_mode == 2:  # blocks keep global experts; their values are the local ones (-1: another rank's)
            value = tl.load(map_ptr + own_bins, mask=real, other=-1).to(tl.int32)
        tl.store(expert_ids_ptr + place // block_size, value, mask=real & (place % block_size == 0))
        # the padding after an expert's last slot, up to its block-padded size
        last = real & (place + 1 == tl.gather(starts + counts, own_bins, 0))
        pad_end = tl.gather(ends, own_bins, 0)
        columns = tl.arange(0, 16)
        column = 1
        while column < block_size:
            where = place[:, None] + column + columns[None, :]
            tl.store(sorted_ptr + where, num_slots, mask=last[:, None] & (where < pad_end[:, None]))
            column += 16
        _fill(sorted_ptr, total, sorted_len, num_slots, program, programs, TAIL)
        _fill(expert_ids_ptr, total // block_size, blocks_len, -1, program, programs, TAIL)
        if program == 0:
            tl.store(post_padded_ptr, total)
    else:
        tl.store(permutation_ptr + place, own, mask=own_ok)
        if program == 0:
            tl.store(offsets_ptr + bins_range, ends, mask=bins_range < local_experts)


@triton.jit
def _count_bins(ids_ptr, map_ptr, num_slots, num_experts, map_mode, first_own, BINS: tl.constexpr,
                SLOTS: tl.constexpr):
    """Every bin's count, and its count among the slots before ``first_own``: one histogram of 2 x BINS, SLOTS slots
    at a time, the next ones' bins loaded before this one's are counted."""
    DROPPED: tl.constexpr = BINS - 1
    lanes = tl.arange(0, SLOTS)
    halves = tl.arange(0, 2)[:, None]
    counts = tl.zeros([BINS], dtype=tl.int32)
    earlier = tl.zeros([BINS], dtype=tl.int32)
    first = 0
    bins = _slot_bins(ids_ptr, map_ptr, lanes, num_slots, num_experts, map_mode, DROPPED)
    while first < num_slots:  # (while loops: Triton's interpreter cannot run a range to a runtime bound)
        slots = first + lanes
        next_bins = _slot_bins(ids_ptr, map_ptr, slots + SLOTS, num_slots, num_experts, map_mode, DROPPED)
        both = tl.reshape(tl.histogram(bins + tl.where(slots < first_own, 0, BINS), 2 * BINS,
                                       mask=slots < num_slots), (2, BINS))
        counts += tl.sum(both, 0)
        earlier += tl.sum(tl.where(halves == 0, both, 0), 0)
        bins = next_bins
        first += SLOTS
    return counts, earlier
