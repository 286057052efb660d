"""Ties, near ties, extreme biases, non-finite logits, garbage padding rows, zero weight sums."""

import pytest
import torch

import moe_routing
from conftest import DEVICE, TOKEN_SCALE, random_bias, random_logits, route_and_check

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("scoring_func", ["sigmoid", "softmax", "sqrtsoftplus"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_constant_rows_tie_to_lowest_indices(scoring_func, dtype):
    logits = torch.full((3, 131), 0.25, dtype=dtype, device=DEVICE)
    weights, ids = moe_routing.route(logits, 7, scoring_func=scoring_func)
    assert ids.cpu().tolist() == [list(range(7))] * 3
    torch.testing.assert_close(weights.cpu(), torch.full((3, 7), 1 / 7), rtol=0, atol=1e-6)


def test_duplicated_logits_are_ordered_by_index():
    # values from a small set: exact ties everywhere, well separated otherwise (each row holds more experts of the
    # top value than its K = 9 picks, as every row of this generator's first 40 does; the rule's plan for these
    # rows takes one row a program, so more rows would only repeat its code on the same kind of row)
    gen = torch.Generator().manual_seed(4)
    logits = torch.randint(-2, 3, (5, 96), generator=gen).float().to(DEVICE)
    weights, ids = moe_routing.route(logits, 9)
    reference = moe_routing.reference.route(logits.cpu(), 9)
    assert torch.equal(ids.cpu(), reference[1])
    ids = ids.cpu().long()
    chosen = logits.cpu().gather(1, ids)
    for row in range(ids.shape[0]):  # descending value, ties in increasing index
        pairs = list(zip((-chosen[row]).tolist(), ids[row].tolist()))
        assert pairs == sorted(pairs)
    route_and_check(logits, 9)


def test_ties_in_group_scores_keep_lower_groups():
    logits = torch.zeros(2, 64, device=DEVICE)  # every group scores the same
    bias = torch.zeros(64, device=DEVICE)
    _, ids = moe_routing.route(logits, 16, correction_bias=bias, num_expert_group=8, topk_group=2)
    assert ids.cpu().tolist() == [list(range(16))] * 2


def test_near_ties_are_judged_by_margin():
    """Logits one float32 ulp apart at 5.0: their float32 sigmoids are equal, float64's differ by 3e-9.

    float32 then ties (lower index first) where float64 prefers the other: a near tie, accepted.
    """
    logits = random_logits(16, 64, torch.float32, seed=2).clamp(-3, 3)
    logits[:, 0] = 5.0
    logits[:, 1] = torch.nextafter(torch.tensor(5.0), torch.tensor(6.0)).item()
    verdict = route_and_check(logits, 8)
    assert verdict.near_tie_rows == 16 and verdict.near_tie_differing == 16
    assert moe_routing.route(logits, 8)[1][:, :2].cpu().tolist() == [[0, 1]] * 16


@pytest.mark.parametrize("bias_scale", [1e3, -1e3, 30.0])
def test_large_and_negative_biases(bias_scale):
    logits = random_logits(5 * TOKEN_SCALE, 256, torch.bfloat16, seed=6)
    bias = random_bias(256, seed=7, scale=1.0) * bias_scale
    route_and_check(logits, 8, correction_bias=bias, num_expert_group=8, topk_group=4)
    route_and_check(logits, 8, correction_bias=bias)


def test_bias_decides_choice_but_not_weight():
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0]], device=DEVICE)
    bias = torch.tensor([10.0, 0.0, 0.0, 0.0], device=DEVICE)
    weights, ids = moe_routing.route(logits, 2, correction_bias=bias, renormalize=False)
    assert ids.cpu().tolist() == [[0, 3]]
    expected = torch.sigmoid(torch.tensor([0.0, 3.0]))
    torch.testing.assert_close(weights.cpu()[0], expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("bad", [NAN, INF, -INF], ids=["nan", "+inf", "-inf"])
@pytest.mark.parametrize("scoring_func", ["sigmoid", "softmax", "sqrtsoftplus"])
def test_non_finite_experts_rank_last_and_weigh_zero(bad, scoring_func):
    logits = random_logits(4, 32, torch.float32, seed=9)
    logits[:, 3] = bad  # a single invalid expert in an otherwise fine row
    logits[1, :30] = bad  # row 1: only experts 30 and 31 valid; K = 4 needs two invalid ones
    weights, ids = moe_routing.route(logits, 4, scoring_func=scoring_func)
    weights, ids = weights.cpu(), ids.cpu()
    assert 3 not in ids[0].tolist()
    assert sorted(ids[1, :2].tolist()) == [30, 31] and ids[1, 2:].tolist() == [0, 1]
    assert weights[1, 2:].tolist() == [0.0, 0.0]
    assert torch.isfinite(weights).all()
    route_and_check(logits, 4, scoring_func=scoring_func)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("renormalize", [True, False])
def test_all_invalid_rows(dtype, renormalize):
    logits = torch.tensor([[NAN] * 20, [INF] * 20, [-INF] * 20, [NAN, INF, -INF, NAN] * 5], dtype=dtype, device=DEVICE)
    weights, ids = moe_routing.route(logits, 5, renormalize=renormalize, routed_scaling_factor=2.0)
    assert ids.cpu().tolist() == [[0, 1, 2, 3, 4]] * 4
    expected = 2.0 / 5 if renormalize else 0.0  # zero sum: 1/K each before scaling
    assert weights.cpu().tolist() == [[pytest.approx(expected)] * 5] * 4


def test_invalid_bias_entries_make_experts_invalid():
    logits = random_logits(3, 16, torch.float32, seed=10)
    bias = torch.zeros(16, device=DEVICE)
    bias[0], bias[1] = NAN, INF
    logits[:, :2] = 50.0  # would be the best without the bad bias
    weights, ids = moe_routing.route(logits, 4, correction_bias=bias)
    assert not set(ids.cpu().flatten().tolist()) & {0, 1}
    route_and_check(logits, 4, correction_bias=bias)


def test_groups_without_valid_experts_rank_last():
    logits = random_logits(2, 64, torch.float32, seed=11)
    logits[:, :48] = NAN  # groups 0..5 of 8 hold no valid expert
    bias = torch.zeros(64, device=DEVICE)
    weights, ids = moe_routing.route(logits, 8, correction_bias=bias, num_expert_group=8, topk_group=3)
    ids = ids.cpu()
    assert set(ids[:, :8].flatten().tolist()) <= set(range(48, 64)) | set(range(0, 8))
    assert (ids >= 48).sum(-1).tolist() == [8, 8]  # the 16 valid experts of groups 6, 7 come first
    route_and_check(logits, 8, correction_bias=bias, num_expert_group=8, topk_group=3)


def test_one_valid_expert_group_score_counts_it_alone():
    # group 0: one valid expert with c = 0.9 and one NaN -> score 0.9; group 1: c = 0.5 + 0.5 = 1.0
    logits = torch.tensor([[2.1972246, NAN, 0.0, 0.0]], device=DEVICE)
    bias = torch.zeros(4, device=DEVICE)
    _, ids = moe_routing.route(logits, 2, correction_bias=bias, num_expert_group=2, topk_group=1)
    assert ids.cpu().tolist() == [[2, 3]]
    logits[0, 2] = -3.0  # group 1 now scores ~0.547 < 0.9: group 0 kept; the NaN expert comes last
    _, ids = moe_routing.route(logits, 2, correction_bias=bias, num_expert_group=2, topk_group=1)
    assert ids.cpu().tolist() == [[0, 1]]


@pytest.mark.parametrize("scoring_func", ["sigmoid", "softmax", "sqrtsoftplus"])
def test_garbage_padding_rows_do_not_disturb_real_rows(scoring_func):
    """As in a CUDA-graph batch padded with stale memory: some rows garbage, the rest real."""
    tokens = 12 * TOKEN_SCALE  # every third row garbage
    logits = random_logits(tokens, 256, torch.bfloat16, seed=12)
    clean = moe_routing.route(logits, 8, scoring_func=scoring_func, num_expert_group=8, topk_group=4)
    garbage = logits.clone()
    pad = torch.arange(tokens, device=DEVICE) % 3 == 0
    junk = torch.tensor([NAN, INF, -INF, 6.5e4, -6.5e4, 0.0], dtype=torch.bfloat16, device=DEVICE)
    gen = torch.Generator().manual_seed(13)
    garbage[pad] = junk[torch.randint(0, 6, (int(pad.sum()), 256), generator=gen).to(DEVICE)]
    weights, ids = moe_routing.route(garbage, 8, scoring_func=scoring_func, num_expert_group=8, topk_group=4)
    assert torch.equal(ids[~pad], clean[1][~pad]) and torch.equal(weights[~pad], clean[0][~pad])
    assert ((ids >= 0) & (ids < 256)).all() and torch.isfinite(weights).all()
    assert (ids.sort(-1).values.diff(dim=-1) != 0).all()
    route_and_check(garbage, 8, scoring_func=scoring_func, num_expert_group=8, topk_group=4)


@pytest.mark.parametrize("experts", [512, 600])
def test_saturated_sigmoids_without_bias(experts):
    """sigmoid(20) and sigmoid(30) are both 1.0 in float32. Up to 512 experts the kernel ranks by that value
    (window keys: a tie, lower index first, like the reference); beyond 512 flat sigmoid without bias is
    ranked by the logits (the larger logit first, as float64 has it). Both are near ties."""
    logits = torch.zeros(2, experts, device=DEVICE)
    logits[:, 5] = 20.0
    logits[:, 9] = 30.0
    weights, ids = moe_routing.route(logits, 4)
    assert ids[:, :2].cpu().tolist() == ([[5, 9]] * 2 if experts <= 512 else [[9, 5]] * 2)
    assert ids[:, 2:].cpu().tolist() == [[0, 1]] * 2
    verdict = route_and_check(logits, 4)
    assert verdict.near_tie_rows == 2


def test_sigmoid_underflow_sums_to_zero():
    """Logits so negative that float32 sigmoid is 0: the zero-sum rule gives 1/K (float32 semantics)."""
    logits = torch.full((2, 16), -120.0, device=DEVICE)
    weights, ids = moe_routing.route(logits, 4)
    assert ids.cpu().tolist() == [[0, 1, 2, 3]] * 2
    assert weights.cpu().tolist() == [[0.25] * 4] * 2
    assert torch.equal(weights.cpu(), moe_routing.reference.route(logits.cpu(), 4)[0])
