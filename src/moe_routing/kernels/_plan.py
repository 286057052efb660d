"""The dispatch-plan kernel: from a routing result's ids, the blocks layout (vLLM's ``moe_align_block_size``) or
the grouped layout (a permutation and offsets for grouped GEMMs), exact and deterministic (docs/semantics.md,
rule 9; docs/kernels.md, "Dispatch plans").

Every slot's place is fixed by counting alone, never by the order in which programs or threads arrive: a slot's
rank inside its expert is the number of earlier slots of that expert, counted over the slots before its program's
chunk (each earlier chunk's histogram), over the sub-chunks before its own in the chunk (a running histogram), and
inside its sub-chunk (an all-pairs comparison). So within an expert the slots come in ascending order, at every
size and on every GPU.

One kernel, three stages (``STAGE``):

* ``COUNT``: each program writes its chunk's histogram to the workspace (the first of two launches);
* ``PLACE_OWN``: one program counts every slot itself, then places them (one launch, small plans);
* ``PLACE_COUNTED``: each program reads the workspace's histograms, then places its chunk's slots.

The blocks layout is first filled (the sentinel in every entry of sorted_token_ids, -1 in every block of
expert_ids: each program a share, in the counting launch, or the one program before a barrier), then the slots and
each used block's expert are written over it: the padding after an expert's slots and the tail past the used entries
keep the fill. Program 0 writes ``num_tokens_post_padded`` or the offsets.
"""

import triton
import triton.language as tl

COUNT, PLACE_OWN, PLACE_COUNTED = 0, 1, 2
BLOCKS, GROUPED = 0, 1
# MAP_MODE takes plan_call's NO_MAP, MAP_BINS, MAP_VALUES: 0, 1, 2


@triton.jit
def _slot_bins(ids_ptr, map_ptr, slots, num_slots, num_experts, MAP_MODE: tl.constexpr, DROPPED: tl.constexpr):
    """Each slot's bin: its expert, its local expert where the map makes the bins, or ``DROPPED`` (an id outside
    [0, E), an expert of another rank, or a slot past the end)."""
    ids = tl.load(ids_ptr + slots, mask=slots < num_slots, other=-1)
    valid = (ids >= 0) & (ids < num_experts)
    bins = tl.where(valid, ids, 0).to(tl.int32)
    if MAP_MODE == 1:
        local = tl.load(map_ptr + bins, mask=valid, other=-1).to(tl.int32)
        valid = valid & (local >= 0)
        bins = local
    return tl.where(valid, bins, DROPPED)


@triton.jit
def _chunk_counts(ids_ptr, map_ptr, start, end, chunk, num_slots, num_experts, MAP_MODE: tl.constexpr,
                  BINS: tl.constexpr, SUB: tl.constexpr):
    """The histogram of the slots [start, end) (``end - start <= chunk``) over ``BINS`` bins (dropped slots in the
    last)."""
    counts = tl.zeros([BINS], dtype=tl.int32)
    first = start
    while first < end:  # (while loops: Triton's interpreter cannot run a range to a runtime bound)
        slots = first + tl.arange(0, SUB)
        bins = _slot_bins(ids_ptr, map_ptr, slots, num_slots, num_experts, MAP_MODE, BINS - 1)
        counts += tl.histogram(bins, BINS, mask=slots < end)
        first += SUB
    return counts


# sizes are not specialised on (a value of 1 or a multiple of 16 would otherwise compile a binary of its own): one
# binary serves every token count
@triton.jit(do_not_specialize=["num_slots", "num_experts", "local_experts", "block_size", "sorted_len", "blocks_len",
                               "chunk"])
def plan_kernel(
    # inputs
    ids_ptr, map_ptr, counts_ptr,  # ids [T * K], the expert map [E] (or a dummy), the histograms [programs, BINS]
    # outputs
    sorted_ptr, expert_ids_ptr, post_padded_ptr, scatter_ptr,  # blocks layout
    permutation_ptr, offsets_ptr,  # grouped layout
    # sizes
    num_slots, num_experts, local_experts, block_size, sorted_len, blocks_len, chunk,  # chunk: slots a program
    # what to compute
    STAGE: tl.constexpr, LAYOUT: tl.constexpr, MAP_MODE: tl.constexpr, SCATTER: tl.constexpr,
    # tunable parameters
    BINS: tl.constexpr,  # a power of two > E: the last bin holds the dropped slots
    SUB: tl.constexpr,  # slots ranked at once by all-pairs comparison
    TAIL: tl.constexpr,  # fill entries a program writes at once
):
    program = tl.program_id(0)
    programs = tl.maximum((num_slots + chunk - 1) // chunk, 1)  # the grid (from arguments: loops run to it)
    start = program * chunk
    end = tl.minimum(start + chunk, num_slots)
    bins_range = tl.arange(0, BINS)

    # ---- fill: the blocks layout's sentinel and -1 everywhere (this program's share), placed slots come after ---
    if LAYOUT == 0 and STAGE != 2:
        _fill(sorted_ptr, sorted_len, num_slots, program, programs, TAIL)
        _fill(expert_ids_ptr, blocks_len, -1, program, programs, TAIL)

    # ---- count: this chunk's histogram to the workspace (first launch of two) ----------------------------------
    if STAGE == 0:
        counts = _chunk_counts(ids_ptr, map_ptr, start, end, chunk, num_slots, num_experts, MAP_MODE, BINS, SUB)
        tl.store(counts_ptr + program * BINS + bins_range, counts)
        return

    # ---- every expert's total, and the slots of each expert before this chunk ---------------------------------
    if STAGE == 1:
        totals = _chunk_counts(ids_ptr, map_ptr, start, end, chunk, num_slots, num_experts, MAP_MODE, BINS, SUB)
        before = tl.zeros([BINS], dtype=tl.int32)
        tl.debug_barrier()  # the fill above is done before any slot is placed over it
    else:
        totals = tl.zeros([BINS], dtype=tl.int32)
        before = tl.zeros([BINS], dtype=tl.int32)
        other = 0
        while other < programs:
            row = tl.load(counts_ptr + other * BINS + bins_range)
            totals += row
            before += tl.where(other < program, row, 0)
            other += 1

    # ---- where each expert's entries start ----------------------------------------------------------------------
    real = bins_range < num_experts
    if LAYOUT == 0:  # blocks: each expert padded to a multiple of the block size; dropped slots nowhere
        sizes = tl.where(real, (totals + block_size - 1) // block_size * block_size, 0)
    else:  # grouped: dropped slots after every kept one
        sizes = totals
    ends = tl.cumsum(sizes, 0)
    starts = ends - sizes
    next_place = starts + before

    # ---- place this chunk's slots, a sub-chunk at a time, in ascending order within each expert ------------------
    lanes = tl.arange(0, SUB)
    earlier = lanes[None, :] < lanes[:, None]
    first = start
    while first < end:
        slots = first + lanes
        first += SUB
        inside = slots < end
        bins = _slot_bins(ids_ptr, map_ptr, slots, num_slots, num_experts, MAP_MODE, BINS - 1)
        rank = tl.sum(((bins[None, :] == bins[:, None]) & earlier).to(tl.int32), 1)
        place = tl.gather(next_place, bins, 0) + rank
        next_place += tl.histogram(bins, BINS, mask=inside)
        kept = inside & (bins < BINS - 1)
        if LAYOUT == 0:
            tl.store(sorted_ptr + place, slots, mask=kept)
            first_of_block = kept & ((place - tl.gather(starts, bins, 0)) % block_size == 0)
            if MAP_MODE == 2:  # blocks keep global experts; their values are the local ones (-1: another rank's)
                value = tl.load(map_ptr + bins, mask=first_of_block, other=-1).to(tl.int32)
            else:
                value = bins
            tl.store(expert_ids_ptr + place // block_size, value, mask=first_of_block)
            if SCATTER:
                tl.store(scatter_ptr + slots, tl.where(kept, slots, -1), mask=inside)
        else:
            tl.store(permutation_ptr + place, slots, mask=inside)

    if program == 0:
        if LAYOUT == 0:
            tl.store(post_padded_ptr, tl.sum(sizes, 0))
        else:
            tl.store(offsets_ptr + bins_range, ends, mask=bins_range < local_experts)


@triton.jit
def _fill(ptr, length, value, program, programs, TAIL: tl.constexpr):
    """``value`` into this program's share of ``ptr[:length]`` (stretches of TAIL, programs taking turns)."""
    first = program * TAIL
    while first < length:
        where = first + tl.arange(0, TAIL)
        tl.store(ptr + where, value, mask=where < length)
        first += programs * TAIL
