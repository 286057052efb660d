"""route_plan in one launch (kernels/_route_plan.py): which calls take it, and that its weights, ids and plans are
route()'s and the literal reading of rule 9's, into poisoned buffers, for every layout and role of a map, int64
ids, a padded row, non-finite rows and ties, on the interpreter (and the GPU, where there is one)."""

import pytest
import torch

import moe_routing
from conftest import DEVICE, random_bias, random_logits
from moe_routing.call import RoutingCall
from moe_routing.kernels import route_plan_launch
from moe_routing.kernels.rules import choose_plan
from moe_routing.plan_call import check_plan_call
from test_align_and_group import POISON, assert_blocks, literal_group, maps, poisoned

MODELS = {  # (experts, topk, route() keywords)
    "deepseek-v3": (256, 8, dict(num_expert_group=8, topk_group=4, routed_scaling_factor=2.5)),
    "moonlight": (64, 6, dict(routed_scaling_factor=2.446)),
    "qwen3": (128, 8, dict(scoring_func="softmax")),
    "deepseek-v4": (256, 6, dict(scoring_func="sqrtsoftplus", routed_scaling_factor=1.5)),
    "kimi-k2": (384, 8, dict()),
}


@pytest.fixture
def one_launches(monkeypatch):
    """The one-program launches made while the test runs: the kernel's launches are counted."""
    kernel = route_plan_launch.route_plan_kernel
    made = []

    class Counted:
        def __getitem__(self, grid):
            made.append(grid)
            return kernel[grid]

    monkeypatch.setattr(route_plan_launch, "route_plan_kernel", Counted())
    route_plan_launch.forget_route_plan_launchers()  # every call through the binder, so that each is counted
    yield made
    route_plan_launch.forget_route_plan_launchers()


def _kwargs(model, experts):
    kwargs = dict(MODELS[model][2])
    if kwargs.get("scoring_func") != "softmax":
        kwargs["correction_bias"] = random_bias(experts, scale=0.1)
    return kwargs


def _check(plan, logits, topk, kwargs, block_size, expert_map=None, ignore=False, pad=False):
    """The plan's weights and ids are route()'s (bitwise), its layout the literal reading of rule 9's."""
    experts = logits.shape[1]
    weights, ids = moe_routing.route(logits, topk, **kwargs)
    assert torch.equal(plan.weights, weights) and torch.equal(plan.ids, ids)
    if block_size is None:
        permutation, offsets = literal_group(ids.cpu(), experts, None if expert_map is None else expert_map.cpu())
        assert plan.permutation.tolist() == permutation and plan.offsets.tolist() == offsets
        assert plan.sorted_token_ids is None and plan.expert_ids is None and plan.num_tokens_post_padded is None
    else:
        assert_blocks(plan[2:5], ids, block_size, experts, expert_map, ignore, pad)
        assert plan.permutation is None and plan.offsets is None


@pytest.mark.parametrize("block_size", [None, 16])
@pytest.mark.parametrize("tokens", [1, 3])
@pytest.mark.parametrize("model", list(MODELS))
def test_one_launch_is_route_then_the_rule(model, tokens, block_size, one_launches):
    experts, topk, _ = MODELS[model]
    kwargs = _kwargs(model, experts)
    logits = random_logits(tokens, experts, torch.bfloat16, seed=tokens * 7 + experts)
    plan = moe_routing.route_plan(logits, topk, block_size=block_size, **kwargs)
    assert len(one_launches) == (tokens == 1)
    _check(plan, logits, topk, kwargs, block_size)


@pytest.mark.parametrize("block_size", [1, 3, 64, 256])
def test_one_launch_at_every_block_size(block_size, one_launches):
    at_block_size(block_size, 1)
    assert len(one_launches) == 1


def at_block_size(block_size: int, tokens: int) -> None:
    """route_plan of ``tokens`` DeepSeek-V3 rows at ``block_size``: route()'s ids and the rule's plan."""
    experts, topk = 256, 8
    kwargs = _kwargs("deepseek-v3", experts)
    logits = random_logits(tokens, experts, torch.bfloat16, seed=block_size)
    plan = moe_routing.route_plan(logits, topk, block_size=block_size, **kwargs)
    _check(plan, logits, topk, kwargs, block_size)


@pytest.mark.parametrize("block_size,ignore", [(None, False), (16, True), (16, False), (3, True)])
@pytest.mark.parametrize("placement", ["contiguous", "round robin", "none held"])
def test_one_launch_with_an_expert_map(placement, block_size, ignore, one_launches):
    with_an_expert_map(placement, block_size, ignore, 1)
    assert len(one_launches) == 1


def with_an_expert_map(placement: str, block_size: int | None, ignore: bool, tokens: int) -> None:
    """route_plan of ``tokens`` Moonlight rows with a map of ``placement``: route()'s ids and the rule's plan, the
    offsets as long as the map's local experts."""
    experts, topk = 64, 6
    expert_map = maps(experts)[placement]
    kwargs = _kwargs("moonlight", experts)
    logits = random_logits(tokens, experts, torch.bfloat16, seed=3)
    plan = moe_routing.route_plan(logits, topk, block_size=block_size, expert_map=expert_map,
                                  ignore_invalid_experts=ignore, **kwargs)
    _check(plan, logits, topk, kwargs, block_size, expert_map, ignore)
    if block_size is None:
        assert plan.offsets.shape == (max(int(expert_map.max()) + 1, 0),)


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("layout", ["blocks", "grouped"])
def test_one_launch_into_poisoned_buffers_with_int64_ids(layout, padded, one_launches):
    into_poisoned_buffers(layout, padded, 1)
    assert len(one_launches) == 1


def into_poisoned_buffers(layout: str, padded: bool, tokens: int) -> None:
    """route_plan of ``tokens`` DeepSeek-V3 rows into poisoned caller buffers: every entry written (the sentinel
    and -1 past the used ones, up to the buffers' ends), padded rows dropped from the plan, int64 ids, float32
    logits, pad_sorted_ids."""
    experts, topk = 256, 8
    kwargs = _kwargs("deepseek-v3", experts)
    kwargs.update(is_padding=torch.tensor([padded] * tokens, device=DEVICE), ids_dtype=torch.int64)
    logits = random_logits(tokens, experts, torch.float32, seed=5)
    ids = torch.zeros(tokens, topk, dtype=torch.int64, device=DEVICE)
    block_size = 16 if layout == "blocks" else None
    call = check_plan_call(ids, experts, block_size, pad_sorted_ids=layout == "blocks")
    routed = (torch.full((tokens, topk), float("nan"), device=DEVICE),
              torch.full((tokens, topk), POISON, dtype=torch.int64, device=DEVICE))
    if layout == "blocks":
        # buffers longer than the capacity: the sentinel and -1 reach their ends
        sorted_ids, expert_ids, used = poisoned(call)
        longer = (torch.cat([sorted_ids, sorted_ids[:5]]), torch.cat([expert_ids, expert_ids[:3]]), used)
        out = moe_routing.RoutePlan(*routed, *longer, None, None)
    else:
        out = moe_routing.RoutePlan(*routed, None, None, None,
                                    torch.full((call.slots,), POISON, dtype=torch.int32, device=DEVICE),
                                    torch.full((experts,), POISON, dtype=torch.int32, device=DEVICE))
    plan = moe_routing.route_plan(logits, topk, block_size=block_size, pad_sorted_ids=layout == "blocks", out=out,
                                  **kwargs)
    assert all(p is o for p, o in zip(plan, out))
    assert (plan.ids == -1).all().item() == padded and (plan.weights == 0).all().item() == padded
    if layout == "blocks":
        sentinel = tokens * topk
        assert plan.sorted_token_ids[-5:].tolist() == [sentinel] * 5 and plan.expert_ids[-3:].tolist() == [-1] * 3
        assert (int(plan.num_tokens_post_padded) == 0) == padded
        trimmed = moe_routing.RoutePlan(plan.weights, plan.ids, plan.sorted_token_ids[:-5], plan.expert_ids[:-3],
                                        plan.num_tokens_post_padded, None, None)
        _check(trimmed, logits, topk, kwargs, block_size, pad=True)
    else:
        _check(plan, logits, topk, kwargs, block_size)


@pytest.mark.parametrize("row", ["nan", "-inf and inf", "ties"])
def test_one_launch_on_non_finite_rows_and_ties(row, one_launches):
    on_a_non_finite_row_or_ties(row, 1)
    assert len(one_launches) == 2


def on_a_non_finite_row_or_ties(row: str, tokens: int) -> None:
    """A first row of NaN logits, one of infinite logits (the routing's exact redo inside the program) or one of
    equal logits (ties to the lower index), among ``tokens`` rows: route()'s ids and the rule's plan, both
    layouts."""
    experts, topk = 256, 8
    kwargs = _kwargs("deepseek-v3", experts)
    logits = random_logits(tokens, experts, torch.bfloat16, seed=9)
    if row == "nan":
        logits[0] = float("nan")
    elif row == "-inf and inf":
        logits[0, ::3] = float("-inf")
        logits[0, 5] = float("inf")
    else:
        logits[:] = 0.5
        kwargs["correction_bias"] = torch.zeros(experts, device=DEVICE)
    for block_size in (None, 16):
        plan = moe_routing.route_plan(logits, topk, block_size=block_size, **kwargs)
        _check(plan, logits, topk, kwargs, block_size)


def test_which_calls_take_one_launch(one_launches):
    """Calls of one token the bitonic kernel routes; the rounds kernel's calls (softmax with a bias) and larger calls
    take route() and then the plan kernel (64 experts: never the grid kernel)."""
    experts, topk = 64, 6
    bias = random_bias(experts)
    moe_routing.route_plan(random_logits(2, experts, seed=1), topk, block_size=16)
    moe_routing.route_plan(random_logits(1, experts, seed=1), topk, scoring_func="softmax", correction_bias=bias,
                           block_size=16)
    assert one_launches == []
    moe_routing.route_plan(random_logits(1, experts, seed=1), topk, block_size=16)
    assert len(one_launches) == 1


def test_the_one_program_tile():
    """The rule's own plan (route()'s binary at decode) at one token; None for the rounds kernel and larger calls."""
    for experts, topk in ((256, 8), (64, 6), (384, 8)):
        call = RoutingCall(1, experts, topk, 0, 1, 1, True, 1.0)
        rule = choose_plan(call, biased=True)
        assert route_plan_launch.one_program_tile(rule, 1) is rule
        assert route_plan_launch.one_program_tile(rule, 2) is None
        assert route_plan_launch.one_program_tile(rule, 0) is None
        assert route_plan_launch.one_launch_tiles(rule)[0] == (False, 1, rule)
    softmax_biased = choose_plan(RoutingCall(1, 64, 6, 1, 1, 1, True, 1.0), biased=True)
    assert softmax_biased.name == "rounds" and route_plan_launch.one_program_tile(softmax_biased, 1) is None


def test_bad_one_launch_calls_raise_naming_the_argument():
    """The one-launch path validates as route() and align() do, with their messages."""
    logits = random_logits(1, 64, seed=1)
    with pytest.raises(ValueError, match="block_size"):
        moe_routing.route_plan(logits, 6, block_size=0)
    with pytest.raises(ValueError, match="pad_sorted_ids"):
        moe_routing.route_plan(logits, 6, pad_sorted_ids=True)
    with pytest.raises(ValueError, match="topk"):
        moe_routing.route_plan(logits, 65, block_size=16)
    with pytest.raises(ValueError, match="expert_map"):
        moe_routing.route_plan(logits, 6, block_size=16, expert_map=torch.zeros(63, dtype=torch.int32, device=DEVICE))
    short = moe_routing.RoutePlan(torch.empty(1, 6, device=DEVICE), torch.empty(1, 6, dtype=torch.int32, device=DEVICE),
                                  torch.empty(3, dtype=torch.int32, device=DEVICE),
                                  torch.empty(64, dtype=torch.int32, device=DEVICE),
                                  torch.empty(1, dtype=torch.int32, device=DEVICE), None, None)
    with pytest.raises(ValueError, match="sorted_token_ids"):
        moe_routing.route_plan(logits, 6, block_size=16, out=short)
    with pytest.raises(TypeError, match="out"):
        moe_routing.route_plan(logits, 6, block_size=16, out=short[:5])


@pytest.mark.skipif(DEVICE != "cuda", reason="the direct launcher and CUDA graphs need a GPU")
def test_one_launch_direct_path_and_cuda_graph_replay():
    """A key's second call takes the C launcher directly and gives the same plan; a captured one-launch
    route_plan replays on new logits as the eager call gives it."""
    experts, topk, tokens = 256, 8, 1
    kwargs = _kwargs("deepseek-v3", experts)
    logits = random_logits(tokens, experts, torch.bfloat16, seed=11)
    route_plan_launch.forget_route_plan_launchers()
    first = moe_routing.route_plan(logits, topk, block_size=16, **kwargs)
    assert any(type(entry) is tuple for entry in route_plan_launch._launchers.values())
    second = moe_routing.route_plan(logits, topk, block_size=16, **kwargs)
    assert all(torch.equal(a, b) for a, b in zip(first[:5], second[:5]))
    out = moe_routing.RoutePlan(*(torch.empty_like(t) for t in first[:5]), None, None)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        moe_routing.route_plan(logits, topk, block_size=16, out=out, **kwargs)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            moe_routing.route_plan(logits, topk, block_size=16, out=out, **kwargs)
    logits.copy_(random_logits(tokens, experts, torch.bfloat16, seed=12))
    graph.replay()
    torch.cuda.synchronize()
    _check(out, logits, topk, kwargs, 16)
