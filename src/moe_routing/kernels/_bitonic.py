"""The streaming bitonic routing kernel: sigmoid scoring (with or without bias), flat path; the kernel only.

Selection without K sequential full-row reductions. Every expert gets one exact 64-bit key, the
order-preserving bits of its float32 choice value ``c`` above 20 bits of inverted position (so ties
go to the lower index), held as a float64: keys of this form are non-negative denormals, so float64
comparisons order them exactly like the integers and run on the FP64 pipe instead of the emulated
64-bit integer path. ``LANES`` lanes share a row; each lane streams chunks of ``CHUNK`` experts,
sorts a chunk with a bitonic network and keeps the top ``CHUNK`` of (running list, chunk) with one
max and one bitonic merge; the lanes' lists then merge into the row's top ``CHUNK``. Weights come
from re-reading the K chosen logits (cache hits) and the same sigmoid as the keys used.

Keys, best first: valid experts by ``c``; then invalid experts (non-finite logit or bias) by index;
padding positions past the last expert last. ``CHUNK >= TOPK``, a power of two.
"""

import triton
import triton.language as tl

from ._common import finish_weights, sigmoid_scores

POSITION_BITS = tl.constexpr(20)
POSITION_MASK = tl.constexpr((1 << 20) - 1)
ORDER_INVALID = tl.constexpr(1)  # ordered value of an invalid expert; padding gets 0; valid ones >= 0x00800000


@triton.jit
def _chunk_keys(row_base, bias_ptr, row_ok, lane, member, step, NUM_EXPERTS: tl.constexpr, LANES: tl.constexpr,
                CHUNK: tl.constexpr):
    """Load one chunk per (row, lane), score it, return its keys sorted descending: [ROWS, LANES, CHUNK]."""
    expert = (step * LANES + lane)[:, None] * CHUNK + member[None, :]
    exists = expert < NUM_EXPERTS
    x = tl.load(row_base + expert[None, :, :], mask=row_ok[:, None, None] & exists[None], other=0.0)
    x = x.to(tl.float32)
    valid = (tl.abs(x) < float("inf")) & exists[None]
    scores = sigmoid_scores(x, valid)
    if bias_ptr is not None:
        bias = tl.load(bias_ptr + expert, mask=exists, other=0.0).to(tl.float32)
        valid = valid & (tl.abs(bias) < float("inf"))[None]
        choice = scores + bias[None]
    else:
        choice = scores
    # order-preserving unsigned bits of c (negative floats flipped whole, positive ones get the sign bit)
    bits = choice.to(tl.uint32, bitcast=True)
    ordered = bits ^ tl.where((bits >> 31) != 0, 0xFFFFFFFF, 0x80000000).to(tl.uint32)
    ordered = tl.where(valid, ordered, ORDER_INVALID).to(tl.uint32)
    ordered = tl.where(exists[None], ordered, 0).to(tl.uint32)
    packed = (ordered.to(tl.uint64) << POSITION_BITS) | (-expert[None] + POSITION_MASK).to(tl.uint64)
    return tl.topk(packed.to(tl.float64, bitcast=True), CHUNK, dim=2)


@triton.jit(do_not_specialize=["num_rows", "stride_w_row", "stride_w_col", "stride_i_row", "stride_i_col"],
            do_not_specialize_on_alignment=["weights_ptr", "ids_ptr"])
def bitonic_kernel(
    # inputs
    logits_ptr,  # [T, E] float32 / bfloat16 / float16, unit column stride
    bias_ptr,  # [E] contiguous, any float dtype; None without bias
    stride_l_row,
    # outputs
    weights_ptr,  # [T, K] float32
    ids_ptr,  # [T, K] int32
    stride_w_row,
    stride_w_col,
    stride_i_row,
    stride_i_col,
    # scalars
    num_rows,
    scale,  # routed_scaling_factor, float32
    # problem
    TOPK: tl.constexpr,
    RENORMALIZE: tl.constexpr,
    NUM_EXPERTS: tl.constexpr,
    # tunable parameters
    ROWS: tl.constexpr,
    LANES: tl.constexpr,
    CHUNK: tl.constexpr,
    LOG2_CHUNK: tl.constexpr,
):
    STEPS: tl.constexpr = (NUM_EXPERTS + LANES * CHUNK - 1) // (LANES * CHUNK)
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < num_rows
    lane = tl.arange(0, LANES)
    member = tl.arange(0, CHUNK)
    row_base = logits_ptr + rows.to(tl.int64)[:, None, None] * stride_l_row

    # load + score + select, one chunk per lane at a time: keep each lane's top CHUNK keys
    best = _chunk_keys(row_base, bias_ptr, row_ok, lane, member, 0, NUM_EXPERTS, LANES, CHUNK)
    for step in range(1, STEPS):
        # ascending running list against a descending chunk: their elementwise max is a bitonic
        # sequence holding the top CHUNK of both
        best = tl.maximum(tl.bitonic_merge(best),
                          _chunk_keys(row_base, bias_ptr, row_ok, lane, member, step, NUM_EXPERTS, LANES, CHUNK))
    # merge the lanes of each row: the row's top CHUNK, sorted descending
    best = tl.topk(tl.reshape(best, (ROWS, LANES * CHUNK)), CHUNK, dim=1)

    # decode: expert ids; validity from the ordered value
    bits = best.to(tl.uint64, bitcast=True)
    expert = (-(bits & POSITION_MASK).to(tl.int32) + POSITION_MASK)
    valid = (bits >> POSITION_BITS) > ORDER_INVALID

    # weight: unbiased scores of the chosen experts (re-read: cache hits), renormalised, scaled
    slot = tl.arange(0, CHUNK)
    out_mask = row_ok[:, None] & (slot < TOPK)[None, :]
    rows64 = rows.to(tl.int64)[:, None]
    x = tl.load(logits_ptr + rows64 * stride_l_row + expert, mask=out_mask & valid, other=0.0).to(tl.float32)
    chosen = tl.where(out_mask, sigmoid_scores(x, valid), 0.0)
    weights = finish_weights(chosen, slot, TOPK, RENORMALIZE, ROWS, CHUNK, LOG2_CHUNK, scale)

    # store
    tl.store(weights_ptr + rows64 * stride_w_row + slot[None, :] * stride_w_col, weights, mask=out_mask)
    tl.store(ids_ptr + rows64 * stride_i_row + slot[None, :] * stride_i_col, expert, mask=out_mask)
