"""Every plan (kernel and tile) the rules can choose, on every shape class, judged against float64.

CI's interpreter runs small token counts, so the rule would pick only the latency plans there: these
tests force the plan of every token class onto small batches.
"""

import pytest
import torch

from conftest import (DEVICE, ON_GPU, assert_fully_written, assert_plans_agree, poisoned_out, random_bias,
                      random_logits, route_every_plan)
from moe_routing import reference
from moe_routing.call import check_call
from moe_routing.kernels import all_plans, token_class
from moe_routing.kernels.rules import TOKEN_CLASS_STARTS

SHAPES = [  # (experts, topk, groups, topk_group, scoring, bias)
    (256, 8, 1, 1, "sigmoid", True), (384, 8, 1, 1, "sigmoid", True), (64, 6, 1, 1, "sigmoid", True),
    (131, 5, 1, 1, "sigmoid", False), (32, 16, 1, 1, "sigmoid", True), (200, 9, 1, 1, "sigmoid", True),
    (256, 8, 8, 4, "sigmoid", True), (128, 8, 1, 1, "softmax", False), (1021, 31, 1, 1, "sigmoid", True),
    # grouped: DeepSeek-V3 without bias; groups of 20 (a lane's step straddles groups); 64 groups of 8;
    # more than 512 experts (exact keys); grouped softmax (rounds); short grouped rows (no run filter)
    (256, 8, 8, 4, "sigmoid", False), (160, 6, 8, 3, "sigmoid", True), (512, 8, 64, 8, "sigmoid", True),
    (1024, 8, 16, 4, "sigmoid", True), (160, 6, 8, 3, "softmax", False), (96, 6, 4, 2, "sigmoid", True),
    # lists of 32 keys (K > 16): window keys, grouped, softmax; sigmoid without bias (exact keys
    # of the logit beyond 512 experts; window keys up to 512)
    (256, 32, 1, 1, "sigmoid", True), (512, 20, 8, 4, "sigmoid", True), (200, 17, 1, 1, "softmax", False),
    (1024, 24, 1, 1, "sigmoid", False), (256, 8, 1, 1, "sigmoid", False),
    # one pass, steps of two groups over two lanes each, without bias (the groups' largest s)
    (128, 4, 2, 1, "sigmoid", False),
    # flat rows of one step on the four-lane tiles with step-ahead loads: the step's load before the window
    (128, 8, 1, 1, "sigmoid", True),
    # flat rows that two lanes cannot read as whole word steps: the lane-per-row word tile with step-ahead loads
    # from 16384 tokens, five steps a row
    (160, 8, 1, 1, "sigmoid", True),
    # more than 16 groups: 32 groups (the rounds on tiles of several rows, all pairs on one-row tiles), with
    # lists of 32 keys on the many-groups four-lane tile
    (256, 20, 32, 4, "sigmoid", True),
    # flat softmax of 64 experts (batch invariance across classes: test_invariance's shapes)
    (64, 6, 1, 1, "softmax", False),
]


# the shapes whose plans also meet infinite logits among finite ones (``_infinite_rows``): the unchecked streams'
# (``CHECKED_STREAM`` off: 160 and 256 experts from 4096 tokens) and their neighbours, flat and grouped
NON_FINITE_SHAPES = [(256, 8, 1, 1, "sigmoid", True), (160, 8, 1, 1, "sigmoid", True), (384, 8, 1, 1, "sigmoid", True),
                     (256, 8, 8, 4, "sigmoid", True)]


@pytest.mark.parametrize("experts,topk,groups,topk_group,scoring,with_bias", SHAPES, ids=str)
def test_every_plan_matches_float64(experts, topk, groups, topk_group, scoring, with_bias):
    """Every plan of the shape (``route_every_plan``) fully writes poisoned outputs, matches float64 and gives the
    same bits, on a random row, a row with NaN, an -inf row and two random rows: the last alone in its program on
    tiles of up to four rows, a program whose rows are all settled without the exact redo. ``NON_FINITE_SHAPES``
    also on infinite logits among finite ones, in the rows before these (``_infinite_rows``)."""
    tokens = 67 if ON_GPU else 5
    logits = random_logits(tokens, experts, torch.bfloat16, seed=experts + topk)
    logits[1, ::7] = float("nan")
    logits[2] = float("-inf")
    bias = random_bias(experts, seed=experts) if with_bias else None
    infinite = (experts, topk, groups, topk_group, scoring, with_bias) in NON_FINITE_SHAPES
    if infinite:
        rows, bias = _infinite_rows(experts)
        logits = torch.cat([rows, logits])
    results = route_every_plan(logits, topk, scoring_func=scoring, correction_bias=bias, num_expert_group=groups,
                               topk_group=topk_group, routed_scaling_factor=2.5)
    assert_plans_agree(results)
    if infinite:
        _, _, ids = next(iter(results.values()))
        assert not (ids[0] == 5).any() and not (ids[2] == 37).any() and not (ids[3] == 37).any()


def _infinite_rows(experts):
    """Rows of infinite logits among finite ones, and the bias they are routed with.

    Unchecked streams of runs (``CHECKED_STREAM`` off) key infinite logits as if finite (c = 1 + b for +inf, b for
    -inf) and leave them to the tail, which redoes a row with exact keys when one of its top runs' experts is not
    finite. Rows where that matters: a lone +inf (row 0: its fake key is the row's largest, so its run is always a
    top run), several +inf, a -inf with a large bias (rows 2 and 3: its fake c = b tops the row), +inf and NaN
    together, an +inf row, an -inf stretch, and a row without any. The infinite experts are invalid: never picked
    while valid ones remain (rows 0, 2 and 3: the caller checks the ids)."""
    logits = random_logits(8, experts, torch.bfloat16, seed=experts + 11)
    bias = random_bias(experts, seed=experts + 12)
    bias[37] = 2.0  # expert 37: the largest bias, so a -inf logit there (c = b) keys above most finite ones
    logits[0, 5] = float("inf")
    logits[1, [3, 90, experts - 1]] = float("inf")
    logits[2, 37] = float("-inf")
    logits[3, 37] = float("-inf")
    logits[3, 100] = float("inf")
    logits[4, 1] = float("inf")
    logits[4, ::9] = float("nan")
    logits[5] = float("inf")
    logits[6, 64:96] = float("-inf")
    return logits, bias


def test_float32_rows_every_plan():
    """float32 logits have plans of their own from 4096 tokens (the four-lane tiles without
    step-ahead loads for 256 experts and more): every plan of the float32 rule against float64."""
    tokens = 67 if ON_GPU else 5
    logits = random_logits(tokens, 384, torch.float32, seed=384)
    logits[1, ::7] = float("nan")
    logits[2] = float("-inf")
    bias = random_bias(384, seed=385)
    results = route_every_plan(logits, 8, correction_bias=bias, routed_scaling_factor=2.5)
    assert not results["large"][0].constexprs["PREFETCH"]  # the float32 rule's plan was the one run
    assert_plans_agree(results)


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no bias"])
def test_many_groups_with_tied_scores_on_every_plan(with_bias):
    """64 groups of 4 with 8 kept (the kernels keep groups in rounds on tiles of several rows from 32
    groups on, by all-pairs rank on one-row tiles): logits from a few values, so that group scores tie everywhere; every plan's ids equal the
    reference's exactly (ties to the lower group and expert index), -inf and NaN rows included."""
    gen = torch.Generator().manual_seed(64)
    tokens = 67 if ON_GPU else 6
    logits = (torch.randint(-2, 3, (tokens, 256), generator=gen).float() / 2).to(DEVICE)
    logits[1, ::5] = float("nan")
    logits[2] = float("-inf")
    logits[3, 100:] = float("-inf")  # fewer valid groups than kept near the end of the row
    bias = (torch.randint(-1, 2, (256,), generator=gen).float() / 4).to(DEVICE) if with_bias else None
    expected = reference.route(logits.cpu(), 9, correction_bias=None if bias is None else bias.cpu(),
                               num_expert_group=64, topk_group=8, routed_scaling_factor=2.5)[1]
    results = route_every_plan(logits, 9, correction_bias=bias, num_expert_group=64, topk_group=8,
                               routed_scaling_factor=2.5)
    for tclass, (plan, _, ids) in results.items():
        assert torch.equal(ids.cpu().to(expected.dtype), expected), (tclass, plan.constexprs)


@pytest.mark.parametrize("renormalize", [True, False], ids=["renormalised", "unrenormalised"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("experts,topk", [(128, 8), (37, 5), (1024, 8)])
def test_softmax_ranked_by_logits_on_every_plan(dtype, experts, topk, renormalize):
    """Softmax on the bitonic kernel: logit keys (16-bit logits, E <= 512) or exact keys of the float32
    logit, ties and non-finite logits on every plan; equal logits of opposite zero signs tie (lower
    index first), however their bits differ."""
    tokens = 67 if ON_GPU else 6
    logits = random_logits(tokens, experts, dtype, seed=experts + topk)
    logits[0] = logits[0, 0]  # one value everywhere: the lowest indices, in order
    logits[1, ::7] = float("nan")
    logits[2] = float("-inf")
    logits[3] = -5.0
    logits[3, 3] = -0.0
    logits[3, 10] = 0.0
    logits[4, 5] = float("inf")
    logits[5, 1::3] = logits[5, 0]  # many equal logits among the best
    results = route_every_plan(logits, topk, scoring_func="softmax", renormalize=renormalize,
                               routed_scaling_factor=2.5)
    assert {plan.name for plan, _, _ in results.values()} == {"bitonic"}
    assert_plans_agree(results)
    for _, _, ids in results.values():
        assert ids[0].tolist() == list(range(topk))
        assert ids[3, :2].tolist() == [3, 10]


def test_rules_use_the_bitonic_kernel_where_it_applies():
    sigmoid = check_call(torch.zeros(1, 256), 8, "sigmoid", torch.zeros(256), 1, 1, True, 1.0, None)
    grouped = check_call(torch.zeros(1, 256), 8, "sigmoid", torch.zeros(256), 8, 4, True, 1.0, None)
    softmax = check_call(torch.zeros(1, 128), 8, "softmax", None, 1, 1, True, 1.0, None)
    assert {p.name for p in all_plans(sigmoid, biased=True).values()} == {"bitonic"}
    assert {p.name for p in all_plans(grouped, biased=True).values()} == {"bitonic"}
    assert {p.name for p in all_plans(softmax).values()} == {"bitonic"}  # flat, no bias
    assert {p.name for p in all_plans(softmax._replace(renormalize=False)).values()} == {"bitonic"}
    # softmax that needs the row's softmax before ranking: with a bias, grouped
    assert {p.name for p in all_plans(softmax, biased=True).values()} == {"rounds"}
    grouped_softmax = check_call(torch.zeros(1, 128), 8, "softmax", None, 8, 4, True, 1.0, None)
    assert {p.name for p in all_plans(grouped_softmax).values()} == {"rounds"}


def test_token_classes_are_monotone():
    counts = (1, 256, 257, 2047, 2048, 3071, 3072, 4095, 4096, 12287, 12288, 16383, 16384, 32767, 32768, 42239,
              42240, 65535, 65536, 262144)
    classes = [token_class(t) for t in counts]
    assert classes == sorted(classes) and classes[0] == 0 and classes[-1] == 9 and len(set(classes)) == 10
    assert [token_class(t - 1) + 1 for t in TOKEN_CLASS_STARTS] == [token_class(t) for t in TOKEN_CLASS_STARTS]


def test_large_12k_class_drops_step_ahead_loads_where_measured():
    """From 12288 to 16383 tokens (LARGE_12K) sigmoid rows of 224, 256 and 512 experts (256
    grouped too) run the LARGE class's four-lane tile without step-ahead loads; 128 and 384 experts and softmax rows
    keep the LARGE class's plan. The plans without them give the same bits as
    those with (they only change when values arrive), and match float64 (224 and 512 experts: shapes
    ``test_every_plan_matches_float64`` lacks)."""
    from moe_routing.kernels.rules import LARGE, LARGE_12K

    def plans(experts, **shape):
        return _class_plans((LARGE, LARGE_12K), experts, **shape)

    for experts, groups, kept in ((224, 1, 1), (256, 1, 1), (512, 1, 1), (256, 8, 4)):
        large, large_12k = plans(experts, groups=groups, kept=kept)
        assert large.constexprs["PREFETCH"] and not large_12k.constexprs["PREFETCH"], (experts, groups)
        # (the stream's finite check is its own rule: test_unchecked_streams_only_where_measured)
        assert large_12k == large._replace(constexprs={**large.constexprs, "PREFETCH": False,
                                                       "CHECKED_STREAM": large_12k.constexprs["CHECKED_STREAM"]})
    for experts, scoring in ((128, "sigmoid"), (384, "sigmoid"), (256, "softmax")):
        large, large_12k = plans(experts, scoring=scoring)
        assert large_12k == large and large.constexprs["PREFETCH"], (experts, scoring)
    for experts in (224, 512):
        _class_plans_agree(experts, (LARGE, LARGE_12K), experts + 12, experts + 1)


def _class_plans(tclasses, experts, groups=1, kept=1, scoring="sigmoid", topk=8, wide_loads=True):
    """The rule's plans, one a token class of ``tclasses``, for bf16 rows of ``experts`` experts (a bias with sigmoid
    scoring; ``wide_loads``: aligned rows)."""
    from moe_routing.kernels.rules import choose_plan

    bias = torch.zeros(experts) if scoring == "sigmoid" else None
    call = check_call(torch.zeros(1, experts, dtype=torch.bfloat16), topk, scoring, bias, groups, kept, True, 1.0, None)
    return tuple(choose_plan(call, tclass, wide_loads=wide_loads, biased=bias is not None) for tclass in tclasses)


def _class_plans_agree(experts, tclasses, seed, bias_seed):
    """Route 5 rows (a NaN row, an -inf row) of sigmoid routing with a bias over ``experts`` experts, K = 8, with each
    token class's plan forced: every plan fully writes its outputs and matches float64, and all give the same bits.
    Returns the plans."""
    from moe_routing.kernels import launch
    from moe_routing.kernels.rules import choose_plan, tensor_traits
    from conftest import assert_fully_written, poisoned_out, verify

    tokens = 5
    logits = random_logits(tokens, experts, torch.bfloat16, seed=seed)
    logits[1, ::7] = float("nan")
    logits[2] = float("-inf")
    bias = random_bias(experts, seed=bias_seed).to(DEVICE)
    call = check_call(logits, 8, "sigmoid", bias, 1, 1, True, 2.5, None)
    plans, outputs = [], []
    for tclass in tclasses:
        plans.append(choose_plan(call, tclass, **tensor_traits(logits, bias)))
        weights, ids = poisoned_out(tokens, 8, logits.device)
        launch(call, logits, bias, weights, ids, plan=plans[-1])
        assert_fully_written(weights, ids)
        assert verify(weights, ids, logits, 8, correction_bias=bias, routed_scaling_factor=2.5).ok, (experts, tclass)
        outputs.append((weights, ids))
    for weights, ids in outputs[1:]:
        assert torch.equal(weights, outputs[0][0]) and torch.equal(ids, outputs[0][1])
    return plans


def test_huge_42k_class_keeps_step_ahead_loads_below_it_where_measured():
    """From 32768 to 42239 tokens (HUGE_32K) flat sigmoid rows of 257-512 experts with K <= 8 run the
    two-lane word tile with step-ahead loads; from 42240 (HUGE_42K) without.
    Softmax rows, 256 experts, grouped rows, lists of 16 keys and unaligned rows (no word tile) keep one plan in
    both classes. The plans with them give the same bits as those without (they only change when values arrive) and
    match float64 (320 and 448 experts: shapes ``test_every_plan_matches_float64`` lacks)."""
    from moe_routing.kernels.rules import HUGE_32K, HUGE_42K

    def plans(experts, **shape):
        return _class_plans((HUGE_32K, HUGE_42K), experts, **shape)

    for experts in (320, 384, 448, 512):
        huge_32k, huge_42k = plans(experts)
        assert huge_32k.constexprs["PREFETCH"] and huge_32k.constexprs["LANES"] == 2, experts
        assert huge_42k == huge_32k._replace(constexprs={**huge_32k.constexprs, "PREFETCH": False})
    for case in (dict(experts=384, scoring="softmax"), dict(experts=256), dict(experts=256, groups=8, kept=4),
                 dict(experts=384, topk=12), dict(experts=384, wide_loads=False)):
        huge_32k, huge_42k = plans(**case)
        assert huge_32k == huge_42k and not huge_32k.constexprs["PREFETCH"], case
    for experts in (320, 448):
        huge_32k, huge_42k = _class_plans_agree(experts, (HUGE_32K, HUGE_42K), experts + 32, experts + 3)
        assert huge_32k.constexprs["WORDS"] and huge_32k.constexprs["PREFETCH"] and not huge_42k.constexprs["PREFETCH"]




def test_unchecked_streams_only_where_measured():
    """The four-lane tile's window keys skip the stream's finite check (``CHECKED_STREAM`` off) for
    bf16 sigmoid rows with a bias, K <= 8, of 160, 224, 256 and 512 experts from 4096 tokens (LARGE), and of 256 also
    from 12288 (LARGE_12K); every other plan keeps it: 128, 192 and 384 experts, other token classes, softmax, no bias,
    float32 logits, grouped rows, lists of 16 keys. Exactness: ``test_every_plan_matches_float64`` runs these plans,
    on rows the tail must redo among others (``NON_FINITE_SHAPES``), and
    ``test_large_12k_class_drops_step_ahead_loads_where_measured`` the 224- and 512-expert ones against float64 and
    against their LARGE_12K plans, which keep the check."""
    from moe_routing.kernels.rules import CLASS_NAMES, choose_plan

    def unchecked(experts, scoring="sigmoid", groups=1, kept=1, topk=8, biased=True, dtype=torch.bfloat16):
        bias = torch.zeros(experts) if biased else None
        call = check_call(torch.zeros(1, experts, dtype=dtype), topk, scoring, bias, groups, kept, True, 1.0, None)
        found = []
        for tclass, name in enumerate(CLASS_NAMES):
            plan = choose_plan(call, tclass, wide_loads=True, biased=biased, float32_logits=dtype == torch.float32)
            if not plan.constexprs.get("CHECKED_STREAM", True):
                assert plan.constexprs["LANES"] == 4 and plan.constexprs["CHUNK"] == 8, (experts, name)
                found.append(name)
        return found

    assert unchecked(256) == ["large", "large 12k"]
    for experts in (160, 224, 512):
        assert unchecked(experts) == ["large"], experts
    for case in (dict(experts=128), dict(experts=192), dict(experts=384), dict(experts=256, scoring="softmax", biased=False),
                 dict(experts=256, biased=False), dict(experts=256, dtype=torch.float32), dict(experts=256, groups=8, kept=4),
                 dict(experts=256, topk=12)):
        assert unchecked(**case) == [], case


def test_store_first_only_where_measured():
    """The window's rows are stored before the exact redo (``STORE_FIRST``) on the four-lane tile
    with runs of 4 and lists of 8 from 4096 tokens (LARGE up), and at 65536 tokens on the flat two-lane tile and the
    grouped lane-per-row tile in one pass; sigmoid rows only. Every other plan stores after the redo: the flat
    lane-per-row tile (measured slower), the two-lane tile below 65536 tokens, decode and small batches, softmax,
    lists of 16 keys. ``test_store_first_gives_the_same_bits`` checks what the plans give."""
    from moe_routing.kernels.rules import CLASS_NAMES, choose_plan

    def stored_first(experts, scoring="sigmoid", groups=1, kept=1, topk=8, dtype=torch.bfloat16):
        bias = torch.zeros(experts) if scoring == "sigmoid" else None
        call = check_call(torch.zeros(1, experts, dtype=dtype), topk, scoring, bias, groups, kept, True, 1.0, None)
        found = []
        for tclass, name in enumerate(CLASS_NAMES):
            plan = choose_plan(call, tclass, wide_loads=True, biased=bias is not None,
                               float32_logits=dtype == torch.float32)
            if plan.constexprs.get("STORE_FIRST", False):
                found.append((name, plan.constexprs["LANES"]))
        return found

    four_lanes = [("large", 4), ("large 12k", 4)]
    assert stored_first(256) == four_lanes
    assert stored_first(256, groups=8, kept=4) == four_lanes + [("huge 64k", 1)]  # one pass from 65536 tokens
    assert stored_first(384) == four_lanes + [("huge", 4), ("huge 64k", 2)]  # two lanes from 32768, first at 65536
    assert stored_first(512, dtype=torch.float32) == four_lanes + [("huge", 4), ("huge 64k", 2)]
    assert stored_first(128) == four_lanes  # (the lane-per-row tile from 65536 tokens: no)
    for case in (dict(experts=64, topk=6), dict(experts=256, scoring="softmax"), dict(experts=256, topk=12)):
        assert stored_first(**case) == [], case


@pytest.mark.parametrize("experts,groups,kept,tclass_name", [(256, 1, 1, "large"), (384, 1, 1, "huge 64k"),
                                                             (256, 8, 4, "huge 64k")], ids=str)
def test_store_first_gives_the_same_bits(experts, groups, kept, tclass_name):
    """``STORE_FIRST`` on and off on the rule's plans that take it: rows the window settles, rows it hands
    to the exact redo (a NaN row, an -inf row, an +inf among finite logits) and a call whose bias leaves the window
    (every row exact) — each row written once (poisoned outputs fully written), matching float64, the same bits."""
    from moe_routing.kernels import launch
    from moe_routing.kernels.rules import CLASS_NAMES, choose_plan, tensor_traits
    from conftest import verify

    tokens = 7 if not ON_GPU else 67
    logits = random_logits(tokens, experts, torch.bfloat16, seed=experts + groups)
    logits[1, ::7] = float("nan")
    logits[2] = float("-inf")
    logits[3, 5] = float("inf")
    for shift in (0.0, 8.0):  # 8: the window is unusable, the exact path stores
        bias = random_bias(experts, seed=experts) + shift
        call = check_call(logits, 8, "sigmoid", bias, groups, kept, True, 2.5, None)
        plan = choose_plan(call, CLASS_NAMES.index(tclass_name), **tensor_traits(logits, bias))
        assert plan.constexprs["STORE_FIRST"], plan
        outputs = []
        for store_first in (True, False):
            weights, ids = poisoned_out(tokens, 8, logits.device)
            launch(call, logits, bias, weights, ids,
                   plan=plan._replace(constexprs={**plan.constexprs, "STORE_FIRST": store_first}))
            assert_fully_written(weights, ids)
            assert verify(weights, ids, logits, 8, correction_bias=bias, num_expert_group=groups, topk_group=kept,
                          routed_scaling_factor=2.5).ok, (store_first, shift)
            outputs.append((weights.view(torch.int32), ids))
        assert torch.equal(outputs[0][0], outputs[1][0]) and torch.equal(outputs[0][1], outputs[1][1]), shift


@pytest.mark.parametrize("experts", [256, 384])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_word_loads_only_where_rows_are_aligned(dtype, experts):
    """The word tiles (from 65536 tokens: a lane per row at 256 experts, two lanes per row at 384) read
    16-bit logits as 64-bit words only from 16-byte aligned rows; the same call on unaligned views of the
    same values takes the plain loads (at 384 experts another tile) and gives the same bits.

    Every plan runs on the aligned rows (the unaligned rows' plans among them) and on rows of another stride. The
    view shifted off alignment keeps the aligned rows' stride and takes the aligned run's unaligned plans: in the
    interpreter, which reads any address alike, the same code on the same values, so there the one plan the
    alignment changes runs on it (the 65536 class's); on the GPU, where Triton specialises every plan on 16-byte
    alignment, every plan runs on it."""
    from moe_routing.kernels import launch
    from moe_routing.kernels.launch import rule_plan
    from moe_routing.kernels.rules import HUGE_64K, choose_plan, wide_loads_ok
    from moe_routing.verify import verify

    tokens = 67 if ON_GPU else 5
    logits = random_logits(tokens, experts, dtype, seed=11)
    logits[1, ::5] = float("nan")
    logits[3, 17] = float("inf")
    bias = random_bias(experts, seed=12)
    call = check_call(logits, 8, "sigmoid", bias, 1, 1, True, 2.5, None)
    padded = torch.full((tokens, experts + 8), float("nan"), dtype=dtype, device=logits.device)
    padded[:, :experts] = logits  # row stride 264: rows 16-byte apart only every other row
    flat = torch.empty(tokens * experts + 1, dtype=dtype, device=logits.device)
    flat[1:] = logits.reshape(-1)
    shifted = flat[1:].view(tokens, experts)  # base 2 bytes past an aligned address
    assert wide_loads_ok(logits, logits.stride(0)) and choose_plan(call, HUGE_64K, True).constexprs["WORDS"]
    for view in (padded[:, :experts], shifted, logits.float()):
        assert not wide_loads_ok(view, view.stride(0))
    assert not choose_plan(call, HUGE_64K, False).constexprs["WORDS"]

    kwargs = dict(correction_bias=bias, routed_scaling_factor=2.5)
    aligned = route_every_plan(logits, 8, **kwargs)
    assert any(plan.constexprs.get("WORDS") for plan, _, _ in aligned.values())
    assert_plans_agree(aligned)
    _, weights, ids = aligned["huge 64k"]
    for view in (padded[:, :experts], shifted) if ON_GPU else (padded[:, :experts],):
        results = route_every_plan(view, 8, **kwargs)
        assert not any(plan.constexprs.get("WORDS") for plan, _, _ in results.values())
        assert all(torch.equal(i, ids) and torch.equal(w, weights) for _, w, i in results.values())
    if not ON_GPU:  # the shifted rows' plan of the 65536 class: plain loads of a base 2 bytes off alignment
        plan = rule_plan(call._replace(tokens=65536), shifted, bias, True)  # what launch() would choose
        assert not plan.constexprs["WORDS"]
        out = poisoned_out(tokens, 8)
        launch(call, shifted, bias, *out, plan=plan)
        assert_fully_written(*out)
        assert verify(*out, shifted, 8, **kwargs).ok
        assert torch.equal(out[1], ids) and torch.equal(out[0], weights)


def test_register_cap_only_on_the_measured_tile():
    """ptxas's register cap (``Plan.maxnreg``) goes only to the grouped one-pass tile of a lane per row with
    lists of 8 from 65536 tokens (where it was measured faster, (docs/kernel-design-log.md), and never on ROCm, whose
    Triton refuses the option."""
    from moe_routing.kernels.rules import ONE_WAVE_REGISTERS

    def capped_plans(rocm=False):
        capped = []
        for experts, topk, groups, kept, scoring, biased in SHAPES:
            call = check_call(torch.zeros(1, experts), topk, scoring, torch.zeros(experts) if biased else None, groups,
                              kept, True, 1.0, None)
            for name, plan in all_plans(call, True, biased, rocm=rocm).items():
                if plan.maxnreg is not None:
                    c = plan.constexprs
                    assert plan.maxnreg == ONE_WAVE_REGISTERS and c["ONE_PASS"] and c["LANES"] == 1 and c["CHUNK"] == 8
                    capped.append((experts, topk, groups, kept, name))
        return capped

    capped = capped_plans()
    assert (256, 8, 8, 4, "huge 64k") in capped and all(name.startswith("huge 64k") for *_, name in capped)
    assert capped_plans(rocm=True) == []


@pytest.mark.parametrize("bias_dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("experts", [160, 256])
def test_bias_read_per_thread_gives_the_shared_loads_bits(experts, bias_dtype):
    """The flat lane-per-row word tile with step-ahead loads (the rule's from 65536 tokens at 160 and
    256 experts) reads each step's bias per thread; the same tile without them spreads one load over the warp
    through shared memory. Both give the same bits for a bias of any float dtype (160 experts: an odd number of
    steps, the last one reloading itself), and both match float64."""
    from conftest import assert_fully_written, poisoned_out
    from moe_routing.kernels import launch
    from moe_routing.kernels.rules import HUGE_64K, choose_plan
    from moe_routing.verify import verify

    tokens = 67 if ON_GPU else 5
    logits = random_logits(tokens, experts, torch.bfloat16, seed=21)
    logits[1, ::5] = float("nan")
    logits[2, 3] = float("-inf")
    logits[3, experts - 40:] = logits[3, :40]  # ties across the row's first and last steps
    bias = random_bias(experts, bias_dtype, seed=22)
    call = check_call(logits, 8, "sigmoid", bias, 1, 1, True, 2.5, None)
    per_thread = choose_plan(call, HUGE_64K, wide_loads=True, biased=True)
    c = per_thread.constexprs
    assert c["WORDS"] and c["PREFETCH"] and c["LANES"] == 1 and c["GROUP"] == 4 and not c["ONE_PASS"]
    shared = per_thread._replace(constexprs={**c, "PREFETCH": False})
    results = []
    for plan in (per_thread, shared):
        weights, ids = poisoned_out(tokens, 8, logits.device)
        launch(call, logits, bias, weights, ids, plan=plan)
        assert_fully_written(weights, ids)
        verdict = verify(weights, ids, logits, 8, correction_bias=bias, routed_scaling_factor=2.5)
        assert verdict.ok, verdict
        results.append((weights, ids))
    assert torch.equal(results[0][1], results[1][1]) and torch.equal(results[0][0], results[1][0])


ROUNDS_CASES = [  # (experts, topk, groups, topk_group, scoring, bias, logits dtype, bias dtype)
    (256, 8, 1, 1, "sigmoid", True, torch.bfloat16, torch.float32),  # 8 a thread, one 16-byte load
    (64, 6, 1, 1, "sigmoid", True, torch.bfloat16, torch.float32),  # 2 a thread, K not a power of two
    (37, 3, 1, 1, "sigmoid", True, torch.bfloat16, torch.bfloat16),  # prime: padding in most threads
    (384, 8, 1, 1, "sigmoid", True, torch.bfloat16, torch.float32),  # 16 a thread: 2 pieces, bias in 4
    (509, 7, 1, 1, "sigmoid", False, torch.float32, None),  # prime, float32 rows: 4 pieces a thread
    (256, 8, 8, 4, "sigmoid", True, torch.bfloat16, torch.float32),  # grouped, ranked in the tile: lists dropped
    (256, 8, 8, 4, "sigmoid", False, torch.float32, None),  # the same without bias (a group's largest s)
    (256, 8, 64, 8, "sigmoid", True, torch.bfloat16, torch.float32),  # groups of 4 < 8 a thread: group stage
    (300, 8, 4, 2, "sigmoid", True, torch.bfloat16, torch.float32),  # padded row: the group stage, keys masked
    (160, 8, 1, 1, "softmax", False, torch.float16, None),  # 16-bit logit keys
]


@pytest.mark.parametrize("renormalize", [True, False], ids=["renormalised", "not renormalised"])
@pytest.mark.parametrize("shift", [0.0, 8.0], ids=["window keys", "bias outside the window"])
@pytest.mark.parametrize("experts,topk,groups,topk_group,scoring,with_bias,dtype,bias_dtype", ROUNDS_CASES, ids=str)
def test_rounds_selection_equals_the_lane_merge(experts, topk, groups, topk_group, scoring, with_bias, dtype,
                                                bias_dtype, shift, renormalize):
    """Decode plans select by K rounds of one warp-wide max and store the weights from the scores
    the rounds hand over where ``rounds_ok`` allows; the same tile with the lanes' sorts and merges instead
    gives the same bits, ties, non-finite rows (the exact redo), scores that underflow (kept as the window picked
    them, the weights re-read), padding and a bias outside the window (exact keys for the whole call) included,
    renormalised or not, into poisoned outputs.

    The rounds without the handover run where their code differs from the two others': with the window keys,
    renormalised. Unrenormalised, their selection is the renormalised run's and their stores the lane merge's
    (``_store_row`` of one row, RENORMALIZE off; softmax hands nothing over unrenormalised); with the bias outside
    the window every row takes the exact keys and the handover's stores are masked off in every row."""
    if shift and not with_bias:
        pytest.skip("no bias to shift")
    if shift and not renormalize:
        pytest.skip("renormalising changes the stores only: the window keys' rows suffice")
    from moe_routing.kernels import launch
    from moe_routing.kernels.rules import LATENCY, choose_plan, rounds_ok, tensor_traits
    from conftest import assert_fully_written, poisoned_out

    tokens = 6
    logits = random_logits(tokens, experts, dtype, seed=experts * 3 + topk)
    logits[0] = logits[0, 5]  # one value everywhere: the lowest indices
    logits[1, ::7] = float("nan")
    logits[2] = float("-inf")
    logits[3, 1::3] = logits[3, 0]  # many equal values among the best
    if scoring == "sigmoid":  # scores near and under 2**-126, where the GPU's two sigmoids part
        logits[5] = -85.0 - 5.0 * torch.rand(experts, generator=torch.Generator().manual_seed(5))
    bias = random_bias(experts, bias_dtype, seed=experts) + shift if with_bias else None
    call = check_call(logits, topk, scoring, bias, groups, topk_group, renormalize, 2.5, None)
    plan = choose_plan(call, LATENCY, **tensor_traits(logits, bias))
    assert plan.constexprs["ROUNDS"] and rounds_ok(call, plan.rows, plan.num_warps, dtype == torch.float32)
    assert plan.constexprs["HANDOVER"]  # every decode plan with rounds hands the scores over
    merged = plan._replace(constexprs={**plan.constexprs, "ROUNDS": False})
    reread = plan._replace(constexprs={**plan.constexprs, "HANDOVER": False})  # stores that re-read the logits (SMALL's 512 / 8)
    outputs = []
    for variant in (plan, merged, reread) if renormalize and not shift else (plan, merged):
        weights, ids = poisoned_out(tokens, topk, logits.device)
        launch(call, logits, bias, weights, ids, plan=variant)
        assert_fully_written(weights, ids)
        outputs.append((weights, ids))
    for other in outputs[1:]:
        assert torch.equal(outputs[0][1], other[1]) and torch.equal(outputs[0][0], other[0])
    expected = reference.route(logits.cpu(), topk, scoring_func=scoring,
                               correction_bias=None if bias is None else bias.cpu(), num_expert_group=groups,
                               topk_group=topk_group, renormalize=renormalize, routed_scaling_factor=2.5)[1]
    assert torch.equal(outputs[0][1].cpu()[[0, 2, 3]].to(expected.dtype), expected[[0, 2, 3]])  # tie rows exact


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no bias"])
@pytest.mark.parametrize("groups,topk_group", [(2, 1), (4, 2), (8, 4), (16, 5), (32, 7)])
def test_groups_ranked_in_the_rounds_tile_with_tied_scores(groups, topk_group, with_bias):
    """Grouped decode rows whose groups are whole threads rank their groups in the rounds' tile (every group's score reaches every thread by one integer reduction, and each thread ranks its own group):
    logits from a few values, so that group scores tie everywhere, keep the lower groups and experts as the
    reference does (ids exact), with the same bits as the lane merge's plan; -inf, NaN and part-invalid rows."""
    from moe_routing.kernels import launch
    from moe_routing.kernels.rules import LATENCY, choose_plan, tensor_traits
    from conftest import assert_fully_written, poisoned_out

    gen = torch.Generator().manual_seed(groups)
    tokens = 5
    logits = (torch.randint(-2, 3, (tokens, 256), generator=gen).float() / 2).to(DEVICE)
    logits[1, ::5] = float("nan")
    logits[2] = float("-inf")
    logits[3, 100:] = float("-inf")  # fewer valid groups than kept
    bias = (torch.randint(-1, 2, (256,), generator=gen).float() / 4).to(DEVICE) if with_bias else None
    call = check_call(logits, 8, "sigmoid", bias, groups, topk_group, True, 2.5, None)
    plan = choose_plan(call, LATENCY, **tensor_traits(logits, bias))
    per_thread = plan.constexprs["BLOCK_EXPERTS"] // 32
    assert plan.constexprs["ROUNDS"] and plan.constexprs["GROUP_SIZE"] % per_thread == 0  # ranked in the tile
    outputs = []
    for variant in (plan, plan._replace(constexprs={**plan.constexprs, "ROUNDS": False})):
        weights, ids = poisoned_out(tokens, 8, logits.device)
        launch(call, logits, bias, weights, ids, plan=variant)
        assert_fully_written(weights, ids)
        outputs.append((weights, ids))
    assert torch.equal(outputs[0][1], outputs[1][1]) and torch.equal(outputs[0][0], outputs[1][0])
    expected = reference.route(logits.cpu(), 8, correction_bias=None if bias is None else bias.cpu(),
                               num_expert_group=groups, topk_group=topk_group, routed_scaling_factor=2.5)[1]
    assert torch.equal(outputs[0][1].cpu().to(expected.dtype), expected)


def test_rounds_only_where_they_apply():
    """The rule's decode plans (and the SMALL class's one-row tiles of 128 experts and more) select by rounds up
    to 512 experts and K = 8, on one row of one warp; not for longer rows, K > 8, softmax of float32 logits
    (64-bit keys) or tiles of several rows; from 2048 to 3071 tokens (MEDIUM) only sigmoid rows of 256 or 512 experts
    on 16-bit logits; none from 3072."""
    from moe_routing.kernels.rules import LATENCY, MEDIUM, MEDIUM_3K, SMALL, choose_plan, rounds_ok

    def plan(experts, topk, scoring="sigmoid", dtype=torch.bfloat16, tclass=LATENCY):
        call = check_call(torch.zeros(1, experts, dtype=dtype), topk, scoring, None, 1, 1, True, 1.0, None)
        return choose_plan(call, tclass, float32_logits=dtype == torch.float32).constexprs["ROUNDS"]

    assert plan(256, 8) and plan(512, 8) and plan(32, 1) and plan(128, 8, "softmax") and plan(256, 8, dtype=torch.float32)
    assert not plan(513, 8) and not plan(256, 9) and not plan(128, 8, "softmax", torch.float32)
    assert plan(256, 8, tclass=SMALL) and plan(128, 8, tclass=SMALL) and not plan(64, 6, tclass=SMALL)
    # 2048-3071 tokens (MEDIUM): sigmoid rows of 256 or 512 experts on 16-bit logits only; not from 3072 (MEDIUM_3K)
    assert plan(256, 8, tclass=MEDIUM) and plan(512, 8, tclass=MEDIUM) and not plan(256, 8, tclass=MEDIUM_3K)
    assert not plan(384, 8, tclass=MEDIUM) and not plan(128, 8, tclass=MEDIUM)
    assert not plan(256, 8, "softmax", tclass=MEDIUM) and not plan(256, 8, dtype=torch.float32, tclass=MEDIUM)
    grouped = check_call(torch.zeros(1, 256, dtype=torch.bfloat16), 8, "sigmoid", torch.zeros(256), 8, 4, True, 1.0,
                         None)
    assert choose_plan(grouped, MEDIUM, biased=True).constexprs["ROUNDS"]
    assert not choose_plan(grouped, MEDIUM_3K, biased=True).constexprs["ROUNDS"]
    call = check_call(torch.zeros(1, 256), 8, "sigmoid", None, 1, 1, True, 1.0, None)
    assert not rounds_ok(call, 2, 1) and not rounds_ok(call, 1, 2)


def test_scores_handed_over_where_measured_faster():
    """The rounds' handover (the weights from the scores the rounds hand over) on every decode plan with rounds;
    beyond decode sizes only for flat rows of at most 256 experts (512 experts and grouped rows measured slower
    there); never without rounds."""
    from moe_routing.kernels.rules import HUGE, LATENCY, MEDIUM, SMALL, choose_plan

    def constexprs(experts, groups=1, kept=1, tclass=LATENCY, scoring="sigmoid"):
        call = check_call(torch.zeros(1, experts, dtype=torch.bfloat16), 8, scoring, None, groups, kept, True, 1.0,
                          None)
        return choose_plan(call, tclass).constexprs

    for experts, groups, kept in ((256, 1, 1), (64, 1, 1), (512, 1, 1), (384, 1, 1), (256, 8, 4), (300, 4, 2)):
        assert constexprs(experts, groups, kept)["HANDOVER"]
    assert constexprs(128, scoring="softmax")["HANDOVER"]
    assert constexprs(256, tclass=SMALL)["HANDOVER"] and constexprs(256, tclass=MEDIUM)["HANDOVER"]
    assert constexprs(128, tclass=SMALL)["HANDOVER"]
    assert constexprs(512, tclass=SMALL)["ROUNDS"] and not constexprs(512, tclass=SMALL)["HANDOVER"]
    assert constexprs(512, tclass=MEDIUM)["ROUNDS"] and not constexprs(512, tclass=MEDIUM)["HANDOVER"]
    assert constexprs(256, 8, 4, tclass=SMALL)["ROUNDS"] and not constexprs(256, 8, 4, tclass=SMALL)["HANDOVER"]
    assert not constexprs(256, tclass=HUGE)["ROUNDS"] and not constexprs(256, tclass=HUGE)["HANDOVER"]


SM90_PLAN_COMPILER = """
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from moe_routing.call import check_call
from moe_routing.kernels.rules import LARGE, LATENCY, choose_plan, tensor_traits


def rule_plan(experts, topk, groups, topk_group, scoring, with_bias, dtype, tclass):
    logits = torch.zeros(1, experts, dtype=dtype)
    bias = torch.zeros(experts) if with_bias else None
    call = check_call(logits, topk, scoring, bias, groups, topk_group, True, 1.0, None)
    return choose_plan(call, tclass, **tensor_traits(logits, bias))


def compile_sm90(plan, dtype, with_bias, **options):
    pointer = {torch.bfloat16: "*bf16", torch.float32: "*fp32"}[dtype]
    signature = {"logits_ptr": pointer, "bias_ptr": "*fp32" if with_bias else "constexpr", "stride_l_row": "i32",
                 "weights_ptr": "*fp32", "ids_ptr": "*i32", "stride_w_row": "i32", "stride_w_col": "i32",
                 "stride_i_row": "i32", "stride_i_col": "i32", "num_rows": "i32", "scale": "fp32",
                 **{name: "constexpr" for name in plan.constexprs}}
    constants = dict(plan.constexprs, **({} if with_bias else {"bias_ptr": None}))
    return triton.compile(ASTSource(plan.kernel, signature, constants), target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": plan.num_warps, **options})
"""  # a script's helpers: the rule's plan of a one-token call, compiled for sm_90 without a GPU

COMPILE_FOR_SM90 = SM90_PLAN_COMPILER + """
for experts, topk, groups, topk_group, scoring, with_bias, dtype in CASES:
    plan = rule_plan(experts, topk, groups, topk_group, scoring, with_bias, dtype, LATENCY)
    compiled = compile_sm90(plan, dtype, with_bias)
    print("compiled", experts, topk, groups, topk_group, scoring, with_bias, plan.constexprs["ROUNDS"],
          "REDUX" in compiled.asm["ptx"].upper() or "redux" in compiled.asm["ptx"], flush=True)
"""


def test_decode_plans_compile_for_the_gpu():
    """The interpreter runs code that the compiler refuses (once: a jit helper returning early from a
    constexpr branch passed every CI test and failed to compile for every sigmoid call without bias): the rule's
    decode plans of each key path compiled for sm_90 through ptxas, here without a GPU (a process without the
    interpreter: interpreted functions do not compile); the rounds' warp-wide max is a ``redux`` in the PTX."""
    import os
    import subprocess
    import sys

    cases = [(256, 8, 1, 1, "sigmoid", True, "torch.bfloat16"), (256, 8, 1, 1, "sigmoid", False, "torch.bfloat16"),
             (384, 8, 1, 1, "sigmoid", True, "torch.float32"), (128, 8, 1, 1, "softmax", False, "torch.bfloat16"),
             (256, 8, 8, 4, "sigmoid", True, "torch.bfloat16"), (256, 8, 8, 4, "sigmoid", False, "torch.bfloat16"),
             (320, 1, 8, 3, "sigmoid", False, "torch.bfloat16"), (256, 8, 64, 8, "sigmoid", True, "torch.bfloat16")]
    source = "import torch\nCASES = [" + ", ".join(f"({', '.join(map(repr, c[:6]))}, {c[6]})" for c in cases) + "]\n"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", source + COMPILE_FOR_SM90], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line.split() for line in done.stdout.splitlines() if line.startswith("compiled")]
    assert len(lines) == len(cases)
    assert all(line[-2] == "True" and line[-1] == "True" for line in lines), done.stdout  # rounds, and a redux


DENSE_SHAPES = [  # (experts, topk, groups, topk_group, scoring, with_bias): K filling the lists, K = 6 (8-byte rows),
    # odd K, grouped (one pass and two), softmax
    (256, 8, 1, 1, "sigmoid", True), (64, 6, 1, 1, "sigmoid", True), (131, 5, 1, 1, "sigmoid", False),
    (256, 8, 8, 4, "sigmoid", True), (128, 8, 1, 1, "softmax", False),
]


@pytest.mark.parametrize("experts,topk,groups,topk_group,scoring,with_bias", DENSE_SHAPES, ids=str)
def test_dense_and_strided_stores_give_the_same_bits(experts, topk, groups, topk_group, scoring, with_bias):
    """Dense outputs are stored ([T, K], strides (K, 1), 16-byte aligned: ``launch.dense_outputs``) with the
    layout compiled in (``DENSE_OUT``, the rule's lane-per-row plans), others element by element at their strides:
    the bitonic plans of the rule with DENSE_OUT on (forced where the rule has it off) give the same bits into dense
    buffers as into strided views (where they fall back to the strided stores), fully written, and the strided way
    writes nothing outside its views.

    In the interpreter one plan runs for each store code (``_store_code``: DENSE_OUT changes nothing else), and the
    strided views' run is the DENSE_OUT-off reference; on the GPU, where Triton compiles each tile's layouts and
    specialises on the outputs' 16-byte alignment, every plan runs, and also with DENSE_OUT off into the dense
    buffers."""
    from moe_routing.kernels import launch
    from moe_routing.kernels.rules import tensor_traits

    tokens = 67 if ON_GPU else 5
    logits = random_logits(tokens, experts, torch.bfloat16, seed=experts + 3)
    logits[1, ::7] = float("nan")
    bias = random_bias(experts, seed=experts + 4) if with_bias else None
    call = check_call(logits, topk, scoring, bias, groups, topk_group, True, 2.5, None)
    plans = []
    for plan in all_plans(call, **tensor_traits(logits, bias)).values():
        if plan.name == "bitonic" and all(plan != other for other in plans):
            plans.append(plan)
    assert plans and all(plan.constexprs["DENSE_OUT"] == (plan.constexprs["LANES"] == 1) for plan in plans)
    if not ON_GPU:
        firsts = {}
        for plan in plans:
            firsts.setdefault(_store_code(plan), plan)
        plans = list(firsts.values())
    for plan in plans:
        plan = plan._replace(constexprs={**plan.constexprs, "DENSE_OUT": True})
        dense = poisoned_out(tokens, topk)
        launch(call, logits, bias, *dense, plan=plan)
        weights_store = torch.full((tokens, topk + 7), -1.0, device=DEVICE)
        ids_store = torch.full((tokens, topk + 7), -1, dtype=torch.int32, device=DEVICE)
        strided = (weights_store[:, 3:3 + topk], ids_store[:, 4:4 + topk])
        strided[0].fill_(float("nan"))
        strided[1].fill_(-999)
        launch(call, logits, bias, *strided, plan=plan)
        assert_fully_written(*dense)
        assert_fully_written(*strided)
        assert torch.equal(dense[1], strided[1]) and torch.equal(dense[0].view(torch.int32),
                                                                  strided[0].contiguous().view(torch.int32)), plan
        assert (weights_store[:, :3] == -1).all() and (weights_store[:, 3 + topk:] == -1).all()
        assert (ids_store[:, :4] == -1).all() and (ids_store[:, 4 + topk:] == -1).all()
        if ON_GPU:  # the same plan with DENSE_OUT off on dense buffers: another binary there
            plain = poisoned_out(tokens, topk)
            launch(call, logits, bias, *plain,
                   plan=plan._replace(constexprs={**plan.constexprs, "DENSE_OUT": False}))
            assert torch.equal(plain[1], dense[1]) and torch.equal(plain[0], dense[0])


def _store_code(plan):
    """What a bitonic plan's stores (``_store_outputs``, the one place DENSE_OUT is read) depend on besides the
    call: the path that stores (the rounds' picks with the scores handed over, the rounds' picks re-read, or the
    stream's rows, stored before the exact redo or after), the rows a program and the length of the lists. In the
    interpreter (no layouts) plans alike in these run the same store code on the same values: every plan gives the
    same bits (``test_every_plan_matches_float64``)."""
    c = plan.constexprs
    return c["ROUNDS"], c["HANDOVER"], c["STORE_FIRST"], c["ROWS"], c["CHUNK"]


def test_dense_outputs_decide_the_stores():
    """``dense_outputs``: only [T, K] buffers with strides (K, 1) at 16-byte aligned addresses; ``with_outputs``
    keeps a bitonic plan's DENSE_OUT only for them, never turns it on, and leaves rounds plans alone."""
    from moe_routing.kernels.launch import dense_outputs, with_outputs
    from moe_routing.kernels.rules import rounds_plan

    weights, ids = poisoned_out(10, 8)
    assert dense_outputs(weights, ids, 8)
    wide_w, wide_i = poisoned_out(10, 12)
    assert not dense_outputs(wide_w[:, :8], wide_i[:, :8], 8)  # row stride 12
    assert not dense_outputs(weights, wide_i[:, :8], 8)
    flat_w, flat_i = poisoned_out(11, 8)
    shifted = (flat_w.view(-1)[1:81].view(10, 8), flat_i.view(-1)[1:81].view(10, 8))  # 4 bytes off
    assert shifted[0].stride() == (8, 1) and not dense_outputs(*shifted, 8)
    assert not dense_outputs(weights.t().contiguous().t(), ids, 8)
    call = check_call(torch.zeros(4, 256, device=DEVICE), 8, "sigmoid", None, 1, 1, True, 1.0, None)
    plan = all_plans(call)["huge 64k"]
    assert plan.constexprs["DENSE_OUT"]
    assert with_outputs(plan, True) == plan
    assert not with_outputs(plan, False).constexprs["DENSE_OUT"]
    off = plan._replace(constexprs={**plan.constexprs, "DENSE_OUT": False})
    assert with_outputs(off, True) == off
    general = rounds_plan(call, 0)
    assert with_outputs(general, False) == general


class _CudaLogits:
    """What ``launch.with_device`` reads of a CUDA tensor (a machine without a GPU has none)."""

    is_cuda = True

    def get_device(self):
        return 0


@pytest.mark.parametrize("capability,hip,enabled,expected", [
    ((9, 0), None, True, True), ((10, 0), None, True, True), ((8, 9), None, True, False),
    ((9, 0), "6.4", True, False), ((9, 0), None, False, False)], ids=str)
def test_grid_wait_only_on_nvidia_from_hopper(monkeypatch, capability, hip, enabled, expected):
    """The rule's plans are launched with programmatic dependent launch (``GRID_WAIT``: the wait as the
    programs' first instruction, and the launch attribute) on NVIDIA GPUs of compute capability 9.0 and later, unless
    MOE_ROUTING_PDL=0; never on ROCm, older GPUs or CPU tensors; nothing else of the plan changes."""
    import importlib

    from moe_routing.kernels.launch import with_device
    from moe_routing.kernels.rules import choose_plan

    launch_module = importlib.import_module("moe_routing.kernels.launch")

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: capability)
    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.setattr(launch_module, "_PDL_ENABLED", enabled)
    monkeypatch.setattr(launch_module, "_pdl_by_device", {})
    for experts, groups, kept, scoring, bias in [(256, 1, 1, "sigmoid", True), (256, 8, 4, "sigmoid", True),
                                                  (64, 1, 1, "softmax", True)]:  # the last: the rounds kernel
        logits = torch.zeros(1, experts, dtype=torch.bfloat16)
        bias_tensor = torch.zeros(experts) if bias else None
        plan = choose_plan(check_call(logits, 6, scoring, bias_tensor, groups, kept, True, 1.0, None))
        assert plan.constexprs["GRID_WAIT"] is False
        assert with_device(plan, logits) is plan  # a CPU tensor
        got = with_device(plan, _CudaLogits())
        assert got.constexprs["GRID_WAIT"] is expected
        assert got._replace(constexprs={**got.constexprs, "GRID_WAIT": False}) == plan
        assert list(got.constexprs) == list(plan.constexprs)  # the kernel's parameter order, for the direct launch


def test_pdl_switch_is_read_from_the_environment(monkeypatch):
    """MOE_ROUTING_PDL=0 turns programmatic dependent launch off, read when kernels/launch.py is imported: the
    module's code run afresh (a copy beside the imported module, in its package) under each setting."""
    import importlib
    import importlib.util

    imported = importlib.import_module("moe_routing.kernels.launch")  # (the package's ``launch`` is the function)
    for value, expected in (("0", False), ("1", True), (None, True)):
        if value is None:
            monkeypatch.delenv("MOE_ROUTING_PDL", raising=False)
        else:
            monkeypatch.setenv("MOE_ROUTING_PDL", value)
        spec = importlib.util.spec_from_file_location("moe_routing.kernels._launch_read_afresh", imported.__file__)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert module._PDL_ENABLED is expected, value


COMPILE_GRID_WAIT = SM90_PLAN_COMPILER + """
for experts, topk, groups, kept, scoring, tclass in CASES:
    plan = rule_plan(experts, topk, groups, kept, scoring, True, torch.bfloat16, {"LATENCY": LATENCY, "LARGE": LARGE}[tclass])
    for wait in (False, True):
        waiting = plan._replace(constexprs={**plan.constexprs, "GRID_WAIT": wait})
        ptx = compile_sm90(waiting, torch.bfloat16, True, launch_pdl=wait).asm["ptx"]
        body = ptx[ptx.index(".entry"):]
        at = body.find("griddepcontrol.wait")
        print("compiled", plan.name, wait, at >= 0, body.count("griddepcontrol"),
              0 <= at < body.find("ld.global"), flush=True)
"""


def test_grid_wait_compiles_before_every_load_for_the_gpu():
    """The kernels compiled for sm_90 through ptxas here (the interpreter runs no inline PTX): with ``GRID_WAIT`` the
    kernel holds one ``griddepcontrol.wait``, before its first global load; without it none (the decode tile, the
    streaming tile, the rounds kernel)."""
    import os
    import subprocess
    import sys

    cases = [(256, 8, 1, 1, "sigmoid", "LATENCY"), (256, 8, 1, 1, "sigmoid", "LARGE"),
             (64, 6, 1, 1, "softmax", "LATENCY")]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", f"CASES = {cases!r}\n" + COMPILE_GRID_WAIT], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("compiled")]
    assert [line[0] for line in lines] == ["bitonic", "bitonic", "bitonic", "bitonic", "rounds", "rounds"]
    assert [line[1:] for line in lines] == [["False", "False", "0", "False"], ["True", "True", "1", "True"]] * 3
