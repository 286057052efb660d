"""Pieces every routing kernel shares, so that all of them compute bit-identical scores and sums.

Batch invariance (a row's result does not depend on T or on which tile a rule picked) needs every
kernel variant to round exactly alike: the same sigmoid, the same float32 ``s + b``, and sums whose
association order is fixed by the code, not by the register layout the compiler chose.
"""

import triton
import triton.language as tl

# the SCORING constexpr: call.SIGMOID, call.SOFTMAX, call.SQRTSOFTPLUS
SIGMOID = tl.constexpr(0)
SOFTMAX = tl.constexpr(1)
SQRTSOFTPLUS = tl.constexpr(2)
SOFTPLUS_THRESHOLD = tl.constexpr(20.0)  # softplus(x) = x above it (torch's default threshold)


@triton.jit
def sigmoid_scores(x, valid):
    """s = 1 / (1 + exp(-x)) in float32, 0 where invalid (one code path for every kernel)."""
    return tl.where(valid, 1.0 / (1.0 + tl.exp(-x)), 0.0)


@triton.jit
def sqrtsoftplus_scores(x, valid):
    """s = sqrt(softplus(x)) in float32, 0 where invalid; softplus(x) = x above 20, else log1p(exp(x)).

    log1p(e) is formed as log(u) * e / (u - 1), u = 1 + e (exact where u rounds to 1: then e), which keeps the
    relative accuracy of small e: log(1 + e) alone would give 0 below x = -17, where s is still 2e-4. The exponential,
    logarithm, division and square root are the hardware's approximations (a few float32 steps; every kernel uses
    this one function, so every tile forms the same bits)."""
    e = tl.exp(tl.minimum(x, SOFTPLUS_THRESHOLD))
    u = 1.0 + e
    log1p = tl.where(u == 1.0, e, tl.log(u) * (e / tl.where(u == 1.0, 1.0, u - 1.0)))
    softplus = tl.where(x > SOFTPLUS_THRESHOLD, x, log1p)
    return tl.where(valid, tl.sqrt(tl.where(valid, softplus, 0.0)), 0.0)


@triton.jit
def elementwise_scores(x, valid, SCORING: tl.constexpr):
    """The elementwise scorings' s (sigmoid or sqrt-softplus), 0 where invalid."""
    if SCORING == SQRTSOFTPLUS:
        return sqrtsoftplus_scores(x, valid)
    else:
        return sigmoid_scores(x, valid)


@triton.jit
def tree_sum(x, ROWS: tl.constexpr, N: tl.constexpr, LOG2_N: tl.constexpr):
    """Row sums of ``x`` [ROWS, N] by a fixed pairwise tree: ((x0+x1)+(x2+x3))+..., layout-independent."""
    for level in tl.static_range(LOG2_N):
        pairs = tl.reshape(x, (ROWS, N >> (level + 1), 2))
        left, right = tl.split(pairs)
        x = left + right
    return tl.reshape(x, (ROWS,))


@triton.jit
def top2_group_score(best, second):
    """Rule 2's group score from a group's two largest valid ``c`` (-inf where missing): their sum; the
    largest alone when there is no second; -inf for a group with no valid expert."""
    return tl.where(best == float("-inf"), best, best + tl.where(second == float("-inf"), 0.0, second))


@triton.jit
def kept_groups(group_scores, NUM_GROUPS: tl.constexpr, TOPK_GROUP: tl.constexpr, BLOCK_GROUPS: tl.constexpr):
    """[ROWS, BLOCK_GROUPS] mask of the TOPK_GROUP best groups of each row (rule 2: ties to the lower index).

    Up to 16 groups, and up to 64 on a tile of one row per program, by rank: the rank of group g is the
    number of real groups beating it (higher score, or an equal score and a lower index), a permutation of
    the real groups, so exactly TOPK_GROUP of them are kept; all pairs at once, the shortest chain. With
    more groups on tiles of several rows the pairs are too many (64 groups: 4096 per row, unrolled in the
    thread that holds the row; a plan compiled for ~9 minutes): TOPK_GROUP rounds
    instead, each keeping the best group left (the lowest index among equal scores). Both give the same
    groups: the rounds keep them in rank order (the scores hold no NaN: invalid experts are -inf before the
    group stage). One row a program spreads its pairs over the warp, where the rounds (two reductions
    across lanes a round) were slower at decode sizes.
    """
    g = tl.arange(0, BLOCK_GROUPS)
    if BLOCK_GROUPS <= 16 or group_scores.shape[0] == 1:  # (at most 64 groups: call.MAX_GROUPS)
        mine = group_scores[:, :, None]
        other = group_scores[:, None, :]
        beats = ((other > mine) | ((other == mine) & (g[None, None, :] < g[None, :, None]))) & (g < NUM_GROUPS)[None, None, :]
        rank = tl.sum(beats.to(tl.int32), axis=2)
        return (rank < TOPK_GROUP) & (g < NUM_GROUPS)[None, :]
    left = tl.broadcast_to((g < NUM_GROUPS)[None, :], group_scores.shape)  # real groups not kept yet
    kept = tl.zeros(group_scores.shape, tl.int1)
    for _ in tl.static_range(TOPK_GROUP):
        best = tl.max(tl.where(left, group_scores, float("-inf")), axis=1)
        first = tl.min(tl.where(left & (group_scores == best[:, None]), g[None, :], BLOCK_GROUPS), axis=1)
        chosen = g[None, :] == first[:, None]
        kept = kept | chosen
        left = left & ~chosen
    return kept


@triton.jit
def finish_weights(chosen_scores, slot, TOPK: tl.constexpr, RENORMALIZE: tl.constexpr, ROWS: tl.constexpr,
                   BLOCK_K: tl.constexpr, LOG2_BLOCK_K: tl.constexpr, scale):
    """Rule 4: renormalise by the float32 sum (1/K on a zero sum), then scale. Padding slots hold 0."""
    weights = chosen_scores
    if RENORMALIZE:
        total = tree_sum(tl.where(slot[None, :] < TOPK, weights, 0.0), ROWS, BLOCK_K, LOG2_BLOCK_K)
        weights = tl.where(total[:, None] > 0.0, weights / tl.where(total > 0.0, total, 1.0)[:, None], 1.0 / TOPK)
    return weights * scale


def log2(n: int) -> int:
    """log2 of a power of two (for the LOG2_* constexprs)."""
    return n.bit_length() - 1


__all__ = ["SIGMOID", "SOFTMAX", "SQRTSOFTPLUS", "elementwise_scores", "finish_weights", "kept_groups", "log2",
           "sigmoid_scores", "sqrtsoftplus_scores", "top2_group_score", "tree_sum"]
