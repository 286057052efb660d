"""Batch invariance: a row's result depends only on that row, not on T or on its neighbours."""

import pytest
import torch

import moe_routing
from conftest import DEVICE, ON_GPU, random_bias, random_logits

CASES = [  # (experts, topk, groups, topk_group, scoring)
    (256, 8, 8, 4, "sigmoid"), (384, 8, 1, 1, "sigmoid"), (64, 6, 1, 1, "softmax"), (160, 6, 8, 3, "softmax"),
]
# On the GPU the batches cross token classes (the rule picks another plan at 257, 4096, 16384 tokens); in the
# interpreter they stay in the latency class, whose plans take one row a program on these shapes (T changes only
# the grid and the mask of the rows past T), and every class's plan runs on these shapes in
# test_plans.test_every_plan_matches_float64, which asserts that all of them give the same bits.
BATCHES = [1, 2, 3, 7, 64, 300, 4096, 20000] if ON_GPU else [1, 2, 3, 7]


@pytest.mark.parametrize("experts,topk,groups,topk_group,scoring", CASES, ids=str)
def test_rows_do_not_depend_on_batch(experts, topk, groups, topk_group, scoring):
    biggest = max(BATCHES)
    logits = random_logits(biggest, experts, torch.bfloat16, seed=experts)
    bias = random_bias(experts, seed=experts + 1)
    kwargs = dict(scoring_func=scoring, correction_bias=bias, num_expert_group=groups, topk_group=topk_group)
    full_w, full_i = moe_routing.route(logits, topk, **kwargs)
    for tokens in BATCHES[:-1]:  # (the last is the whole batch: full_w, full_i)
        w, i = moe_routing.route(logits[:tokens], topk, **kwargs)
        assert torch.equal(i, full_i[:tokens]) and torch.equal(w, full_w[:tokens]), tokens
    # the last rows of the batch, routed alone and shifted to a different position in another batch
    tail = logits[-3:]
    w, i = moe_routing.route(torch.cat([tail.flip(0), logits[:5]]), topk, **kwargs)
    assert torch.equal(i[:3].flip(0), full_i[-3:]) and torch.equal(w[:3].flip(0), full_w[-3:])


def test_strided_rows_equal_contiguous_rows():
    base = random_logits(12, 300, torch.float32, seed=3)
    view = base[::2, 10:266]  # row stride 600, offset start
    contiguous = view.contiguous()
    assert torch.equal(moe_routing.route(view, 8)[1], moe_routing.route(contiguous, 8)[1])
    transposed = contiguous.t().contiguous().t()  # column stride != 1: copied internally
    assert torch.equal(moe_routing.route(transposed, 8)[1], moe_routing.route(contiguous, 8)[1])


def test_out_buffers_may_be_strided_views():
    logits = random_logits(9, 64, torch.bfloat16, seed=4)
    weights_store = torch.full((9, 20), -1.0, device=DEVICE)
    ids_store = torch.full((9, 20), -1, dtype=torch.int32, device=DEVICE)
    out = (weights_store[:, 3:9], ids_store[:, 10:16])
    weights, ids = moe_routing.route(logits, 6, out=out)
    expected = moe_routing.route(logits, 6)
    assert torch.equal(weights, expected[0]) and torch.equal(ids, expected[1])
    assert (weights_store[:, :3] == -1).all() and (weights_store[:, 9:] == -1).all()
    assert (ids_store[:, :10] == -1).all() and (ids_store[:, 16:] == -1).all()
