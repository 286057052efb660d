"""The general routing kernel ("rounds"): every scoring, grouping and size; the kernel only.

Configuration and launching live in launch.py. One program routes ``ROWS`` tokens.  Each row is read once into registers as a ``[ROWS, BLOCK]``
tile in which position ``p`` holds expert ``(p // BLOCK_GROUP_SIZE) * GROUP_SIZE + p % BLOCK_GROUP_SIZE``:
for the flat path (one group) position and expert coincide; for the grouped path each group gets a
power-of-two slot so the group stage is a reshape to ``[ROWS, BLOCK_GROUPS, BLOCK_GROUP_SIZE]``.
Positions increase with the expert index, so "lowest position" is "lowest expert index" everywhere.

Selection takes TOPK rounds of one fused (key, lowest position) max over the row. It ranks experts
by an int32 key that orders like the float32 choice value ``c`` (valid
experts), then ``INVALID`` (non-finite logit or bias: after every valid expert), then ``TAKEN``
(already chosen, padding, or in an eliminated group: never chosen).
"""

import triton
import triton.language as tl

from ._common import SOFTMAX, elementwise_scores, finish_weights, kept_groups, top2_group_score, tree_sum

TAKEN = tl.constexpr(-(2**31))
INVALID = tl.constexpr(-(2**31) + 1)


@triton.jit
def _order_key(c):
    """int32 key with key(a) < key(b) iff a < b for finite float32 a, b (and -0.0 == +0.0)."""
    c = tl.where(c == 0.0, 0.0, c)
    bits = c.to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit(do_not_specialize=["num_rows", "stride_w_row", "stride_w_col", "stride_i_row", "stride_i_col"],
            do_not_specialize_on_alignment=["weights_ptr", "ids_ptr"])
def rounds_kernel(
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
    padding_ptr,  # [T] uint8, nonzero on a padded row (ids -1, weights 0); None without
    # problem
    TOPK: tl.constexpr,
    SCORING: tl.constexpr,  # _common.SIGMOID, SOFTMAX or SQRTSOFTPLUS
    RENORMALIZE: tl.constexpr,
    NUM_GROUPS: tl.constexpr,  # 1 on the flat path
    GROUP_SIZE: tl.constexpr,  # experts per group (all experts on the flat path)
    TOPK_GROUP: tl.constexpr,
    # tunable parameters
    ROWS: tl.constexpr,
    BLOCK_GROUPS: tl.constexpr,
    BLOCK_GROUP_SIZE: tl.constexpr,
    BLOCK_K: tl.constexpr,
    LOG2_BLOCK: tl.constexpr,
    LOG2_BLOCK_K: tl.constexpr,
    GRID_WAIT: tl.constexpr = False,  # launched with PDL: wait for the stream's previous kernel first (launch.py)
):
    if GRID_WAIT:  # nothing is read before the previous kernel has completed and its writes are visible
        tl.extra.cuda.gdc_wait()
    BLOCK: tl.constexpr = BLOCK_GROUPS * BLOCK_GROUP_SIZE
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < num_rows
    pos = tl.arange(0, BLOCK)
    group_of = pos // BLOCK_GROUP_SIZE
    member = pos % BLOCK_GROUP_SIZE
    expert = group_of * GROUP_SIZE + member
    exists = (member < GROUP_SIZE) & (group_of < NUM_GROUPS)

    # load: the whole row, once; non-finite logits (and padding) are invalid
    offsets = rows.to(tl.int64)[:, None] * stride_l_row + expert[None, :]
    present = row_ok[:, None] & exists[None, :]
    x = tl.load(logits_ptr + offsets, mask=present, other=0.0).to(tl.float32)
    valid = present & (tl.abs(x) < float("inf"))
    if bias_ptr is not None:
        bias = tl.load(bias_ptr + expert, mask=exists, other=0.0).to(tl.float32)
        valid = valid & (tl.abs(bias) < float("inf"))[None, :]

    # score: s = sigmoid(x), softmax over the valid experts of the row, or sqrt(softplus(x)); 0 where invalid
    if SCORING == SOFTMAX:
        masked = tl.where(valid, x, float("-inf"))
        row_max = tl.max(masked, axis=1)
        row_max = tl.where(row_max == float("-inf"), 0.0, row_max)
        exps = tl.where(valid, tl.exp(masked - row_max[:, None]), 0.0)
        total = tree_sum(exps, ROWS, BLOCK, LOG2_BLOCK)
        scores = exps / tl.where(total > 0.0, total, 1.0)[:, None]
    else:
        scores = elementwise_scores(x, valid, SCORING)
    if bias_ptr is not None:
        choice = tl.where(valid, scores + bias[None, :], 0.0)
    else:
        choice = scores

    # group: keep the TOPK_GROUP best groups (score: sum of the two largest c, or the largest s)
    allowed = exists[None, :]
    if TOPK_GROUP < NUM_GROUPS:
        per_group = tl.reshape(tl.where(valid, choice, float("-inf")), (ROWS, BLOCK_GROUPS, BLOCK_GROUP_SIZE))
        if bias_ptr is not None:
            best, best_at = tl.max(per_group, axis=2, return_indices=True, return_indices_tie_break_left=True)
            slot = tl.arange(0, BLOCK_GROUP_SIZE)[None, None, :]
            second = tl.max(tl.where(slot == best_at[:, :, None], float("-inf"), per_group), axis=2)
            group_score = top2_group_score(best, second)
        else:
            group_score = tl.max(per_group, axis=2)
        kept = kept_groups(group_score, NUM_GROUPS, TOPK_GROUP, BLOCK_GROUPS)
        kept = tl.broadcast_to(kept[:, :, None], (ROWS, BLOCK_GROUPS, BLOCK_GROUP_SIZE))
        allowed = allowed & tl.reshape(kept, (ROWS, BLOCK))

    # select: TOPK rounds of one fused (key, lowest position) max; the winner's score rides along
    key = tl.where(valid, _order_key(choice), INVALID)
    key = tl.where(allowed, key, TAKEN)
    slot_k = tl.arange(0, BLOCK_K)
    chosen_pos = tl.zeros((ROWS, BLOCK_K), dtype=tl.int32)
    chosen_score = tl.zeros((ROWS, BLOCK_K), dtype=tl.float32)
    for r in tl.static_range(TOPK):
        _, at = tl.max(key, axis=1, return_indices=True, return_indices_tie_break_left=True)
        hit = pos[None, :] == at[:, None]
        won = tl.sum(tl.where(hit, scores, 0.0), axis=1)
        key = tl.where(hit, TAKEN, key)
        chosen_pos = tl.where(slot_k[None, :] == r, at[:, None], chosen_pos)
        chosen_score = tl.where(slot_k[None, :] == r, won[:, None], chosen_score)

    # weight: unbiased scores, renormalised (1/K when they sum to 0), scaled
    weights = finish_weights(chosen_score, slot_k, TOPK, RENORMALIZE, ROWS, BLOCK_K, LOG2_BLOCK_K, scale)
    ids = (chosen_pos // BLOCK_GROUP_SIZE) * GROUP_SIZE + chosen_pos % BLOCK_GROUP_SIZE
    if padding_ptr is not None:
        padded = tl.load(padding_ptr + rows, mask=row_ok, other=0) != 0
        weights = tl.where(padded[:, None], 0.0, weights)
        ids = tl.where(padded[:, None], -1, ids)

    # store
    out_mask = row_ok[:, None] & (slot_k < TOPK)[None, :]
    rows64 = rows.to(tl.int64)[:, None]
    tl.store(weights_ptr + rows64 * stride_w_row + slot_k[None, :] * stride_w_col, weights, mask=out_mask)
    tl.store(ids_ptr + rows64 * stride_i_row + slot_k[None, :] * stride_i_col, ids, mask=out_mask)
