"""The reference against a literal, loop-by-loop reading of docs/semantics.md in plain Python floats.

The reference is the definition of correct for the kernels; this checks the definition itself with an
independent implementation that follows the written rules one by one (float64 throughout).
"""

import math
import random

import pytest
import torch

import moe_routing
from conftest import DEVICE
from moe_routing.call import check_call
from moe_routing.reference import evaluate


def literal_semantics(row, bias, topk, scoring, groups, topk_group, renormalize, scale):
    """Route one row (a list of floats) exactly as the numbered rules say."""
    experts = len(row)
    valid = [math.isfinite(x) and (bias is None or math.isfinite(bias[e])) for e, x in enumerate(row)]
    # rule 1: scores and choice values
    if scoring == "sigmoid":
        s = [1 / (1 + math.exp(-x)) if valid[e] else 0.0 for e, x in enumerate(row)]
    else:
        finite = [x for e, x in enumerate(row) if valid[e]]
        m = max(finite) if finite else 0.0
        total = sum(math.exp(x - m) for x in finite)
        s = [math.exp(x - m) / total if valid[e] else 0.0 for e, x in enumerate(row)]
    c = [s[e] + (bias[e] if bias is not None else 0.0) for e in range(experts)]
    # rule 2: groups
    size = experts // groups
    allowed = [True] * experts
    if topk_group < groups:
        scores = []
        for g in range(groups):
            members = sorted((c[e] for e in range(g * size, (g + 1) * size) if valid[e]), reverse=True)
            if not members:
                scores.append(-math.inf)
            elif bias is None:
                scores.append(members[0])
            else:
                scores.append(sum(members[:2]))
        ranked = sorted(range(groups), key=lambda g: (-scores[g], g))
        kept = set(ranked[:topk_group])
        allowed = [e // size in kept for e in range(experts)]
    # rules 3 and 5: valid experts by descending c then index, then invalid ones by index
    candidates = [e for e in range(experts) if allowed[e]]
    order = sorted((e for e in candidates if valid[e]), key=lambda e: (-c[e], e))
    order += [e for e in candidates if not valid[e]]
    ids = order[:topk]
    # rule 4
    w = [s[e] for e in ids]
    if renormalize:
        total = sum(w)
        w = [x / total for x in w] if total > 0 else [1 / topk] * topk
    return [x * scale for x in w], ids


def random_case(rng):
    experts = rng.choice([1, 2, 5, 12, 16, 30, 64])
    groups = rng.choice([g for g in (1, 2, 3, 4, 8) if experts % g == 0])
    topk_group = rng.randint(1, groups)
    topk = rng.randint(1, topk_group * (experts // groups) if topk_group < groups else experts)
    palette = [0.0, 0.5, -1.0, 2.0]  # repeated values make exact ties
    row = [rng.choice(palette) if rng.random() < 0.3 else rng.gauss(0, 2) for _ in range(experts)]
    for e in range(experts):
        if rng.random() < 0.1:
            row[e] = rng.choice([math.nan, math.inf, -math.inf])
    bias = [rng.gauss(0, 0.5) for _ in range(experts)] if rng.random() < 0.6 else None
    if bias is not None and rng.random() < 0.2:
        bias[rng.randrange(experts)] = math.nan
    return row, bias, topk, rng.choice(["sigmoid", "softmax"]), groups, topk_group, rng.random() < 0.7, \
        rng.choice([1.0, 2.5])


@pytest.mark.parametrize("seed", range(300))
def test_reference_follows_the_written_rules(seed):
    row, bias, topk, scoring, groups, topk_group, renormalize, scale = random_case(random.Random(seed))
    logits = torch.tensor([row], dtype=torch.float32)
    bias_t = torch.tensor(bias, dtype=torch.float32) if bias is not None else None
    # the literal reading works on the float32 values the reference sees
    row32 = logits[0].double().tolist()
    bias32 = bias_t.double().tolist() if bias_t is not None else None
    expected_w, expected_ids = literal_semantics(row32, bias32, topk, scoring, groups, topk_group, renormalize, scale)
    call = check_call(logits, topk, scoring, bias_t, groups, topk_group, renormalize, scale, None)
    got = evaluate(logits, bias_t, call, dtype=torch.float64)
    assert got.ids[0].tolist() == expected_ids
    assert got.weights[0].tolist() == pytest.approx(expected_w, abs=1e-12)
    # the float32 reference agrees on the ids wherever the row is not a float32 near tie
    w32, ids32 = moe_routing.reference.route(logits, topk, scoring_func=scoring, correction_bias=bias_t,
                                             num_expert_group=groups, topk_group=topk_group,
                                             renormalize=renormalize, routed_scaling_factor=scale)
    assert w32.dtype == torch.float32 and ids32.dtype == torch.int32
    assert w32[0].tolist() == pytest.approx(expected_w, abs=2e-6 * scale) or ids32[0].tolist() != expected_ids


def test_deepseek_v3_example_by_hand():
    """8 experts, 4 groups of 2, keep 2, top-3, bias, renormalise, scale 2.5: computed on paper."""
    logits = torch.tensor([[0.0, 1.0, -1.0, 2.0, 3.0, -2.0, 0.5, 0.5]])
    bias = torch.tensor([0.1, 0.0, 0.0, 0.0, -0.5, 0.0, 0.2, 0.2])
    s = torch.sigmoid(logits[0].double())
    c = s + bias.double()
    # group scores: sum of both members (groups of two)
    scores = [c[0] + c[1], c[2] + c[3], c[4] + c[5], c[6] + c[7]]
    # 1.331, 1.150, 0.572, 1.644: groups 3 and 0 kept
    assert sorted(range(4), key=lambda g: -scores[g])[:2] == [3, 0]
    # allowed experts 0, 1, 6, 7 with c = 0.600, 0.731, 0.822, 0.822: top-3 = 6, 7 (tie: 6 first), 1
    weights, ids = moe_routing.reference.route(logits, 3, correction_bias=bias, num_expert_group=4, topk_group=2,
                                               routed_scaling_factor=2.5)
    assert ids.tolist() == [[6, 7, 1]]
    chosen = s[[6, 7, 1]]
    torch.testing.assert_close(weights[0].double(), chosen / chosen.sum() * 2.5, rtol=0, atol=1e-6)
    assert moe_routing.route(logits.to(DEVICE), 3, correction_bias=bias.to(DEVICE), num_expert_group=4,
                             topk_group=2, routed_scaling_factor=2.5)[1].cpu().tolist() == [[6, 7, 1]]
