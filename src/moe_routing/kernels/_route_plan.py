"""The routing stage in one launch at decode: one program routes every token and then builds the dispatch plan of
the ids it has just stored (docs/kernels.md, "Dispatch plans"; docs/semantics.md, rules 1-9).

The routing is the bitonic kernel's own code, its tile holding every row of the call (``ROWS`` >= T; the launch,
route_plan_launch.py, sends it calls of one token on route()'s own plan), so the ids and weights are the bits
route() gives. After a barrier the program reads the
ids back (its own stores, in its cache), sorts the slots by (bin, slot) in registers and places each at its bin's
start plus its rank in the bin: the slots of an expert in ascending order, as the plan kernel places them. Two
launches (route(), then the plan kernel) pay a second launch and the wait between them; here the plan follows the
routing inside the program.

The blocks layout fills ``sorted_token_ids`` with the sentinel ``T * K`` and the blocks past the used ones with -1,
then, after a second barrier, writes each placed slot and its block's expert (every used block holds at least one
slot: an expert's padding is shorter than a block).
"""

import triton
import triton.language as tl

from ._bitonic import bitonic_kernel
from ._plan import _bin_sizes, _fill, _slot_bins


@triton.jit(do_not_specialize=["num_rows", "stride_w_row", "stride_w_col", "stride_i_row", "stride_i_col",
                               "num_slots", "local_experts", "block_size", "sorted_len", "blocks_len", "map_mode",
                               "layout"],
            do_not_specialize_on_alignment=["weights_ptr", "ids_ptr", "map_ptr", "sorted_ptr", "expert_ids_ptr",
                                            "post_padded_ptr", "permutation_ptr", "offsets_ptr"])
def route_plan_kernel(
    # the routing's arguments: bitonic_kernel's
    logits_ptr, bias_ptr, stride_l_row, weights_ptr, ids_ptr, stride_w_row, stride_w_col, stride_i_row, stride_i_col,
    num_rows, scale, padding_ptr,
    # the plan's: the map [E] (or a dummy), the blocks layout's outputs, the grouped layout's
    map_ptr, sorted_ptr, expert_ids_ptr, post_padded_ptr, permutation_ptr, offsets_ptr,
    num_slots, local_experts, block_size, sorted_len, blocks_len,
    map_mode, layout,  # the map's role (plan_call's NO_MAP, MAP_BINS, MAP_VALUES); _plan's BLOCKS or GROUPED
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
    SLOTS: tl.constexpr,  # a power of two >= T * K
    TAIL: tl.constexpr,  # entries of a fill written at once
):
    bitonic_kernel(logits_ptr, bias_ptr, stride_l_row, weights_ptr, ids_ptr, stride_w_row, stride_w_col,
                   stride_i_row, stride_i_col, num_rows, scale, padding_ptr, TOPK, SCORING, RENORMALIZE, NUM_EXPERTS,
                   BLOCK_EXPERTS, NUM_GROUPS, GROUP_SIZE, TOPK_GROUP, BLOCK_GROUPS, BLOCK_GROUP_SIZE, ROWS, LANES,
                   CHUNK, LOG2_CHUNK, GROUP, GROUPS_PER_LOAD, PREFETCH, WORDS, ONE_PASS, ROUNDS, HANDOVER, DENSE_OUT,
                   CHECKED_STREAM, STORE_FIRST, GRID_WAIT)
    tl.debug_barrier()  # every row's ids stored and visible to the whole program
    _plan_in_one_program(ids_ptr, map_ptr, sorted_ptr, expert_ids_ptr, post_padded_ptr, permutation_ptr,
                         offsets_ptr, num_slots, NUM_EXPERTS, local_experts, block_size, sorted_len, blocks_len,
                         map_mode, layout, BINS, SLOTS, TAIL)


@triton.jit
def _plan_in_one_program(ids_ptr, map_ptr, sorted_ptr, expert_ids_ptr, post_padded_ptr, permutation_ptr,
                         offsets_ptr, num_slots, num_experts, local_experts, block_size, sorted_len, blocks_len,
                         map_mode, layout, BINS: tl.constexpr, SLOTS: tl.constexpr, TAIL: tl.constexpr):
    """The plan of ids [T * K] (dense) by one program: the histogram, each bin's start, the slots sorted by
    (bin, slot) and placed at their bin's start plus their rank in it. The grouped layout comes with a block size
    of 1 (its sizes are the counts, the dropped slots last)."""
    DROPPED: tl.constexpr = BINS - 1
    lanes = tl.arange(0, SLOTS)
    bins_range = tl.arange(0, BINS)
    inside = lanes < num_slots
    bins = _slot_bins(ids_ptr, map_ptr, lanes, num_slots, num_experts, map_mode, DROPPED)
    counts = tl.histogram(bins, BINS, mask=inside)
    sizes = _bin_sizes(counts, bins_range, num_experts, block_size, 0)  # the dropped bin (>= E) none
    ends = tl.cumsum(sizes, 0)
    total = tl.sum(sizes, 0)
    # sorted by (bin, slot); lanes past the end are dropped, after every real slot
    order = tl.sort(bins * SLOTS + lanes)
    order_bins = order // SLOTS
    order_slots = order % SLOTS
    # a slot's place: its bin's start, plus its sorted index less the sorted index of its bin's first slot
    base = (ends - sizes) - (tl.cumsum(counts, 0) - counts)
    place = tl.gather(base, order_bins, 0) + lanes
    placed = lanes < num_slots
    if layout == 0:  # (a uniform branch on a scalar)
        _fill(sorted_ptr, 0, sorted_len, num_slots, 0, 1, TAIL)
        _fill(expert_ids_ptr, total // block_size, blocks_len, -1, 0, 1, TAIL)
        tl.debug_barrier()  # the sentinel everywhere before the placed slots overwrite theirs
        real = placed & (order_bins != DROPPED)
        tl.store(sorted_ptr + place, order_slots, mask=real)
        value = order_bins
        if map_mode == 2:  # blocks keep global experts; their values are the local ones (-1: another rank's)
            value = tl.load(map_ptr + order_bins, mask=real, other=-1).to(tl.int32)
        tl.store(expert_ids_ptr + place // block_size, value, mask=real)  # a block's slots write the same value
        tl.store(post_padded_ptr, total)
    else:
        tl.store(permutation_ptr + place, order_slots, mask=placed)
        tl.store(offsets_ptr + bins_range, ends, mask=bins_range < local_experts)
