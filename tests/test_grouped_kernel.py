"""The bitonic kernel's grouped path (kernels/_bitonic.py: group stage then the masked stream, or both in
one read of the row), on every plan the rules choose for DeepSeek-V3's grouping (256 experts, 8 groups of
32, 4 kept, K = 8) and, for the one-pass path, other groupings it takes.

Rows are built so that the group stage decides the answer (the flat top-8 would differ), with expected
ids written out by hand; every plan is also judged against float64 and must give the same bits.
"""

import pytest
import torch

from conftest import DEVICE, TOKEN_SCALE, assert_plans_agree, random_bias, random_logits, route_every_plan

NAN = float("nan")
EXPERTS, GROUPS, KEPT, TOPK = 256, 8, 4, 8


def _ids_of_every_plan(logits, bias, **kwargs):
    """ids (as lists) of every plan, each checked against float64; all plans must agree bit for bit."""
    results = route_every_plan(logits, TOPK, correction_bias=bias, num_expert_group=GROUPS, topk_group=KEPT,
                               routed_scaling_factor=2.5, **kwargs)
    plans = {plan.name for plan, _, _ in results.values()}
    assert plans == {"bitonic"}, plans
    assert_plans_agree(results)
    return next(iter(results.values()))[2].cpu().tolist()


def _background(rows, value=-9.0):
    return torch.full((rows, EXPERTS), value)


def test_the_group_stage_decides():
    logits = _background(3, -5.0)
    # row 0: group 0 holds the single best expert (0) but a weak second; groups 1-4 hold two strong ones
    logits[0, 0] = 6.0
    for g in (1, 2, 3, 4):
        logits[0, 32 * g: 32 * g + 2] = 2.0
    for g in (5, 6, 7):
        logits[0, 32 * g: 32 * g + 2] = 1.0
    # row 1: groups 3 and 5 tie exactly for the fourth place: the lower index (3) is kept
    for g, value in ((1, 3.0), (2, 3.0), (4, 3.0), (3, 2.0), (5, 2.0), (0, 1.0), (6, 1.0), (7, 1.0)):
        logits[1, 32 * g: 32 * g + 2] = value
    # row 2: group 2 has one valid expert (score = its c, no second); group 7 has none (ranks last)
    logits[2, 0:2] = 3.0
    logits[2, 32:34] = 3.0
    logits[2, 64] = 4.0
    logits[2, 65:96] = NAN
    logits[2, 192] = 0.0
    logits[2, 193] = -0.125
    logits[2, 224:256] = NAN
    bias = torch.zeros(EXPERTS)
    expected = [
        [32, 33, 64, 65, 96, 97, 128, 129],
        [32, 33, 64, 65, 128, 129, 96, 97],
        [64, 0, 1, 32, 33, 192, 193, 2],
    ]
    assert _ids_of_every_plan(logits.to(DEVICE), bias.to(DEVICE)) == expected


def test_kept_groups_under_the_window_are_redone_exactly():
    # groups 0-3 have bias 2 and groups 4-7 bias -1: the window is [1, 3], so every choice value of groups
    # 4-7 lies under it. Row 0 keeps group 3 (two valid experts) and three of groups 4-7: its last six
    # picks come from under the window and are ranked again with exact keys.
    bias = torch.cat([torch.full((128,), 2.0), torch.full((128,), -1.0)])
    logits = random_logits(2, EXPERTS, seed=5, device="cpu")
    logits[0, :96] = NAN
    logits[0, 98:128] = NAN
    ids = _ids_of_every_plan(logits.to(DEVICE), bias.to(DEVICE))
    assert ids[0][:2] == sorted(ids[0][:2], key=lambda e: -float(logits[0, e])) and set(ids[0][:2]) == {96, 97}
    assert all(e >= 128 for e in ids[0][2:])
    assert all(e < 128 for e in ids[1])  # a clean row keeps four of groups 0-3


def _hard_rows(tokens, experts, groups):
    """bf16 logits (7 rows or more) with a random row, NaN among finite logits, an all -inf row, two groups of the
    same values (tied group scores), every expert tied, half of every group -inf, and the first expert of every
    group low or invalid: -inf in odd groups, +inf in every fourth (as invalid as -inf: the group scores tell by
    x * 0). ``_hard_bias`` gives those first experts the largest bias: an invalid one must not count towards its
    group's score."""
    logits = random_logits(tokens, experts, torch.bfloat16, seed=experts + groups).cpu()
    size = experts // groups
    logits[1, ::3] = NAN
    logits[2] = float("-inf")
    logits[3, :size] = logits[3, size:2 * size]  # groups 0 and 1 hold the same values: tied group scores
    logits[4] = 0.5  # every expert tied
    logits[5, 1::2] = float("-inf")  # half of every group invalid
    logits[6, 0::size] = -8.0
    logits[6, size::2 * size] = float("-inf")
    logits[6, size::4 * size] = float("inf")
    return logits.to(DEVICE)


def _hard_bias(experts, groups):
    """A random bias, the same on groups 0 and 1 (with ``_hard_rows``' row 3: tied groups), 1.5 (the largest entry)
    on the first expert of every group."""
    size = experts // groups
    bias = random_bias(experts, seed=groups)
    bias[size:2 * size] = bias[:size]
    bias[0::size] = 1.5
    return bias


@pytest.mark.parametrize("case", ["window outside (-8, 8), a nan entry", "bfloat16 bias, window far from 0"])
def test_every_key_encoding_of_the_grouped_path(case):
    """Each key encoding of a biased call on every plan of DeepSeek-V3's grouping, each one-pass plan with its
    two-pass twin (all_plans), on ``_hard_rows``. (The unbiased call's plans run on random, NaN and -inf rows in
    test_plans.test_every_plan_matches_float64; that the rule gives it the bitonic kernel is checked here.)

    Exact keys: a window outside (-8, 8) and a NaN bias entry each take them for the whole call (the same branch
    of the same plans; test_window_keys checks that each alone does); here they hold together: c of magnitude 8 or
    more (where window keys would lose the 1e-6 margin in float32) and an expert made invalid by its bias. Window
    keys: a bfloat16 bias whose window lies far from 0 (inside (-8, 8)); the window is formed in float32 from the
    bias as loaded, so one case holds both."""
    from moe_routing.call import check_call
    from moe_routing.kernels import all_plans

    logits = _hard_rows(7, EXPERTS, GROUPS)
    bias = _hard_bias(EXPERTS, GROUPS)
    if case.startswith("window outside"):
        bias = bias - 9.0
        bias[7] = NAN  # one non-finite entry: that expert invalid
    else:
        bias = (bias + 5.0).to(torch.bfloat16)
        assert bias.float().max() + 1.0 < 8.0  # the window's top (max b + 1) inside (-8, 8): window keys
    call = check_call(logits, TOPK, "sigmoid", bias, GROUPS, KEPT, True, 2.5, None)
    assert any(plan.constexprs.get("ONE_PASS") for plan in all_plans(call, True, True).values())
    assert {plan.name for plan in all_plans(call, True, biased=False).values()} == {"bitonic"}  # (without bias)
    ids = _ids_of_every_plan(logits, bias)
    assert all(len(set(row)) == TOPK for row in ids)


@pytest.mark.parametrize("experts,groups,kept,topk", [
    (512, 16, 8, 8), (64, 2, 1, 6), (256, 4, 2, 16), (128, 4, 3, 5),
    # steps of two groups, each over two lanes (lists of 8, 16 and 32 keys): the tiles whose group scores
    # once came out wrong on the H200 only (docs/kernel-design-log.md)
    (128, 2, 1, 4), (64, 2, 1, 12), (512, 8, 4, 20)])
def test_one_pass_gives_the_two_pass_bits(experts, groups, kept, topk):
    """Groupings the one-pass path serves (launch.one_pass_ok): every plan, and each one-pass plan's
    two-pass twin (all_plans), against float64 and bit for bit, on ``_hard_rows``: NaN, -inf, exact ties inside
    and across groups, tied groups, and invalid experts (-inf and +inf logits) with the largest bias.
    DeepSeek-V3's grouping (256 experts, 8 groups, 4 kept, K = 8) runs on these rows, with each key encoding, in
    test_every_key_encoding_of_the_grouped_path."""
    from moe_routing.call import check_call
    from moe_routing.kernels import all_plans

    logits = _hard_rows(7 * TOKEN_SCALE, experts, groups)
    bias = _hard_bias(experts, groups)
    call = check_call(logits, topk, "sigmoid", bias, groups, kept, True, 2.5, None)
    assert any(plan.constexprs.get("ONE_PASS") for plan in all_plans(call, True).values())
    results = route_every_plan(logits, topk, correction_bias=bias, num_expert_group=groups, topk_group=kept,
                               routed_scaling_factor=2.5)
    assert any(name.endswith("two passes") for name in results)
    assert_plans_agree(results)


def test_one_pass_steps_of_groups_over_several_lanes():
    """The rule's one-pass tiles include steps of two groups, each spread over two lanes, for the groupings
    test_one_pass_gives_the_two_pass_bits adds for them: the class that was once wrong on the H200
    only stays covered."""
    from moe_routing.call import check_call
    from moe_routing.kernels import all_plans
    from moe_routing.kernels.rules import one_pass_step

    for experts, groups, kept, topk in ((128, 2, 1, 4), (64, 2, 1, 12), (512, 8, 4, 20)):
        call = check_call(torch.zeros(1, experts, dtype=torch.bfloat16), topk, "sigmoid", torch.zeros(experts), groups,
                          kept, True, 1.0, None)
        shapes = {one_pass_step(plan, call) for plan in all_plans(call, True, True).values()
                  if plan.constexprs["ONE_PASS"]}
        assert (2, 2) in shapes, (experts, groups, kept, topk, shapes)
