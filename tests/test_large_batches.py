"""T up to 262144 (GPU): a strided subset judged against float64, and equal to routing those rows alone."""

import pytest
import torch

import moe_routing
from conftest import ON_GPU, assert_fully_written, poisoned_out, random_bias, random_logits
from moe_routing.verify import verify

CASES = [  # (experts, topk, groups, topk_group, scoring)
    (256, 8, 1, 1, "sigmoid"), (256, 8, 8, 4, "sigmoid"), (128, 8, 1, 1, "softmax"), (384, 8, 1, 1, "sigmoid"),
]


@pytest.mark.skipif(not ON_GPU, reason="262144 rows through the interpreter would take hours")
@pytest.mark.parametrize("experts,topk,groups,topk_group,scoring", CASES, ids=str)
def test_262144_tokens(experts, topk, groups, topk_group, scoring):
    tokens = 262144
    logits = random_logits(tokens, experts, torch.bfloat16, seed=experts)
    bias = random_bias(experts, seed=experts + 1) if scoring == "sigmoid" else None
    kwargs = dict(scoring_func=scoring, correction_bias=bias, num_expert_group=groups, topk_group=topk_group,
                  routed_scaling_factor=2.5)
    weights, ids = moe_routing.route(logits, topk, out=poisoned_out(tokens, topk), **kwargs)
    assert_fully_written(weights, ids)
    sample = torch.cat([torch.arange(0, tokens, 997, device=logits.device),
                        torch.arange(tokens - 64, tokens, device=logits.device)])
    verdict = verify(weights[sample], ids[sample], logits[sample], topk, **kwargs)
    assert verdict.ok, verdict
    alone = moe_routing.route(logits[sample].contiguous(), topk, **kwargs)
    assert torch.equal(alone[1], ids[sample]) and torch.equal(alone[0], weights[sample])
