"""The routing stage in one launch on route()'s own grid: route()'s programs route the tokens, count their slots
once into a shared workspace, wait for one another, then each places the slots of the rows it has just routed
(docs/kernels.md, "Dispatch plans"; docs/semantics.md, rules 1-9). route_plan_launch.py sends it the calls of several
tokens where it measured faster than two launches; a call of one token takes the one-program kernel
(_route_plan.py).

The routing is the bitonic kernel's own code on route()'s own tile and grid, so the ids and weights are the bits
route() gives. Each program then adds its slots' bins to the workspace's counts (atomic adds: the sums come out the
same in any order): every bin's total, and, where the call has several *count blocks* (``TILE`` slots' worth of
consecutive programs), its block's counts. It waits until every program has arrived (the launch makes sure all are
resident), reads the totals, and places each of its slots at

    its bin's start + the bin's slots in the earlier count blocks + the bin's slots before it in its own block,

the last from the block's ids (at most ``TILE`` of them): the slots of an expert in ascending order, as the plan
kernel places them, with no histogram of every slot in any program. Every entry of the plan has one writer:

* the blocks layout: a slot's entry by its program; the padding after an expert's slots, up to its block-padded
  size, by the program of the expert's last slot; a used block's expert by the program of the block's first slot
  (every used block starts with a slot: an expert's padding is shorter than a block); the sentinel ``T * K`` past
  the used entries and -1 past the used blocks by all programs taking turns; ``num_tokens_post_padded`` by program 0;
* the grouped layout: every slot (the dropped ones last, as the last bin) by its program; the offsets by program 0.

The workspace (``work_ptr``, int32, zero when first used) holds a header (the parity of the region of counts the
launch uses, the arrivals of each parity, the extent of counts the last launch used) and the two regions: a launch
counts in one and sets the other, which the launch before it used, back to zero, so that no program waits for the
others to finish reading the counts before they are reset.

``PARTS`` says what a launch runs: the routing and counting (1), the placing (2) or both with the wait between them
(3). A GPU launch runs both; Triton's interpreter, which runs the programs one after another, cannot wait across
them and runs the two parts as two launches of this kernel.
"""

import triton
import triton.language as tl

from ._bitonic import bitonic_kernel
from ._plan import _bin_sizes, _fill, _id_bins

ROUTE, PLAN, BOTH = 1, 2, 3  # PARTS
# the workspace's header: the parity of the region the next launch uses, the arrivals of parity 0 and 1, the counts'
# extent the last launch used; the regions of counts start at HEADER (int32 entries)
HEADER_ENTRIES = 16
PARITY, ARRIVED, EXTENT, HEADER = (tl.constexpr(entry) for entry in (0, 1, 3, HEADER_ENTRIES))


@triton.jit(do_not_specialize=["num_rows", "stride_w_row", "stride_w_col", "stride_i_row", "stride_i_col",
                               "num_slots", "local_experts", "block_size", "sorted_len", "blocks_len", "map_mode",
                               "layout", "region"],
            do_not_specialize_on_alignment=["weights_ptr", "ids_ptr", "map_ptr", "sorted_ptr", "expert_ids_ptr",
                                            "post_padded_ptr", "permutation_ptr", "offsets_ptr", "work_ptr"])
def route_plan_grid_kernel(
    # the routing's arguments: bitonic_kernel's
    logits_ptr, bias_ptr, stride_l_row, weights_ptr, ids_ptr, stride_w_row, stride_w_col, stride_i_row, stride_i_col,
    num_rows, scale, padding_ptr,
    # the plan's: the map [E] (or a dummy), the blocks layout's outputs, the grouped layout's
    map_ptr, sorted_ptr, expert_ids_ptr, post_padded_ptr, permutation_ptr, offsets_ptr,
    num_slots, local_experts, block_size, sorted_len, blocks_len,
    map_mode, layout,  # the map's role (plan_call's NO_MAP, MAP_BINS, MAP_VALUES); _plan's BLOCKS or GROUPED
    work_ptr, region,  # the workspace (int32: HEADER + 2 regions), a region's entries
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
    TILE: tl.constexpr,  # a count block's slots: TILE // OWN consecutive programs
    EARLIER: tl.constexpr,  # a power of two >= the count blocks: the earlier blocks' counts read at once
    TAIL: tl.constexpr,  # entries of a fill written at once
    PARTS: tl.constexpr,  # ROUTE, PLAN or BOTH
):
    DROPPED: tl.constexpr = BINS - 1
    PER_BLOCK: tl.constexpr = TILE // OWN  # programs a count block
    if PARTS & 1:
        bitonic_kernel(logits_ptr, bias_ptr, stride_l_row, weights_ptr, ids_ptr, stride_w_row, stride_w_col,
                       stride_i_row, stride_i_col, num_rows, scale, padding_ptr, TOPK, SCORING, RENORMALIZE,
                       NUM_EXPERTS, BLOCK_EXPERTS, NUM_GROUPS, GROUP_SIZE, TOPK_GROUP, BLOCK_GROUPS,
                       BLOCK_GROUP_SIZE, ROWS, LANES, CHUNK, LOG2_CHUNK, GROUP, GROUPS_PER_LOAD, PREFETCH, WORDS,
                       ONE_PASS, ROUNDS, HANDOVER, DENSE_OUT, CHECKED_STREAM, STORE_FIRST, GRID_WAIT)
        tl.debug_barrier()  # this program's ids stored
    # the header, the previous launch's (read after routing: before it, it spills scalar registers on AMD GPUs)
    parity = tl.load(work_ptr + PARITY, cache_modifier=".cg")
    last_extent = tl.load(work_ptr + EXTENT, cache_modifier=".cg")
    program = tl.program_id(0)
    programs = tl.num_programs(0)
    blocks = tl.cdiv(programs, PER_BLOCK)
    counts_ptr = work_ptr + HEADER + parity * region
    own_slots: tl.constexpr = ROWS * TOPK
    at = tl.arange(0, OWN)
    own = program * own_slots + at
    own_ok = (at < own_slots) & (own < num_slots)
    block = program // PER_BLOCK
    if PARTS & 1:
        own_bins = _slot_bins(ids_ptr, map_ptr, own, own_ok, NUM_EXPERTS, map_mode, DROPPED)
        tl.atomic_add(counts_ptr + own_bins, 1, mask=own_ok, sem="relaxed", scope="gpu")
        if blocks > 1:
            tl.atomic_add(counts_ptr + (block + 1) * BINS + own_bins, 1, mask=own_ok, sem="relaxed", scope="gpu")
    if PARTS == 3:
        tl.debug_barrier()  # this program's counts added
        _wait_for_every_program(work_ptr + ARRIVED + parity, programs)
    if PARTS & 2:
        # the region the last launch used back to zero, and the header for the next launch, by the last program:
        # every program has read the header by now (before arriving; in the interpreter, the last runs last)
        _fill(work_ptr + HEADER + (1 - parity) * region, 0, last_extent, 0, program, programs, TAIL)
        if program == programs - 1:
            tl.store(work_ptr + ARRIVED + 1 - parity, 0)
            tl.store(work_ptr + EXTENT, BINS * tl.where(blocks > 1, blocks + 1, 1))  # the counts this launch used
            tl.store(work_ptr + PARITY, 1 - parity)
        own_bins = _slot_bins(ids_ptr, map_ptr, own, own_ok, NUM_EXPERTS, map_mode, DROPPED)
        counts, before = _counted(ids_ptr, map_ptr, counts_ptr, num_slots, NUM_EXPERTS, map_mode, block, blocks,
                                  own, own_ok, own_bins, PER_BLOCK * own_slots, BINS, TILE, EARLIER)
        _place_own_slots(map_ptr, sorted_ptr, expert_ids_ptr, post_padded_ptr, permutation_ptr, offsets_ptr, counts,
                         before, num_slots, NUM_EXPERTS, local_experts, block_size, sorted_len, blocks_len, map_mode,
                         layout, program, programs, own, own_ok, own_bins, BINS, TAIL)


@triton.jit
def _slot_bins(ids_ptr, map_ptr, slots, inside, num_experts, map_mode, DROPPED: tl.constexpr):
    """Slots' bins (_plan's rule), from ids read past this program's cache (other programs stored them)."""
    ids = tl.load(ids_ptr + slots, mask=inside, other=-1, cache_modifier=".cg")
    return _id_bins(ids, map_ptr, num_experts, map_mode, DROPPED)


@triton.jit
def _wait_for_every_program(arrived_ptr, programs):
    """Wait until every program of the launch has arrived here: the counts each added before arriving are then
    visible to all."""
    arrived = tl.atomic_add(arrived_ptr, 1, sem="acq_rel", scope="gpu") + 1
    while arrived < programs:
        arrived = tl.atomic_add(arrived_ptr, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()  # every thread of the program past the wait


@triton.jit
def _counted(ids_ptr, map_ptr, counts_ptr, num_slots, num_experts, map_mode, block, blocks, own, own_ok, own_bins,
             block_slots, BINS: tl.constexpr, TILE: tl.constexpr, EARLIER: tl.constexpr):
    """Every bin's total from the workspace, and each own slot's bin's slots before it: the earlier count blocks'
    counts, and the slots before it among its block's ids (``block_slots`` a block)."""
    DROPPED: tl.constexpr = BINS - 1
    counts = tl.load(counts_ptr + tl.arange(0, BINS), cache_modifier=".cg")
    before = tl.zeros_like(own)
    if blocks > 1:
        earlier = tl.arange(0, EARLIER)
        table = tl.load(counts_ptr + (earlier[None, :] + 1) * BINS + own_bins[:, None],
                        mask=(earlier < block)[None, :] & own_ok[:, None], other=0, cache_modifier=".cg")
        before += tl.sum(table, 1)
    for first in tl.static_range(0, TILE, 64):  # (one [OWN, TILE] comparison spills scalar registers on AMD GPUs)
        tile = block * block_slots + first + tl.arange(0, 64)  # slots past the block's come after its own
        tile_bins = _slot_bins(ids_ptr, map_ptr, tile, tile < num_slots, num_experts, map_mode, DROPPED)
        earlier_here = (tile_bins[None, :] == own_bins[:, None]) & (tile[None, :] < own[:, None])
        before += tl.sum(earlier_here.to(tl.int32), 1)
    return counts, before


@triton.jit
def _place_own_slots(map_ptr, sorted_ptr, expert_ids_ptr, post_padded_ptr, permutation_ptr, offsets_ptr, counts,
                     before, num_slots, num_experts, local_experts, block_size, sorted_len, blocks_len, map_mode,
                     layout, program, programs, own, own_ok, own_bins, BINS: tl.constexpr, TAIL: tl.constexpr):
    """This program's part of the plan: its slots ``own`` (``own_ok``), of bins ``own_bins``, each at its bin's start
    plus ``before``, from every bin's ``counts``. The grouped layout comes with a block size of 1 (its sizes are the
    counts; the dropped slots, the last bin, after every expert's)."""
    DROPPED: tl.constexpr = BINS - 1
    bins_range = tl.arange(0, BINS)
    sizes = _bin_sizes(counts, bins_range, num_experts, block_size, 0)  # the bins >= E (the dropped one) none
    ends = tl.cumsum(sizes, 0)
    starts = ends - sizes
    total = tl.sum(sizes, 0)
    place = tl.gather(starts, own_bins, 0) + before
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
        while column < block_size:  # (while loops: Triton's interpreter cannot run a range to a runtime bound)
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
