"""The routing stage's launches (kernels/route_plan_launch.py, kernels/_route_plan.py): route() and the plan in one
launch where the plan fits one, two beyond, the same bits as route() then align() / group(); and the calls that keep
their launches apart. The kernel runs in Triton's interpreter here (programs one after the other, so a plan program
finds every routing program done); the two-launch path is forced onto small calls with 64-slot chunks."""

import pytest
import torch

import moe_routing
from conftest import DEVICE, random_bias, random_logits
from moe_routing import reference
from moe_routing.call import check_call
from moe_routing.kernels import route_plan_launch
from moe_routing.kernels._plan import COUNT, PER_BIN, PLACE_CHUNK
from moe_routing.kernels.launch import rule_plan
from moe_routing.kernels.plan_launch import ONE_LAUNCH_SLOTS, PlanLaunch, plan_launch
from moe_routing.plan_call import check_plan_call

POISON = -77

# the five models of the plan preset: (experts, top-k, route() keywords)
MODELS = {
    "DeepSeek-V3": (256, 8, dict(num_expert_group=8, topk_group=4, biased=True)),
    "Kimi-K2": (384, 8, dict(biased=True)),
    "Moonlight": (64, 6, dict(biased=True)),
    "Qwen3-MoE": (128, 8, dict(scoring_func="softmax")),
    "DeepSeek-V4": (256, 6, dict(scoring_func="sqrtsoftplus", biased=True)),
}


def _stage(tokens, experts, topk, keywords, block_size=16, ids=None):
    """The stage launch route_plan takes for a call (no kernel runs)."""
    keywords = dict(keywords)
    bias = torch.zeros(experts) if keywords.pop("biased", False) else None
    logits = torch.empty(tokens, experts, dtype=torch.bfloat16)
    call = check_call(logits, topk, keywords.pop("scoring_func", "sigmoid"), bias, keywords.pop("num_expert_group", 1),
                      keywords.pop("topk_group", 1), True, 1.0, None, None, torch.int32)
    ids = torch.empty(tokens, topk, dtype=torch.int32) if ids is None else ids
    plan_call = check_plan_call(ids, experts, block_size)
    route = rule_plan(call, logits, bias, True)
    return route_plan_launch.stage_launch(route, plan_launch(plan_call), ids)


@pytest.mark.parametrize("model", list(MODELS))
def test_the_stage_takes_one_launch_where_the_plan_fits_one(model):
    experts, topk, keywords = MODELS[model]
    for tokens in (1, 4, 16, 64, 256, ONE_LAUNCH_SLOTS // topk):
        stage = _stage(tokens, experts, topk, keywords)
        assert stage is not None and stage.launches == 1, tokens
        assert stage.plan.constexprs["STAGE"] == PER_BIN
        widest = stage.plan.constexprs["SLOTS"] == ONE_LAUNCH_SLOTS
        assert stage.num_warps == (route_plan_launch.WIDE_PLAN_WARPS if widest else
                                   max(stage.route.num_warps, stage.plan.num_warps))
    for tokens in (ONE_LAUNCH_SLOTS // topk + 1, 8192, 65536):
        stage = _stage(tokens, experts, topk, keywords)
        assert stage is not None and stage.launches == 2, tokens
        assert stage.plan.constexprs["STAGE"] == PLACE_CHUNK


def test_rounds_plans_and_strided_ids_keep_the_launches_apart():
    # softmax with a bias is the rounds kernel's: route() and the plan launch one after the other
    assert _stage(4, 64, 6, dict(scoring_func="softmax", biased=True)) is None
    strided = torch.empty(6, 4, dtype=torch.int32)[:, :2]
    assert _stage(4, 64, 2, {}, ids=strided[:4]) is None
    assert _stage(4, 64, 2, {}) is not None


def _poisoned_plan(tokens, topk, plan_call, block_size, ids_dtype=torch.int32):
    routed = (torch.full((tokens, topk), float("nan"), device=DEVICE),
              torch.full((tokens, topk), POISON, dtype=ids_dtype, device=DEVICE))
    if block_size is None:
        return moe_routing.RoutePlan(*routed, None, None, None,
                                     torch.full((plan_call.slots,), POISON, dtype=torch.int32, device=DEVICE),
                                     torch.full((plan_call.local_experts,), POISON, dtype=torch.int32, device=DEVICE))
    return moe_routing.RoutePlan(*routed, torch.full((plan_call.capacity,), POISON, dtype=torch.int32, device=DEVICE),
                                 torch.full((plan_call.blocks,), POISON, dtype=torch.int32, device=DEVICE),
                                 torch.full((1,), POISON, dtype=torch.int32, device=DEVICE), None, None)


CASES = [  # (what, tokens, experts, top-k, block size, route() keywords, map placement)
    ("DeepSeek-V3 grouped, blocks", 5, 256, 8, 16, dict(num_expert_group=8, topk_group=4), None),
    ("Moonlight, blocks of 1", 7, 64, 6, 1, {}, None),
    ("Moonlight, grouped layout", 7, 64, 6, None, {}, None),
    ("softmax, blocks of 64", 3, 128, 8, 64, dict(scoring_func="softmax"), None),
    ("map applied to the bins", 9, 64, 6, 16, {}, "ignore"),
    ("map applied to the values", 9, 64, 6, 16, {}, "afterwards"),
    ("map, grouped layout", 9, 64, 6, None, {}, "ignore"),
    ("padded rows, int64 ids", 6, 64, 6, 4, dict(padded=True, ids_dtype=torch.int64), None),
]


@pytest.mark.parametrize("what,tokens,experts,topk,block_size,keywords,placement", CASES, ids=[c[0] for c in CASES])
def test_the_one_launch_gives_route_then_the_plan(what, tokens, experts, topk, block_size, keywords, placement):
    keywords = dict(keywords)
    logits = random_logits(tokens, experts, torch.bfloat16, seed=tokens * experts)
    if keywords.get("scoring_func") != "softmax":
        keywords["correction_bias"] = random_bias(experts)
    if keywords.pop("padded", False):
        keywords["is_padding"] = torch.tensor([t % 3 == 1 for t in range(tokens)], device=DEVICE)
    expert_map = None
    if placement is not None:
        expert_map = torch.full((experts,), -1, dtype=torch.int32, device=DEVICE)
        expert_map[1::3] = torch.arange(len(range(1, experts, 3)), dtype=torch.int32, device=DEVICE)
    ignore = placement == "ignore" and block_size is not None
    ids_dtype = keywords.get("ids_dtype", torch.int32)
    plan_call = check_plan_call(torch.empty(tokens, topk, dtype=ids_dtype), experts, block_size,
                                None if expert_map is None else expert_map.cpu(), ignore_invalid_experts=ignore)
    out = _poisoned_plan(tokens, topk, plan_call, block_size, ids_dtype)
    counter = route_plan_launch.sync_counter(torch.device(DEVICE))
    launched = []
    real = route_plan_launch.launch_route_plan

    def spy(*args, **kwargs):
        launched.append(real(*args, **kwargs))
        return launched[-1]

    route_plan_launch.launch_route_plan = spy
    try:
        plan = moe_routing.route_plan(logits, topk, block_size=block_size, expert_map=expert_map,
                                      ignore_invalid_experts=ignore, out=out, **keywords)
    finally:
        route_plan_launch.launch_route_plan = real
    assert launched == [True]  # one launch served the stage
    assert all(p is o for p, o in zip(plan, out))
    weights, ids = moe_routing.route(logits, topk, **keywords)
    assert torch.equal(plan.weights, weights) and torch.equal(plan.ids, ids)
    if block_size is None:
        expected = reference.group(ids, experts, expert_map=expert_map)
        assert torch.equal(plan.permutation, expected[0]) and torch.equal(plan.offsets, expected[1])
    else:
        expected = reference.align(ids, block_size, experts, expert_map, False, ignore)
        assert all(torch.equal(a, b) for a, b in zip(plan[2:5], expected))
    assert counter.tolist() == [0]  # handed back for the next launch


@pytest.mark.parametrize("block_size", [16, None])
def test_the_two_launches_on_small_chunks(block_size):
    """The plan's counting inside the routing launch, then the placing launch: forced onto 64-slot chunks, the
    same bits as the one launch."""
    experts, topk, tokens = 64, 6, 45
    logits = random_logits(tokens, experts, torch.bfloat16, seed=11)
    bias = random_bias(experts)
    call = check_call(logits, topk, "sigmoid", bias, 1, 1, True, 1.0, None, None, torch.int32)
    plan_call = check_plan_call(torch.empty(tokens, topk, dtype=torch.int32), experts, block_size)
    one = plan_launch(plan_call)
    chunked = PlanLaunch(-(-plan_call.slots // 64), {**one.constexprs, "STAGE": PLACE_CHUNK, "SLOTS": 64}, 4)
    assert chunked.launches == 2 and COUNT != PLACE_CHUNK
    results = []
    for placing in (one, chunked):
        out = _poisoned_plan(tokens, topk, plan_call, block_size)
        layout = dict(permutation=out.permutation, offsets=out.offsets) if block_size is None else dict(
            sorted_ids=out.sorted_token_ids, expert_ids=out.expert_ids, post_padded=out.num_tokens_post_padded)
        assert route_plan_launch.launch_route_plan(call, plan_call, logits, bias, out.weights, out.ids, None, None,
                                                   placing=placing, **layout)
        results.append(out)
    for a, b in zip(*results):
        assert (a is None and b is None) or torch.equal(a, b)
    weights, ids = moe_routing.route(logits, topk, correction_bias=bias)
    assert torch.equal(results[1].ids, ids) and torch.equal(results[1].weights, weights)
    if block_size is None:
        expected = reference.group(ids, experts)
        assert torch.equal(results[1].permutation, expected[0]) and torch.equal(results[1].offsets, expected[1])
    else:
        expected = reference.align(ids, block_size, experts)
        assert all(torch.equal(a, b) for a, b in zip(results[1][2:5], expected))
    assert route_plan_launch.sync_counter(torch.device(DEVICE)).tolist() == [0]


def test_calls_the_one_launch_does_not_take_still_give_route_then_the_plan():
    """A rounds plan (softmax with a bias) and ids into a strided buffer: route() then align(), the same result."""
    logits = random_logits(5, 64, torch.bfloat16, seed=3)
    bias = random_bias(64)
    plan = moe_routing.route_plan(logits, 6, scoring_func="softmax", correction_bias=bias, block_size=16)
    weights, ids = moe_routing.route(logits, 6, scoring_func="softmax", correction_bias=bias)
    assert torch.equal(plan.ids, ids) and torch.equal(plan.weights, weights)
    assert all(torch.equal(a, b) for a, b in zip(plan[2:5], reference.align(ids, 16, 64)))
    wide = torch.full((5, 12), POISON, dtype=torch.int32, device=DEVICE)
    call = check_plan_call(torch.empty(5, 6, dtype=torch.int32), 64, 16)
    out = _poisoned_plan(5, 6, call, 16)._replace(ids=wide[:, ::2])
    plan = moe_routing.route_plan(logits, 6, correction_bias=bias, block_size=16, out=out)
    weights, ids = moe_routing.route(logits, 6, correction_bias=bias)
    assert torch.equal(plan.ids, ids) and (wide[:, 1::2] == POISON).all()
    assert all(torch.equal(a, b) for a, b in zip(plan[2:5], reference.align(ids, 16, 64)))


def test_one_counter_a_stream():
    device = torch.device(DEVICE)
    assert route_plan_launch.sync_counter(device) is route_plan_launch.sync_counter(device)
    if DEVICE == "cuda":
        with torch.cuda.stream(torch.cuda.Stream()):
            other = route_plan_launch.sync_counter(device)
        assert other is not route_plan_launch.sync_counter(device) and other.tolist() == [0]
