"""DeepSeek-V4 routing: sqrt-softplus scores, hash layers, padded rows and int64 ids, against float64."""

import math
import weakref

import pytest
import torch

import moe_routing
from conftest import (DEVICE, TOKEN_SCALE, assert_plans_agree, poisoned_out, random_bias, random_logits,
                      route_and_check, route_every_plan, printed_without_interpreter)
from moe_routing import reference
from moe_routing.call import SQRTSOFTPLUS, check_call
from moe_routing.reference import evaluate, evaluate_hash
from moe_routing.verify import verify

NAN, INF = float("nan"), float("inf")
V4 = dict(scoring_func="sqrtsoftplus", routed_scaling_factor=1.5)


def sqrtsoftplus64(x: float) -> float:
    """sqrt(softplus(x)) in float64, written out: x above 20, else log1p(exp(x))."""
    return math.sqrt(x if x > 20 else math.log1p(math.exp(x)))


def test_reference_scores_are_the_written_out_formula():
    x = torch.tensor([[-100.0, -30.0, -17.5, -1.0, 0.0, 0.5413, 3.0, 19.9, 20.0, 20.1, 80.0, 1e30]])
    call = check_call(x, 1, "sqrtsoftplus", None, 1, 1, True, 1.0, None)
    assert call.scoring == SQRTSOFTPLUS
    scores = evaluate(x, None, call, dtype=torch.float64).scores[0].tolist()
    assert scores == pytest.approx([sqrtsoftplus64(v) for v in x[0].tolist()], rel=1e-12, abs=0)
    # float32: small scores keep their relative accuracy (log(1 + e) alone would give 0 below -17)
    scores32 = evaluate(x, None, call).scores[0].double()
    assert scores32[:3].tolist() == pytest.approx(scores[:3], rel=1e-6)


@pytest.mark.parametrize("experts", [256, 384])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_deepseek_v4_shapes_on_every_plan(experts, dtype):
    """Top-6 of 256 / 384 with a bias, scale 1.5: every plan the rules can choose, the same bits."""
    logits = random_logits(5 * TOKEN_SCALE, experts, dtype, seed=experts)
    bias = random_bias(experts, torch.float32, seed=2, scale=0.1)
    assert_plans_agree(route_every_plan(logits, 6, correction_bias=bias, **V4))
    route_and_check(logits, 6, correction_bias=bias, **V4)


def test_sqrt_window_keys_redo_the_rows_they_cannot_serve():
    """Sqrt-softplus window keys: a row whose experts all lie beyond the window (logits of 300: s = 17.3, every key on
    the ceiling), a row with three valid experts for a top-6, NaN rows and a non-finite bias entry all take exact
    keys; every plan gives the same bits and float64's answer."""
    logits = random_logits(8 * TOKEN_SCALE, 256, torch.float32, seed=21)
    logits[1] = 300.0 + torch.arange(256, device=DEVICE) * 1e-3
    logits[2, :253] = -INF
    logits[3] = NAN
    logits[4, ::7] = INF
    bias = random_bias(256, torch.float32, seed=22, scale=0.1)
    assert_plans_agree(route_every_plan(logits, 6, correction_bias=bias, **V4))
    weights, ids = moe_routing.route(logits, 6, correction_bias=bias, **V4)
    assert (ids[1] >= 0).all() and torch.isfinite(weights).all()
    assert sorted(ids[2, :3].cpu().tolist()) == [253, 254, 255] and ids[2, 3:].cpu().tolist() == [0, 1, 2]
    bias[17] = INF
    assert_plans_agree(route_every_plan(logits, 6, correction_bias=bias, **V4))


@pytest.mark.parametrize("experts", [256, 384])
def test_sqrt_window_keys_certify_or_rank_exactly(experts):
    """Where the window keys cannot tell the order (choice values a few 1e-6 apart, closer than the keys' error
    allows), the tail ranks the listed experts by exact keys, or the row is redone: ids must equal float64's, whose
    margins (2e-6) are above the near-tie margin, on every plan. Row 0: seven experts 2e-6 apart above the rest
    (ranked from the list); row 1: nine of them (more than the list holds: redone); row 2: eight exactly tied
    (redone, index order); row 3: three exactly tied below four near-tied ones (ranked from the list, ties to the
    lower index); row 4: seven 1.3e-6 apart at s = 7.75, where the keys' own error is largest; rows 5-12: two experts
    5e-7 apart, the higher index above, often within one key step: the exact float32 order (the reference's), which
    the keys alone would give in index order. The logits are 9 and 60
    there, above every random one."""
    logits = random_logits(14 * TOKEN_SCALE, experts, torch.float32, seed=experts + 5)
    bias = torch.zeros(experts, device=DEVICE)
    step = 1e-5  # in the logit near x = 9: ds/dx = 0.17, so c steps of 1.7e-6
    logits[0, 40:47] = 9.0 + step * torch.arange(7, device=DEVICE)
    logits[1, 100:109] = 9.0 + step * torch.arange(9, device=DEVICE).flip(0)
    logits[2, 3:200:25] = 9.0
    logits[3, 7] = logits[3, 9] = 9.0
    logits[3, 20:25] = 9.0 + step * torch.arange(5, device=DEVICE)
    logits[4, 60:67] = 60.0 + 2e-5 * torch.arange(7, device=DEVICE)  # s = 7.75 (the keys' largest errors): c 1.3e-6 apart
    for row in range(5, 13):  # an expert 3 float32 steps above its lower neighbour: c 5e-7 apart, often one key step
        logits[row, 20 + row] = 9.0 + 1e-3 * row
        above = logits[row, 20 + row].clone()
        for _ in range(3):
            above = torch.nextafter(above, torch.tensor(INF, device=DEVICE))
        logits[row, 21 + row] = above
    results = route_every_plan(logits, 6, correction_bias=bias, **V4)
    assert_plans_agree(results)
    _, _, ids = next(iter(results.values()))
    assert ids[0].cpu().tolist() == [46, 45, 44, 43, 42, 41]
    assert ids[1].cpu().tolist() == [100, 101, 102, 103, 104, 105]
    assert ids[2].cpu().tolist() == [3, 28, 53, 78, 103, 128]
    assert ids[3].cpu().tolist() == [24, 23, 22, 21, 7, 9]
    assert ids[4].cpu().tolist() == [66, 65, 64, 63, 62, 61]
    # the exact float32 order of c (the reference's), not the keys' index order within a step
    _, expected = reference.route(logits[5:13].cpu(), 6, correction_bias=bias.cpu(), **V4)
    assert torch.equal(ids[5:13].cpu(), expected.to(ids.dtype))
    assert (expected[:, 0] == torch.arange(26, 34)).sum() >= 4  # the higher index first on most of these rows
    route_and_check(logits, 6, correction_bias=bias, **V4)


def one_close_pair_rows(experts, swapped_first):
    """Rows whose top eight experts lie 8e-3 apart in c but for one adjacent pair 3 float32 steps apart in the
    logit near 9 (c 5e-7 apart: within a key step or two), the pair at place j = row % 6 of the top six (place 5:
    the pair decides which of the 6th and 7th is chosen); ``swapped_first``: the higher index of the pair has the
    larger logit (the keys' index order within a step is then the wrong one). A constant bias of 0.01."""
    logits = random_logits(14 * TOKEN_SCALE, experts, torch.float32, seed=experts + 9)
    for row in range(12):
        place = row % 6
        for p in range(8):
            logits[row, 10 + 30 * p] = 9.0 - 0.05 * p
        pair = 11 + 30 * place  # beside the place's own expert: 10 + 30 * place and this one
        low, high = (pair - 1, pair) if swapped_first else (pair, pair - 1)
        value = logits[row, 10 + 30 * place].clone()
        logits[row, low] = value
        for _ in range(3):
            value = torch.nextafter(value, torch.tensor(INF, device=DEVICE))
        logits[row, high] = value
    return logits


@pytest.mark.parametrize("swapped_first", [True, False], ids=["higher-index-first", "lower-index-first"])
@pytest.mark.parametrize("experts", [256, 384])
def test_sqrt_window_keys_settle_one_close_pair_by_its_exact_order(experts, swapped_first):
    """One close pair at each of the top six places (``one_close_pair_rows``): the ids are the reference's exact
    float32 order on every plan (the pair in the order of its exact c, the pair at the 6th place decides between
    the 6th and 7th experts), and the other experts keep theirs. Rows 12 and 13: the 6th, 7th and 8th experts 12
    float32 steps of the logit apart (c 2e-6 apart: two adjacent pairs the keys' gaps cannot order, which one pair's
    exact order cannot settle, left to the exact ranking; far enough apart that the GPU's float32 c, formed from the
    hardware's approximations, orders them as the reference's does, where one step apart it may not)."""
    logits = one_close_pair_rows(experts, swapped_first)
    for row, order in ((12, [1, 2, 3]), (13, [3, 2, 1])):
        logits[row, 10:160:30] = 9.0 - 0.05 * torch.arange(5, device=DEVICE)
        logits[row, 160:163] = 8.75
        for expert, steps in zip(range(160, 163), order):
            for _ in range(12 * steps):
                logits[row, expert] = torch.nextafter(logits[row, expert], torch.tensor(INF, device=DEVICE))
    bias = torch.full((experts,), 0.01, device=DEVICE)
    results = route_every_plan(logits, 6, correction_bias=bias, **V4)
    assert_plans_agree(results)
    _, _, ids = next(iter(results.values()))
    _, expected = reference.route(logits[:14].cpu(), 6, correction_bias=bias.cpu(), **V4)
    assert torch.equal(ids[:14].cpu(), expected.to(ids.dtype))
    assert ids[12, 5].item() == 162 and ids[13, 5].item() == 160
    for row in range(12):
        place = row % 6
        first = 11 + 30 * place if swapped_first else 10 + 30 * place
        assert ids[row, place].item() == first, row
    route_and_check(logits, 6, correction_bias=bias, **V4)


def test_sqrt_window_keys_of_inaccurate_scores_are_not_trusted():
    """Keys of logits below -3 carry the score's absolute error (1 + e loses e's bits): at x = -16 and -16.5 the keys'
    scores are alike (3.45e-4) where the scores are 3.35e-4 and 2.61e-4. Row 0 alternates the two along a bias
    ladder of 5e-5 steps: its keys' order is wrong by 2.4e-5 per pair, far above the near-tie margin, with the keys
    50 steps apart. A bias of 2 on expert 100 puts every row's other picks among such experts, and the certificate
    must refuse their keys (ranked exactly instead); the other rows are random logits of -14 to -27 with a small
    random bias. Every plan must give float64's picks. Six rows: a full program and a partial one on the four-row
    tiles, a partial one on the larger tiles."""
    experts = 256
    gen = torch.Generator().manual_seed(3)
    rows = 6 * TOKEN_SCALE
    grid = torch.stack([torch.randperm(experts, generator=gen) for _ in range(rows)]).float()
    logits = -14.0 - 0.05 * grid - 0.05 * torch.rand(rows, 1, generator=gen)
    bias = torch.randn(experts, generator=gen) * 3e-5
    ladder = torch.arange(10, 17)
    logits[0] = -30.0
    logits[0, ladder] = torch.tensor([-16.5, -16.0] * 3 + [-16.5])
    bias[ladder] = 5e-5 * (6 - torch.arange(7)).float()
    bias[100] = 2.0
    logits, bias = logits.to(DEVICE), bias.to(DEVICE)
    results = route_every_plan(logits, 6, correction_bias=bias, **V4)
    assert_plans_agree(results)
    _, _, ids = next(iter(results.values()))
    assert ids[0].cpu().tolist() == [100, 11, 10, 13, 12, 15]
    route_and_check(logits, 6, correction_bias=bias, **V4)


@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(1, 2, 1), (7, 131, 5), (3, 257, 8), (3, 1021, 31), (2, 1024, 32)],
                         ids=lambda s: "x".join(map(str, s)))
def test_sqrtsoftplus_matrix(shape, dtype, renormalize):
    """Odd and prime shapes through route(), with and without a bias. At these token counts route() takes the
    latency class's plan, one program a row: a few rows of a shape run the same code as many (the interpreter's
    time grows with the rows)."""
    tokens, experts, topk = shape
    logits = random_logits(tokens * TOKEN_SCALE, experts, dtype, seed=experts + 1)
    bias = random_bias(experts, torch.bfloat16, seed=experts, scale=0.3)
    route_and_check(logits, topk, scoring_func="sqrtsoftplus", correction_bias=bias, renormalize=renormalize)
    route_and_check(logits, topk, scoring_func="sqrtsoftplus", renormalize=renormalize)


@pytest.mark.parametrize("groups,kept", [(8, 4), (4, 1), (8, 8)])
def test_grouped_sqrtsoftplus(groups, kept):
    """Grouped sqrt-softplus on every plan; 8 groups keeping all 8 are flat rows (the bitonic plans, whose top-8
    fills the list). Five rows: a full program and a partial one on the four-row tiles, a partial one on the
    larger tiles."""
    logits = random_logits(5 * TOKEN_SCALE, 256, torch.bfloat16, seed=groups)
    bias = random_bias(256, torch.float32, seed=groups, scale=0.2)
    route_every_plan(logits, 8, correction_bias=bias, num_expert_group=groups, topk_group=kept, **V4)
    route_and_check(logits, 8, correction_bias=bias, num_expert_group=groups, topk_group=kept, **V4)


def test_large_logits_take_the_threshold_and_unrenormalised_weights_grow_as_sqrt():
    logits = torch.tensor([[25.0, 400.0, -3.0, 1e4, 0.0, 19.0, 21.0, 2.0]], device=DEVICE)
    weights, ids = moe_routing.route(logits, 3, scoring_func="sqrtsoftplus", renormalize=False)
    assert ids.cpu().tolist() == [[3, 1, 0]]
    torch.testing.assert_close(weights.cpu(), torch.tensor([[100.0, 20.0, 5.0]]), rtol=1e-6, atol=0)
    route_and_check(logits, 3, scoring_func="sqrtsoftplus", renormalize=False)


@pytest.mark.parametrize("bad", [NAN, INF, -INF], ids=["nan", "+inf", "-inf"])
def test_non_finite_logits_are_invalid(bad):
    logits = random_logits(4, 64, torch.float32, seed=9)
    logits[:, 5] = bad
    logits[2, :62] = bad  # two valid experts for a top-6: four invalid ones after them, in index order
    bias = random_bias(64, torch.float32, seed=3, scale=0.1)
    weights, ids = moe_routing.route(logits, 6, correction_bias=bias, **V4)
    weights, ids = weights.cpu(), ids.cpu()
    assert 5 not in ids[0].tolist()
    assert sorted(ids[2, :2].tolist()) == [62, 63] and ids[2, 2:].tolist() == [0, 1, 2, 3]
    assert weights[2, 2:].tolist() == [0.0] * 4 and torch.isfinite(weights).all()
    route_and_check(logits, 6, correction_bias=bias, **V4)


def test_ties_go_to_the_lower_index():
    logits = torch.full((3, 96), 0.75, device=DEVICE)
    logits[1, 40:50] = 2.0  # ten equal best experts: the first six of them
    weights, ids = moe_routing.route(logits, 6, correction_bias=torch.zeros(96, device=DEVICE), **V4)
    assert ids.cpu().tolist() == [list(range(6)), list(range(40, 46)), list(range(6))]
    torch.testing.assert_close(weights.cpu(), torch.full((3, 6), 1.5 / 6), rtol=0, atol=1e-6)


# ---- padding and int64 ids ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("call", [dict(scoring_func="sigmoid", num_expert_group=8, topk_group=4),
                                  dict(scoring_func="softmax"), dict(scoring_func="sqrtsoftplus")], ids=str)
@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64], ids=str)
def test_padded_rows_get_minus_one_and_zero_weights(call, ids_dtype):
    tokens = 11 * TOKEN_SCALE
    logits = random_logits(tokens, 256, torch.bfloat16, seed=4)
    bias = None if call["scoring_func"] == "softmax" else random_bias(256, seed=5, scale=0.1)
    is_padding = torch.arange(tokens, device=DEVICE) % 4 == 1
    out = poisoned_out(tokens, 8)
    out = (out[0], out[1].to(ids_dtype))
    weights, ids = moe_routing.route(logits, 8, correction_bias=bias, is_padding=is_padding, ids_dtype=ids_dtype,
                                     out=out, **call)
    assert weights is out[0] and ids is out[1] and ids.dtype == ids_dtype
    assert (ids[is_padding] == -1).all() and (weights[is_padding] == 0).all()
    unpadded = moe_routing.route(logits, 8, correction_bias=bias, **call)
    assert torch.equal(ids[~is_padding].int(), unpadded[1][~is_padding])
    assert torch.equal(weights[~is_padding], unpadded[0][~is_padding])
    expected = reference.route(logits.cpu(), 8, correction_bias=None if bias is None else bias.cpu(),
                               is_padding=is_padding.cpu(), ids_dtype=ids_dtype, **call)
    assert torch.equal(ids.cpu(), expected[1])
    verdict = verify(weights, ids, logits, 8, correction_bias=bias, is_padding=is_padding, **call)
    assert verdict.ok, verdict


def test_a_non_contiguous_padding_mask():
    logits = random_logits(8, 64, seed=6)
    mask = torch.zeros(8, 2, dtype=torch.bool, device=DEVICE)
    mask[3, 0] = True
    weights, ids = moe_routing.route(logits, 4, is_padding=mask[:, 0], scoring_func="sqrtsoftplus")
    assert ids[3].tolist() == [-1] * 4 and (ids[torch.arange(8) != 3] >= 0).all()


# ---- hash routing --------------------------------------------------------------------------------------------------

def hash_table(vocabulary, experts, topk, seed=0, repeats=False):
    gen = torch.Generator().manual_seed(seed)
    if repeats:
        return torch.randint(0, experts, (vocabulary, topk), generator=gen)
    return torch.stack([torch.randperm(experts, generator=gen)[:topk] for _ in range(vocabulary)])


@pytest.mark.parametrize("scoring_func", ["sqrtsoftplus", "sigmoid"])
@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("table_dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_hash_routing_weights_the_tables_experts(scoring_func, renormalize, table_dtype, dtype):
    tokens, experts, vocabulary = 13 * TOKEN_SCALE, 256, 97
    logits = random_logits(tokens, experts, dtype, seed=7)
    table = hash_table(vocabulary, experts, 6).to(table_dtype).to(DEVICE)
    input_ids = torch.randint(0, vocabulary, (tokens,), generator=torch.Generator().manual_seed(8)).to(DEVICE)
    weights, ids = moe_routing.route_hash(logits, input_ids, table, scoring_func=scoring_func,
                                          renormalize=renormalize, routed_scaling_factor=1.5)
    assert torch.equal(ids.long().cpu(), table.long().cpu()[input_ids.cpu()])  # in the table's order
    call = check_call(logits.cpu(), 6, scoring_func, None, 1, 1, renormalize, 1.5, None)
    expected, _, _ = evaluate_hash(logits.cpu(), input_ids.cpu(), table.cpu(), call, dtype=torch.float64)
    torch.testing.assert_close(weights.cpu().double(), expected, rtol=0, atol=2e-6 * 1.5 * (1 if renormalize else 4))
    ref = reference.route_hash(logits.cpu(), input_ids.cpu(), table.cpu(), scoring_func=scoring_func,
                               renormalize=renormalize, routed_scaling_factor=1.5)
    assert torch.equal(ref[1], ids.cpu())


def test_hash_tables_with_repeated_experts_weigh_each_slot():
    """Defined, not rejected: a repeated expert fills each of its slots with its score (the sum counts it twice),
    as DeepSeek-V4's hash router and vLLM's op compute it."""
    logits = random_logits(5, 16, seed=9)
    table = torch.tensor([[3, 3, 7, 1], [0, 1, 2, 3]], device=DEVICE)
    input_ids = torch.tensor([0, 1, 0, 0, 1], device=DEVICE)
    weights, ids = moe_routing.route_hash(logits, input_ids, table)
    assert ids[0].tolist() == [3, 3, 7, 1] and weights[0, 0] == weights[0, 1]
    scores = torch.sqrt(torch.nn.functional.softplus(logits[0, [3, 3, 7, 1]].cpu().double()))
    torch.testing.assert_close(weights[0].cpu().double(), scores / scores.sum(), rtol=0, atol=2e-6)


def test_hash_routing_padding_unknown_tokens_and_invalid_logits():
    logits = random_logits(6, 32, seed=10)
    logits[4, 5] = NAN
    table = torch.tensor([[5, 6], [7, 8], [1, 2]], device=DEVICE)
    input_ids = torch.tensor([0, 1, 2, 3, 0, -1], device=DEVICE)  # 3 and -1: outside the table
    is_padding = torch.tensor([False, True, False, False, False, False], device=DEVICE)
    out = poisoned_out(6, 2)
    weights, ids = moe_routing.route_hash(logits, input_ids, table, is_padding=is_padding, out=out)
    assert ids.cpu().tolist() == [[5, 6], [-1, -1], [1, 2], [-1, -1], [5, 6], [-1, -1]]
    assert weights[1].tolist() == [0, 0] and weights[3].tolist() == [0, 0] and weights[5].tolist() == [0, 0]
    assert weights[4].tolist() == [0, pytest.approx(1.0)]  # the NaN logit's expert weighs 0
    expected = reference.route_hash(logits.cpu(), input_ids.cpu(), table.cpu(), is_padding=is_padding.cpu())
    assert torch.equal(expected[1], ids.cpu())
    torch.testing.assert_close(expected[0], weights.cpu(), rtol=0, atol=1e-6)


HASH_ERRORS = [
    ("table id above the experts", dict(tid2eid=torch.tensor([[0, 16]])), ValueError, "tid2eid"),
    ("table id negative", dict(tid2eid=torch.tensor([[-1, 3]])), ValueError, "tid2eid"),
    ("table float", dict(tid2eid=torch.zeros(2, 2)), TypeError, "tid2eid"),
    ("table 1-D", dict(tid2eid=torch.zeros(4, dtype=torch.long)), ValueError, "tid2eid"),
    ("table wider than the experts", dict(tid2eid=torch.zeros(2, 17, dtype=torch.long)), ValueError, "tid2eid"),
    ("input ids float", dict(input_ids=torch.zeros(4)), TypeError, "input_ids"),
    ("input ids short", dict(input_ids=torch.zeros(3, dtype=torch.long)), ValueError, "input_ids"),
    ("input ids 2-D", dict(input_ids=torch.zeros(4, 1, dtype=torch.long)), ValueError, "input_ids"),
    ("softmax scoring", dict(scoring_func="softmax"), ValueError, "scoring_func"),
    ("padding int", dict(is_padding=torch.zeros(4, dtype=torch.int32)), TypeError, "is_padding"),
    ("padding short", dict(is_padding=torch.zeros(3, dtype=torch.bool)), ValueError, "is_padding"),
    ("ids unsigned with padding", dict(is_padding=torch.zeros(4, dtype=torch.bool), ids_dtype=torch.uint32),
     TypeError, "ids_dtype"),
    ("ids float", dict(ids_dtype=torch.float32), TypeError, "ids_dtype"),
]


@pytest.mark.parametrize("entry", [moe_routing.route_hash, reference.route_hash], ids=["op", "reference"])
@pytest.mark.parametrize("description,change,error,argument", HASH_ERRORS, ids=[e[0] for e in HASH_ERRORS])
def test_bad_hash_calls_raise_naming_the_argument(entry, description, change, error, argument):
    call = dict(gating_output=torch.randn(4, 16), input_ids=torch.zeros(4, dtype=torch.long),
                tid2eid=torch.zeros(3, 2, dtype=torch.long))
    call.update({k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in change.items()})
    call = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in call.items()}
    args = (call.pop("gating_output"), call.pop("input_ids"), call.pop("tid2eid"))
    with pytest.raises(error, match=argument):
        entry(*args, **call)


PADDING_ERRORS = [
    ("padding int", dict(is_padding=torch.zeros(4, dtype=torch.uint8)), TypeError, "is_padding"),
    ("padding long", dict(is_padding=torch.zeros(5, dtype=torch.bool)), ValueError, "is_padding"),
    ("padding 2-D", dict(is_padding=torch.zeros(4, 1, dtype=torch.bool)), ValueError, "is_padding"),
    ("padding a list", dict(is_padding=[False] * 4), TypeError, "is_padding"),
    ("ids unsigned with padding", dict(is_padding=torch.zeros(4, dtype=torch.bool), ids_dtype=torch.uint8),
     TypeError, "ids_dtype"),
    ("ids int16", dict(ids_dtype=torch.int16), TypeError, "ids_dtype"),
    ("out ids not the ids dtype", dict(ids_dtype=torch.int64, out=(torch.empty(4, 2), torch.empty(4, 2, dtype=torch.int32))),
     TypeError, "ids"),
]


@pytest.mark.parametrize("entry", [moe_routing.route, reference.route], ids=["op", "reference"])
@pytest.mark.parametrize("description,kwargs,error,argument", PADDING_ERRORS, ids=[e[0] for e in PADDING_ERRORS])
def test_bad_padding_and_ids_calls_raise_naming_the_argument(entry, description, kwargs, error, argument):
    kwargs = {k: (v.to(DEVICE) if isinstance(v, torch.Tensor) else
                  tuple(t.to(DEVICE) for t in v) if isinstance(v, tuple) else v) for k, v in kwargs.items()}
    with pytest.raises(error, match=argument):
        entry(torch.randn(4, 16, device=DEVICE), 2, **kwargs)


def test_the_padding_mask_must_be_on_the_logits_device():
    with pytest.raises(ValueError, match="is_padding"):
        moe_routing.route(torch.randn(4, 16), 2, is_padding=torch.zeros(4, dtype=torch.bool, device="meta"))


def test_a_table_is_checked_again_after_an_in_place_change():
    logits = torch.randn(2, 8, device=DEVICE)
    table = torch.tensor([[1, 2]], device=DEVICE)
    input_ids = torch.zeros(2, dtype=torch.long, device=DEVICE)
    moe_routing.route_hash(logits, input_ids, table)
    table[0, 1] = 8
    with pytest.raises(ValueError, match="tid2eid"):
        moe_routing.route_hash(logits, input_ids, table)


def test_a_new_table_in_a_freed_tables_memory_is_checked():
    """The checked-table cache is keyed by storage address: a table created where a checked, freed one lived (same
    address, shape and version) is checked afresh, while a view of a live checked table taken anew is not."""
    from moe_routing import call

    logits = torch.randn(2, 8, device=DEVICE)
    input_ids = torch.zeros(2, dtype=torch.long, device=DEVICE)
    stacked = torch.tensor([[[1, 2]], [[3, 4]]], device=DEVICE)
    moe_routing.route_hash(logits, input_ids, stacked[1])
    assert sum(ref() is stacked for ref in call._checked_tables.values()) == 1
    reads = []
    real = torch.aminmax
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch, "aminmax", lambda t: reads.append(1) or real(t))
        moe_routing.route_hash(logits, input_ids, stacked[1])  # a new view of the same live storage: no read back
        assert reads == []
        bad = torch.tensor([[1, 9]], device=DEVICE)
        key = (bad.untyped_storage().data_ptr(), bad.storage_offset(), tuple(bad.shape), bad.stride(), bad._version,
               str(bad.device), 8)
        freed = torch.tensor([[1, 2]], device=DEVICE)
        call._checked_tables[key] = weakref.ref(freed)  # as left by a checked table that lived at this address
        del freed  # (its reference is now dead)
        with pytest.raises(ValueError, match="tid2eid holds expert ids in \\[1, 9\\]"):
            moe_routing.route_hash(logits, input_ids, bad)
        assert reads == [1]


def test_sqrtsoftplus_plans_whose_top_k_fills_the_list_compile_for_nvidia(tmp_path):
    """K equal to the list length (8 of 256 on the streaming tiles, 32 of 1024) takes exact keys, but Triton compiles
    the window-key branch such rows never enter all the same: it must compile for sm_90 (the window certificate reads
    a pick past the K-th, which such lists do not hold). A real compile on this machine, in a process without
    Triton's interpreter (which does not reach that branch)."""
    program = (
        "import torch\n"
        "from moe_routing.call import check_call\n"
        "from moe_routing.kernels.launch import triton_arguments\n"
        "from moe_routing.kernels.rules import choose_plan, token_class, tensor_traits\n"
        "from moe_routing.kernels.targets import TARGETS, compile_plan\n"
        "for experts, topk, tokens in ((256, 8, 2048), (1024, 32, 1)):\n"
        "    logits, bias = torch.zeros(tokens, experts), torch.zeros(experts)\n"
        "    weights, ids = torch.empty(tokens, topk), torch.empty(tokens, topk, dtype=torch.int32)\n"
        "    call = check_call(logits, topk, 'sqrtsoftplus', bias, 1, 1, True, 1.5, None)\n"
        "    plan = choose_plan(call, token_class(tokens), **tensor_traits(logits, bias), rocm=False)\n"
        "    assert not plan.constexprs['ROUNDS'] and plan.constexprs['CHUNK'] == topk, plan\n"
        "    args, kwargs = triton_arguments(plan, call, logits, bias, weights, ids)\n"
        "    compile_plan(plan.kernel, TARGETS['sm_90'], args, kwargs)\n"
        "print('compiled')\n")
    assert printed_without_interpreter(program, tmp_path) == ["compiled"]
