"""Groups: uneliminating groupings equal the ungrouped call; eliminating groupings of real models."""

import pytest
import torch

import moe_routing
from conftest import DEVICE, TOKEN_SCALE, random_bias, random_logits, route_and_check
from moe_routing.call import check_call


@pytest.mark.parametrize("groups", [1, 2, 4, 8])
@pytest.mark.parametrize("scoring_func", ["sigmoid", "softmax"])
def test_uneliminating_groups_equal_ungrouped(groups, scoring_func):
    logits = random_logits(11 * TOKEN_SCALE, 256, torch.bfloat16, seed=groups)
    bias = random_bias(256, seed=groups + 1)
    flat = moe_routing.route(logits, 8, scoring_func=scoring_func, correction_bias=bias)
    grouped = moe_routing.route(logits, 8, scoring_func=scoring_func, correction_bias=bias,
                                num_expert_group=groups, topk_group=groups)
    assert torch.equal(flat[1], grouped[1]) and torch.equal(flat[0], grouped[0])
    # and the float64 judge runs the group stage literally for the grouped call
    route_and_check(logits, 8, scoring_func=scoring_func, correction_bias=bias,
                    num_expert_group=groups, topk_group=groups)


@pytest.mark.parametrize("groups,topk_group", [(4, 5), (8, 9), (2, 64)])
def test_topk_group_above_groups_equals_ungrouped(groups, topk_group):
    logits = random_logits(7 * TOKEN_SCALE, 128, torch.float32, seed=groups)
    bias = random_bias(128, seed=3)
    flat = moe_routing.route(logits, 6, correction_bias=bias)
    grouped = moe_routing.route(logits, 6, correction_bias=bias, num_expert_group=groups, topk_group=topk_group)
    assert torch.equal(flat[1], grouped[1]) and torch.equal(flat[0], grouped[0])


@pytest.mark.parametrize("groups,topk_group", [(1, 1), (2, 2), (8, 8), (8, 9)])
def test_uneliminating_calls_normalise_to_the_flat_path(groups, topk_group):
    call = check_call(torch.zeros(2, 256), 8, "sigmoid", None, groups, topk_group, True, 1.0, None)
    assert (call.num_groups, call.topk_group, call.grouped) == (1, 1, False)


ELIMINATING = [  # (experts, groups, topk_group, topk)
    (256, 8, 4, 8),  # DeepSeek-V3 / R1
    (128, 4, 2, 6),
    (160, 8, 3, 6),  # group size 20: not a power of two
    (96, 32, 2, 3),  # group size 3
    (64, 64, 3, 2),  # group size 1
]


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("scoring_func", ["sigmoid", "softmax"])
@pytest.mark.parametrize("experts,groups,topk_group,topk", ELIMINATING, ids=lambda v: str(v))
def test_eliminating_groups(experts, groups, topk_group, topk, scoring_func, with_bias):
    logits = random_logits(19 * TOKEN_SCALE, experts, torch.bfloat16, seed=experts + groups)
    bias = random_bias(experts, seed=experts) if with_bias else None
    call = check_call(logits, topk, scoring_func, bias, groups, topk_group, True, 1.0, None)
    assert call.grouped
    route_and_check(logits, topk, scoring_func=scoring_func, correction_bias=bias,
                    num_expert_group=groups, topk_group=topk_group)


def test_eliminated_groups_are_never_chosen():
    """The single best expert is not chosen when its group is eliminated."""
    experts, groups = 64, 8
    logits = torch.zeros(1, experts)  # s = 0.5
    logits[0, 8:16] = 3.0  # group 1: c = sigmoid(3) ~ 0.95 each, score ~ 1.9
    bias = torch.zeros(experts)
    bias[0] = 4.5  # expert 0: c = 5.0, the best of the row ...
    bias[1:8] = -10.0  # ... but group 0 scores 5.0 - 9.5 = -4.5; groups 2..7 score 1.0
    weights, ids = moe_routing.route(logits.to(DEVICE), 4, correction_bias=bias.to(DEVICE),
                                     num_expert_group=groups, topk_group=1)
    assert ids.cpu().tolist() == [[8, 9, 10, 11]]
    _, ids = moe_routing.route(logits.to(DEVICE), 12, correction_bias=bias.to(DEVICE),
                               num_expert_group=groups, topk_group=2)
    assert ids.cpu().tolist() == [[8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]]  # group 2 wins the 1.0 tie


@pytest.mark.parametrize("scale", [1.0, 2.446, 2.827])
@pytest.mark.parametrize("renormalize", [True, False])
def test_routed_scaling_factor(scale, renormalize):
    logits = random_logits(9 * TOKEN_SCALE, 256, torch.bfloat16, seed=8)
    bias = random_bias(256, seed=9)
    route_and_check(logits, 8, correction_bias=bias, num_expert_group=8, topk_group=4,
                    renormalize=renormalize, routed_scaling_factor=scale)
    weights, _ = moe_routing.route(logits, 8, correction_bias=bias, routed_scaling_factor=scale)
    torch.testing.assert_close(weights.sum(-1).cpu(), torch.full((logits.shape[0],), scale), rtol=0, atol=4e-6 * scale)
