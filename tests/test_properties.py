"""Properties over random shapes and values (hypothesis), each result judged against float64."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import DEVICE, TOKEN_SCALE, route_checked

SPECIALS = torch.tensor([float("nan"), float("inf"), float("-inf")])


@st.composite
def routing_calls(draw):
    experts = draw(st.integers(1, 320))
    divisors = [g for g in range(1, min(experts, 64) + 1) if experts % g == 0]
    groups = draw(st.sampled_from(divisors))
    topk_group = draw(st.integers(1, groups + 1))
    allowed = min(topk_group, groups) * (experts // groups)
    topk = draw(st.integers(1, min(allowed, 20)))
    tokens = draw(st.integers(1, 6)) * TOKEN_SCALE
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16, torch.float16]))
    logits = torch.randn(tokens, experts, generator=gen) * draw(st.sampled_from([0.1, 1.0, 4.0]))
    special_rate = draw(st.sampled_from([0.0, 0.0, 0.05, 0.5]))
    if special_rate:
        where = torch.rand(tokens, experts, generator=gen) < special_rate
        logits[where] = SPECIALS[torch.randint(0, 3, (int(where.sum()),), generator=gen)]
    bias = None
    if draw(st.booleans()):
        bias_dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]))
        bias = (torch.randn(experts, generator=gen) * draw(st.sampled_from([0.01, 0.3, 3.0]))).to(bias_dtype)
        bias = bias.to(DEVICE)
    kwargs = dict(
        scoring_func=draw(st.sampled_from(["sigmoid", "softmax"])),
        correction_bias=bias,
        num_expert_group=groups,
        topk_group=topk_group,
        renormalize=draw(st.booleans()),
        routed_scaling_factor=draw(st.sampled_from([1.0, 2.5, 0.5])),
    )
    return logits.to(dtype).to(DEVICE), topk, kwargs


# 60 random calls a run, in three parts that pytest-xdist can run side by side (each part draws its own calls)
@pytest.mark.parametrize("part", range(3))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=routing_calls())
def test_random_calls_match_float64(part, case):
    logits, topk, kwargs = case
    weights, ids = route_checked(logits, topk, **kwargs)[1:]
    ids = ids.long().cpu()
    experts = logits.shape[1]
    groups, kept = kwargs["num_expert_group"], kwargs["topk_group"]
    # every id is distinct, in range and in a group; weights finite and non-negative for a positive scale
    assert ((ids >= 0) & (ids < experts)).all()
    assert torch.isfinite(weights).all() and (weights >= 0).all()
    # at most `kept` distinct groups are used
    used_groups = [len(set((row // (experts // groups)).tolist())) for row in ids]
    assert max(used_groups) <= min(kept, groups)
    if kwargs["renormalize"]:
        torch.testing.assert_close(
            weights.sum(-1).cpu(), torch.full((logits.shape[0],), kwargs["routed_scaling_factor"]),
            rtol=0, atol=5e-6 * kwargs["routed_scaling_factor"])
