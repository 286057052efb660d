"""The hash-routing kernel: each row's experts come from a table (``ids = tid2eid[input_ids]``), and only their
weights are computed (docs/semantics.md, rule 7).

``ROWS`` rows a program, ``BLOCK_K`` slots a row: the token id of each row, its table row, the K logits those
experts hold (gathered: K loads a row instead of E), their scores by the same code as the other kernels
(``_common.elementwise_scores``), renormalised by the same pairwise sum (``finish_weights``), scaled and stored.
A token id outside the table gives the row ids -1 and weights 0, like a padded row; a table entry outside
[0, E) (only possible for a table the op could not check: one first used inside a CUDA-graph capture) is not
read and counts as an invalid expert. Nothing reads memory outside its tensor.
"""

import triton
import triton.language as tl

from ._common import elementwise_scores, finish_weights


@triton.jit(do_not_specialize=["num_rows", "stride_w_row", "stride_w_col", "stride_i_row", "stride_i_col"])
def hash_kernel(
    logits_ptr,  # [T, E] float32 / bfloat16 / float16, unit column stride
    stride_l_row,
    input_ids_ptr,  # [T] int32 / int64, unit stride
    table_ptr,  # [V, K] int32 / int64, contiguous
    vocabulary,  # V
    weights_ptr,  # [T, K] float32
    ids_ptr,  # [T, K] int32 / int64
    stride_w_row,
    stride_w_col,
    stride_i_row,
    stride_i_col,
    num_rows,
    scale,  # routed_scaling_factor, float32
    padding_ptr,  # [T] uint8, nonzero on a padded row; None without
    TOPK: tl.constexpr,
    SCORING: tl.constexpr,  # _common.SIGMOID or SQRTSOFTPLUS
    RENORMALIZE: tl.constexpr,
    NUM_EXPERTS: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK_K: tl.constexpr,
    LOG2_BLOCK_K: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < num_rows
    rows64 = rows.to(tl.int64)
    slot = tl.arange(0, BLOCK_K)
    token = tl.load(input_ids_ptr + rows64, mask=row_ok, other=0).to(tl.int64)
    known = row_ok & (token >= 0) & (token < vocabulary)
    if padding_ptr is not None:
        known = known & (tl.load(padding_ptr + rows64, mask=row_ok, other=1) == 0)
    in_row = known[:, None] & (slot < TOPK)[None, :]
    expert = tl.load(table_ptr + token[:, None] * TOPK + slot[None, :], mask=in_row, other=0).to(tl.int64)
    inside = in_row & (expert >= 0) & (expert < NUM_EXPERTS)
    x = tl.load(logits_ptr + rows64[:, None] * stride_l_row + expert, mask=inside, other=0.0).to(tl.float32)
    valid = inside & (tl.abs(x) < float("inf"))
    weights = finish_weights(elementwise_scores(x, valid, SCORING), slot, TOPK, RENORMALIZE, ROWS, BLOCK_K,
                             LOG2_BLOCK_K, scale)
    weights = tl.where(known[:, None], weights, 0.0)
    expert = tl.where(known[:, None], expert, -1)
    out_mask = row_ok[:, None] & (slot < TOPK)[None, :]
    tl.store(weights_ptr + rows64[:, None] * stride_w_row + slot[None, :] * stride_w_col, weights, mask=out_mask)
    tl.store(ids_ptr + rows64[:, None] * stride_i_row + slot[None, :] * stride_i_col, expert, mask=out_mask)
