"""The dispatch-plan kernel: from a routing result's ids, the blocks layout (vLLM's ``moe_align_block_size``) or
the grouped layout (a permutation and offsets for grouped GEMMs), exact and deterministic (docs/semantics.md,
rule 9; docs/kernels.md, "Dispatch plans").

Every slot's place is fixed by counting alone, never by the order in which programs or threads arrive, so within
an expert the slots come in ascending order at every size and on every GPU. No entry is written by two programs
and no program waits for another: each position of every output belongs to exactly one program.

One kernel, three stages (``STAGE``):

* ``PER_BIN`` (one launch, plans of up to a few thousand slots): one program a bin (an expert, a local expert,
  then the dropped slots). Each loads every slot's bin at once, takes the histogram (the dropped slots outside
  it), its bin's start (the sizes of the bins before it: counts, block-padded in the blocks layout) and places its
  own bin's slots by a cumulative count of them: no serial steps, every bin at once.
* ``COUNT`` (first of two launches, larger plans): each program writes its chunk's histogram to the workspace.
* ``PLACE_CHUNK`` (second launch): each program sums the workspace's histograms (all chunks, and the chunks before
  its own), sorts its chunk's slots by (bin, slot) and places them at ``start[bin] + earlier chunks' count +
  rank in the chunk``. The blocks layout's padding, block experts and tail are shared out among the programs.

In the blocks layout the entries past an expert's slots (up to its block-padded size) and past the used entries
(up to the buffer's length) get the sentinel ``T * K``; blocks past the used ones get -1.
"""

import triton
import triton.language as tl

PER_BIN, COUNT, PLACE_CHUNK = 0, 1, 2
BLOCKS, GROUPED = 0, 1
# map_mode takes plan_call's NO_MAP, MAP_BINS, MAP_VALUES: 0, 1, 2. It and the scatter switch are runtime arguments,
# not constexprs: each is a uniform branch on a scalar, and one binary then serves every role of a map (fewer
# binaries to compile, on the GPU at first use and in compile-check)


@triton.jit
def _slot_bins(ids_ptr, map_ptr, slots, num_slots, num_experts, map_mode, DROPPED: tl.constexpr):
    """Each slot's bin: its expert, its local expert where the map makes the bins, or ``DROPPED`` (an id outside
    [0, E), an expert of another rank, or a slot past the end)."""
    ids = tl.load(ids_ptr + slots, mask=slots < num_slots, other=-1)
    return _id_bins(ids, map_ptr, num_experts, map_mode, DROPPED)


@triton.jit
def _id_bins(ids, map_ptr, num_experts, map_mode, DROPPED: tl.constexpr):
    """The bins of ``ids`` (-1 for a slot past the end): _slot_bins' rule."""
    valid = (ids >= 0) & (ids < num_experts)
    bins = tl.where(valid, ids, 0).to(tl.int32)
    if map_mode == 1:
        local = tl.load(map_ptr + bins, mask=valid, other=-1).to(tl.int32)
        valid = valid & (local >= 0)
        bins = local
    return tl.where(valid, bins, DROPPED)


@triton.jit
def _bin_sizes(counts, bins_range, num_experts, block_size, LAYOUT: tl.constexpr):
    """Each bin's entries: its count block-padded (blocks layout, the dropped bin none), or its count (grouped
    layout: the dropped bin last)."""
    if LAYOUT == 0:
        return tl.where(bins_range < num_experts, (counts + block_size - 1) // block_size * block_size, 0)
    else:
        return counts


@triton.jit
def _add3(a0, b0, c0, a1, b1, c1):
    """Three sums in one reduction."""
    return a0 + a1, b0 + b1, c0 + c1


@triton.jit
def _fill(ptr, first, length, value, program, programs, TAIL: tl.constexpr):
    """``value`` into this program's share of ``ptr[first:length]`` (stretches of TAIL, programs taking turns)."""
    begin = first + program * TAIL
    while begin < length:  # (while loops: Triton's interpreter cannot run a range to a runtime bound)
        where = begin + tl.arange(0, TAIL)
        tl.store(ptr + where, value, mask=where < length)
        begin += programs * TAIL


# sizes are not specialised on (a value of 1 or a multiple of 16 would otherwise compile a binary of its own): one
# binary serves every token count
@triton.jit(do_not_specialize=["num_slots", "num_experts", "local_experts", "block_size", "sorted_len", "blocks_len",
                               "programs", "map_mode", "scatter", "layout"])
def plan_kernel(
    # inputs
    ids_ptr, map_ptr, counts_ptr,  # ids [T * K], the expert map [E] (or a dummy), the histograms [programs, BINS]
    # outputs
    sorted_ptr, expert_ids_ptr, post_padded_ptr, scatter_ptr,  # blocks layout
    permutation_ptr, offsets_ptr,  # grouped layout
    # sizes
    num_slots, num_experts, local_experts, block_size, sorted_len, blocks_len, programs,  # programs: the grid
    map_mode, scatter,  # the map's role (NO_MAP, MAP_BINS, MAP_VALUES); 1: write the scatter index (blocks layout)
    layout,  # PER_BIN's layout (BLOCKS, GROUPED): a runtime argument there, one binary for both
    # what to compute
    STAGE: tl.constexpr, LAYOUT: tl.constexpr,  # LAYOUT: the chunked stages' layout
    # tunable parameters
    BINS: tl.constexpr,  # a power of two: >= the bins (PER_BIN, the dropped slots outside), > E (the chunked
    # stages: the last bin holds the dropped slots)
    SLOTS: tl.constexpr,  # slots a program loads at once: all of them (PER_BIN), its chunk (COUNT, PLACE_CHUNK)
    ROWS: tl.constexpr,  # workspace histograms summed at once (PLACE_CHUNK)
    TAIL: tl.constexpr,  # entries of a fill written at once
    GRID_WAIT: tl.constexpr = False,  # launched with PDL: wait for the stream's previous kernel first
):
    if GRID_WAIT:  # nothing is read before the previous kernel (route()'s, or the counting launch) has completed
        tl.extra.cuda.gdc_wait()
    program = tl.program_id(0)
    bins_range = tl.arange(0, BINS)
    lanes = tl.arange(0, SLOTS)
    if STAGE == 0:  # (a branch on a constexpr: the other stages' code is not compiled into this binary)
        _place_own_bin(ids_ptr, map_ptr, sorted_ptr, expert_ids_ptr, post_padded_ptr, scatter_ptr, permutation_ptr,
                       offsets_ptr, num_slots, num_experts, local_experts, block_size, sorted_len, blocks_len,
                       program, programs, map_mode, scatter, layout, bins_range, lanes, BINS, TAIL)
    else:
        _count_or_place_chunk(ids_ptr, map_ptr, counts_ptr, sorted_ptr, expert_ids_ptr, post_padded_ptr, scatter_ptr,
                              permutation_ptr, offsets_ptr, num_slots, num_experts, local_experts, block_size,
                              sorted_len, blocks_len, program, programs, map_mode, scatter, bins_range, lanes, STAGE,
                              LAYOUT, BINS, SLOTS, ROWS, TAIL)


@triton.jit
def _count_or_place_chunk(ids_ptr, map_ptr, counts_ptr, sorted_ptr, expert_ids_ptr, post_padded_ptr, scatter_ptr,
                          permutation_ptr, offsets_ptr, num_slots, num_experts, local_experts, block_size, sorted_len,
                          blocks_len, program, programs, map_mode, scatter, bins_range, lanes, STAGE: tl.constexpr,
                          LAYOUT: tl.constexpr, BINS: tl.constexpr, SLOTS: tl.constexpr, ROWS: tl.constexpr,
                          TAIL: tl.constexpr):
    """The chunked path: this chunk's histogram (``COUNT``), or its slots sorted and placed (``PLACE_CHUNK``)."""
    DROPPED: tl.constexpr = BINS - 1

    # ---- this program's chunk and its slots' bins --------------------------------------------------------------
    slots = program * SLOTS + lanes
    inside = slots < num_slots
    bins = _slot_bins(ids_ptr, map_ptr, slots, num_slots, num_experts, map_mode, DROPPED)
    if STAGE == 1:
        tl.store(counts_ptr + program * BINS + bins_range, tl.histogram(bins, BINS, mask=inside))
    else:  # PLACE_CHUNK
        # ---- every bin's total, the slots of each bin in the chunks before this one, and in this one -------------
        totals = tl.zeros([BINS], dtype=tl.int32)
        before = tl.zeros([BINS], dtype=tl.int32)
        rows = tl.arange(0, ROWS)
        first = 0
        while first < programs:
            row = first + rows
            table = tl.load(counts_ptr + row[:, None] * BINS + bins_range[None, :], mask=(row < programs)[:, None],
                            other=0)
            totals += tl.sum(table, 0)
            before += tl.sum(tl.where((row < program)[:, None], table, 0), 0)
            first += ROWS
        own = tl.histogram(bins, BINS, mask=inside)
        sizes = _bin_sizes(totals, bins_range, num_experts, block_size, LAYOUT)
        ends = tl.cumsum(sizes, 0)
        starts = ends - sizes

        # ---- place the chunk: sorted by (bin, slot), a slot's rank in its bin is its place less its bin's first -----
        order = tl.sort(bins * SLOTS + lanes)  # slots past the end are dropped ones after every real dropped slot
        order_bins = order // SLOTS
        order_slots = program * SLOTS + order % SLOTS
        base = starts + before - (tl.cumsum(own, 0) - own)  # where each bin's first slot goes, less its rank
        place = tl.gather(base, order_bins, 0) + lanes
        placed = lanes < tl.minimum(num_slots - program * SLOTS, SLOTS)
        if LAYOUT == 0:
            tl.store(sorted_ptr + place, order_slots, mask=placed & (order_bins != DROPPED))
            if scatter != 0:
                tl.store(scatter_ptr + slots, tl.where(bins != DROPPED, slots, -1), mask=inside)
            total = tl.sum(sizes, 0)
            # the padding after each expert's slots: columns of every expert at once, programs taking turns
            pad_start = starts + totals
            pad_length = sizes - totals
            columns = tl.arange(0, 16)
            column = program * 16
            while column < block_size:
                at = column + columns
                tl.store(sorted_ptr + pad_start[:, None] + at[None, :], num_slots,
                         mask=at[None, :] < pad_length[:, None])
                column += programs * 16
            # each expert's blocks: columns of every expert at once, programs taking turns; -1 past the used blocks
            first_block = starts // block_size
            block_counts = sizes // block_size
            value = bins_range
            if map_mode == 2:  # blocks keep global experts; their values are the local ones (-1: another rank's)
                value = tl.load(map_ptr + bins_range, mask=bins_range < num_experts, other=-1).to(tl.int32)
            column = program * 16
            while column < tl.max(block_counts, 0):
                at = column + columns
                tl.store(expert_ids_ptr + first_block[:, None] + at[None, :], value[:, None] + 0 * at[None, :],
                         mask=at[None, :] < block_counts[:, None])
                column += programs * 16
            _fill(expert_ids_ptr, total // block_size, blocks_len, -1, program, programs, TAIL)
            _fill(sorted_ptr, total, sorted_len, num_slots, program, programs, TAIL)
            if program == 0:
                tl.store(post_padded_ptr, total)
        else:
            tl.store(permutation_ptr + place, order_slots, mask=placed)
            if program == 0:
                tl.store(offsets_ptr + bins_range, ends, mask=bins_range < local_experts)


@triton.jit
def _place_own_bin(ids_ptr, map_ptr, sorted_ptr, expert_ids_ptr, post_padded_ptr, scatter_ptr, permutation_ptr,
                   offsets_ptr, num_slots, num_experts, local_experts, block_size, sorted_len, blocks_len,
                   program, programs, map_mode, scatter, layout, bins_range, lanes, BINS: tl.constexpr,
                   TAIL: tl.constexpr):
    """One launch, one program a bin (the last program: the dropped slots): every slot's bin, the histogram, this
    bin's start, then its slots placed in ascending order by a cumulative count."""
    DROPPED: tl.constexpr = BINS  # outside the histogram: BINS is a power of two >= the bins here
    own_bin = tl.where(program < programs - 1, program, DROPPED)
    inside = lanes < num_slots
    bins = _slot_bins(ids_ptr, map_ptr, lanes, num_slots, num_experts, map_mode, DROPPED)
    counts = tl.histogram(bins, BINS, mask=inside & (bins < BINS))
    # each bin's entries: its count block-padded (the grouped layout launches with a block size of 1: the count)
    sizes = _bin_sizes(counts, bins_range, num_experts, block_size, 0)
    # this bin's start (the sizes of the bins before it: for the dropped slots, of every bin), its count and the
    # plan's total, in one reduction
    start, count, total = tl.reduce((tl.where(bins_range < own_bin, sizes, 0),
                                     tl.where(bins_range == own_bin, counts, 0), sizes), 0, _add3)
    size = tl.where(own_bin < num_experts, (count + block_size - 1) // block_size * block_size, 0)
    mine = inside & (bins == own_bin)
    place = start + tl.cumsum(mine.to(tl.int32), 0) - 1
    if layout == 0:  # (a uniform branch on a scalar)
        if own_bin != DROPPED:
            tl.store(sorted_ptr + place, lanes, mask=mine)
            steps = tl.arange(0, TAIL)
            pad = start + count
            while pad < start + size:  # the sentinel after the slots, up to the padded size
                at = pad + steps
                tl.store(sorted_ptr + at, num_slots, mask=at < start + size)
                pad += TAIL
            value = own_bin
            if map_mode == 2:  # blocks keep global experts; their values are the local ones (-1: another rank's)
                value = tl.load(map_ptr + own_bin).to(tl.int32)
            block = start // block_size
            while block < (start + size) // block_size:
                at = block + steps
                tl.store(expert_ids_ptr + at, value, mask=at < (start + size) // block_size)
                block += TAIL
        else:
            if scatter != 0:
                tl.store(scatter_ptr + lanes, tl.where(bins != DROPPED, lanes, -1), mask=inside)
            tl.store(post_padded_ptr, total)
        _fill(sorted_ptr, total, sorted_len, num_slots, program, programs, TAIL)
        _fill(expert_ids_ptr, total // block_size, blocks_len, -1, program, programs, TAIL)
    else:
        tl.store(permutation_ptr + place, lanes, mask=mine)
        if own_bin < local_experts:
            tl.store(offsets_ptr + own_bin, start + size)
