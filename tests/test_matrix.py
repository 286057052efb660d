"""The dtype x bias dtype x renormalise matrix over awkward (odd, prime, power-of-two) shapes."""

import pytest
import torch

from conftest import ON_GPU, TOKEN_SCALE, random_bias, random_logits, route_and_check

# (tokens, experts, topk); in the interpreter at most CPU_TOKENS rows a call: every row of these counts takes the
# same (latency) plan, and the subject here is each shape under every dtype, bias dtype and renormalisation
CPU_TOKENS = 13
SHAPES = [  # (tokens, experts, topk)
    (1, 2, 1), (3, 257, 8), (7, 131, 5), (13, 1021, 31), (5, 65, 3), (64, 64, 6), (128, 256, 8),
    (33, 384, 8), (17, 512, 9), (3, 1024, 16), (2, 1024, 32),
]
LOGIT_DTYPES = [torch.float32, torch.bfloat16, torch.float16]
BIAS_DTYPES = [torch.float32, torch.bfloat16]


def _rows(tokens: int) -> int:
    return tokens * TOKEN_SCALE if ON_GPU else min(tokens, CPU_TOKENS)


@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("bias_dtype", BIAS_DTYPES, ids=str)
@pytest.mark.parametrize("logit_dtype", LOGIT_DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_flat_matrix(shape, logit_dtype, bias_dtype, renormalize):
    tokens, experts, topk = shape
    logits = random_logits(_rows(tokens), experts, logit_dtype, seed=experts + tokens)
    bias = random_bias(experts, bias_dtype, seed=experts)
    route_and_check(logits, topk, correction_bias=bias, renormalize=renormalize)


@pytest.mark.parametrize("scoring_func", ["sigmoid", "softmax", "sqrtsoftplus"])
@pytest.mark.parametrize("shape", SHAPES[:6], ids=lambda s: "x".join(map(str, s)))
def test_without_bias(shape, scoring_func):
    tokens, experts, topk = shape
    logits = random_logits(_rows(tokens), experts, torch.bfloat16, seed=3 * experts)
    route_and_check(logits, topk, scoring_func=scoring_func)


def test_float64_bias_is_rounded_to_float32():
    """A float64 bias is used as float32 (semantics rule 1); the result equals the float32 bias's."""
    import moe_routing

    logits = random_logits(9, 64, torch.bfloat16, seed=5)
    bias64 = random_bias(64, torch.float64, seed=6)
    assert moe_routing.route(logits, 6, correction_bias=bias64)[1].equal(
        moe_routing.route(logits, 6, correction_bias=bias64.float())[1])
    route_and_check(logits, 6, correction_bias=bias64)
