"""route_plan in one launch (kernels/_route_plan.py): which calls take it, and that its weights, ids and plans are
route()'s and the literal reading of rule 9's, into poisoned buffers, for every layout and role of a map, int64
ids, a padded row, non-finite rows and ties, on the interpreter (and the GPU, where there is one)."""

import pytest
import torch

import moe_routing
from conftest import DEVICE, random_bias, random_logits
from moe_routing.call import RoutingCall
from moe_routing.kernels import route_plan_launch
from moe_routing.kernels._route_plan import ROUTE
from moe_routing.kernels.rules import choose_plan
from moe_routing.plan_call import ONE_LAUNCH_TOKENS, check_plan_call
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
    """The one-launch calls made while the test runs: the grids of the kernel's launches that route (the
    interpreter runs the routing and the plan as two launches; a GPU, as one)."""
    kernel = route_plan_launch.route_plan_kernel
    made = []

    class Counted:
        def __getitem__(self, grid):
            def run(*args, **kwargs):
                if kwargs["PARTS"] & ROUTE:
                    made.append(grid)
                return kernel[grid](*args, **kwargs)
            return run

        def warmup(self, *args, **kwargs):
            return kernel.warmup(*args, **kwargs)

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
    assert one_launches == [(tokens,)]
    _check(plan, logits, topk, kwargs, block_size)


@pytest.mark.parametrize("block_size,expert_map", [(None, None), (16, None), (5, "round robin"), (None, "contiguous")])
def test_one_launch_counting_in_several_chunks(block_size, expert_map, one_launches, monkeypatch):
    """Programs read every slot's bin a few slots at a time past the small plans' tile: with 8 and 16, 11 tokens of
    6 slots take 5 reads of 16, programs' own slots straddling two of them; a padded row and a row of ties."""
    monkeypatch.setattr(route_plan_launch, "COUNT_FEW", 8)
    monkeypatch.setattr(route_plan_launch, "COUNT_SLOTS", 16)
    experts, topk, tokens = 64, 6, 11
    kwargs = _kwargs("moonlight", experts)
    padding = torch.zeros(tokens, dtype=torch.bool, device=DEVICE)
    padding[4] = True
    kwargs["is_padding"] = padding
    the_map = None if expert_map is None else maps(experts)[expert_map]
    logits = random_logits(tokens, experts, torch.bfloat16, seed=13)
    logits[7, :] = 0.25  # a row of ties
    plan = moe_routing.route_plan(logits, topk, block_size=block_size, expert_map=the_map,
                                  ignore_invalid_experts=block_size is not None and the_map is not None, **kwargs)
    assert one_launches == [(tokens,)]
    _check(plan, logits, topk, kwargs, block_size, the_map, block_size is not None and the_map is not None)


@pytest.mark.parametrize("block_size", [1, 3, 64, 256])
def test_one_launch_at_every_block_size(block_size, one_launches):
    experts, topk = 256, 8
    kwargs = _kwargs("deepseek-v3", experts)
    logits = random_logits(1, experts, torch.bfloat16, seed=block_size)
    plan = moe_routing.route_plan(logits, topk, block_size=block_size, **kwargs)
    assert one_launches == [(1,)]
    _check(plan, logits, topk, kwargs, block_size)


@pytest.mark.parametrize("block_size,ignore", [(None, False), (16, True), (16, False), (3, True)])
@pytest.mark.parametrize("placement", ["contiguous", "round robin", "none held"])
def test_one_launch_with_an_expert_map(placement, block_size, ignore, one_launches):
    experts, topk = 64, 6
    expert_map = maps(experts)[placement]
    kwargs = _kwargs("moonlight", experts)
    logits = random_logits(1, experts, torch.bfloat16, seed=3)
    plan = moe_routing.route_plan(logits, topk, block_size=block_size, expert_map=expert_map,
                                  ignore_invalid_experts=ignore, **kwargs)
    assert one_launches == [(1,)]
    _check(plan, logits, topk, kwargs, block_size, expert_map, ignore)
    if block_size is None:
        assert plan.offsets.shape == (max(int(expert_map.max()) + 1, 0),)


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("layout", ["blocks", "grouped"])
def test_one_launch_into_poisoned_buffers_with_int64_ids(layout, padded, one_launches):
    """Every entry of the caller's buffers written (the sentinel and -1 past the used ones, up to the buffers'
    ends), a padded row dropped from the plan, int64 ids, float32 logits, pad_sorted_ids."""
    experts, topk, tokens = 256, 8, 1
    kwargs = _kwargs("deepseek-v3", experts)
    kwargs.update(is_padding=torch.tensor([padded], device=DEVICE), ids_dtype=torch.int64)
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
    assert one_launches == [(1,)] and all(p is o for p, o in zip(plan, out))
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
    """A row of NaN logits, one of infinite logits (the routing's exact redo inside the program) and one of equal
    logits (ties to the lower index) give route()'s ids and the rule's plan."""
    experts, topk = 256, 8
    kwargs = _kwargs("deepseek-v3", experts)
    logits = random_logits(1, experts, torch.bfloat16, seed=9)
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
    assert one_launches == [(1,), (1,)]


def test_which_calls_take_one_launch(one_launches, monkeypatch):
    """Calls of up to ONE_LAUNCH_TOKENS tokens (here made 4) the bitonic kernel routes; the rounds kernel's calls
    (softmax with a bias) and larger calls take route() and then the plan kernel, with the same results."""
    from moe_routing import plan as plan_module

    for module in (plan_module, route_plan_launch):
        monkeypatch.setattr(module, "ONE_LAUNCH_TOKENS", 4)
    experts, topk = 64, 6
    bias = random_bias(experts)
    logits = random_logits(5, experts, seed=1)
    larger = moe_routing.route_plan(logits, topk, block_size=16)
    moe_routing.route_plan(random_logits(1, experts, seed=1), topk, scoring_func="softmax", correction_bias=bias,
                           block_size=16)
    assert one_launches == []
    _check(larger, logits, topk, {}, 16)
    logits = logits[:4]
    plan = moe_routing.route_plan(logits, topk, block_size=16)
    assert one_launches == [(4,)]
    _check(plan, logits, topk, {}, 16)
    assert route_plan_launch.one_launch_ok(RoutingCall(256, experts, topk, 0, 1, 1, True, 1.0)) is False


def test_the_one_launch_tile():
    """The rule's own plan (route()'s binary at decode) up to ONE_LAUNCH_TOKENS tokens; None for the rounds kernel
    and larger calls."""
    for experts, topk in ((256, 8), (64, 6), (384, 8)):
        call = RoutingCall(1, experts, topk, 0, 1, 1, True, 1.0)
        rule = choose_plan(call, biased=True)
        assert all(route_plan_launch.one_launch_tile(rule, tokens) is rule
                   for tokens in range(1, ONE_LAUNCH_TOKENS + 1))
        assert route_plan_launch.one_launch_tile(rule, ONE_LAUNCH_TOKENS + 1) is None
        assert route_plan_launch.one_launch_tile(rule, 0) is None
        assert route_plan_launch.one_launch_tiles(rule) == [(ONE_LAUNCH_TOKENS, rule)]
    softmax_biased = choose_plan(RoutingCall(1, 64, 6, 1, 1, 1, True, 1.0), biased=True)
    assert softmax_biased.name == "rounds" and route_plan_launch.one_launch_tile(softmax_biased, 1) is None


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


def test_a_launch_takes_one_only_where_every_program_can_be_resident(monkeypatch):
    """At most half of what the multiprocessors hold by threads, registers and shared memory; a compute unit a
    program on AMD."""
    from types import SimpleNamespace

    gpu = SimpleNamespace(multi_processor_count=10, max_threads_per_multi_processor=2048,
                          regs_per_multiprocessor=65536, shared_memory_per_multiprocessor=100_000)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: gpu)
    monkeypatch.setattr(torch.version, "hip", None)

    def compiled(warps, registers, shared):
        return SimpleNamespace(metadata=SimpleNamespace(num_warps=warps, shared=shared), n_regs=registers)

    resident = route_plan_launch._all_resident
    # one warp, 255 registers: 8 a multiprocessor by registers, so at most 40 programs
    assert resident(compiled(1, 255, 0), 40, 0) and not resident(compiled(1, 255, 0), 41, 0)
    # one warp, 32 registers: 64 by threads (2048 / 32), so at most 320
    assert resident(compiled(1, 32, 0), 320, 0) and not resident(compiled(1, 32, 0), 321, 0)
    # shared memory: 40 KB a program, 2 a multiprocessor, so at most 10
    assert resident(compiled(1, 32, 40_000), 10, 0) and not resident(compiled(1, 32, 40_000), 11, 0)
    # four warps, 128 registers: 4 a multiprocessor, so at most 20
    assert resident(compiled(4, 128, 0), 20, 0) and not resident(compiled(4, 128, 0), 21, 0)
    monkeypatch.setattr(torch.version, "hip", "6.4")
    assert resident(compiled(1, 32, 0), 10, 0) and not resident(compiled(1, 32, 0), 11, 0)


@pytest.mark.skipif(DEVICE != "cuda", reason="the direct launcher, the counters and CUDA graphs need a GPU")
@pytest.mark.parametrize("tokens", [1, 48, 256])
def test_one_launch_direct_path_counters_and_cuda_graph_replay(tokens):
    """A key's second call takes the C launcher directly and gives the same plan, 200 calls in a row too; the
    stream's counters are back at 0 after them; two graphs captured on one stream take counters of their own and
    replay on new logits as the eager call gives it."""
    experts, topk = 256, 8
    kwargs = _kwargs("deepseek-v3", experts)
    logits = random_logits(tokens, experts, torch.bfloat16, seed=11)
    route_plan_launch.forget_route_plan_launchers()
    first = moe_routing.route_plan(logits, topk, block_size=16, **kwargs)
    assert any(type(entry) is tuple for entry in route_plan_launch._launchers.values())
    _check(first, logits, topk, kwargs, 16)
    for _ in range(200):
        again = moe_routing.route_plan(logits, topk, block_size=16, **kwargs)
        assert all(torch.equal(a, b) for a, b in zip(first[:5], again[:5]))
    torch.cuda.synchronize()
    pair, _ = route_plan_launch._stream_pairs[(logits.get_device(), torch.cuda.current_stream().cuda_stream)]
    assert pair.tolist() == [0, 0, 0, 0]
    outs = [moe_routing.RoutePlan(*(torch.empty_like(t) for t in first[:5]), None, None) for _ in range(2)]
    stream = torch.cuda.Stream()
    graphs = [torch.cuda.CUDAGraph() for _ in outs]
    with torch.cuda.stream(stream):
        moe_routing.route_plan(logits, topk, block_size=16, out=outs[0], **kwargs)
        pairs_before = route_plan_launch._pools[logits.get_device()][1]
        for graph, out in zip(graphs, outs):
            with torch.cuda.graph(graph, stream=stream):
                moe_routing.route_plan(logits, topk, block_size=16, out=out, **kwargs)
    assert route_plan_launch._pools[logits.get_device()][1] == pairs_before + 2
    logits.copy_(random_logits(tokens, experts, torch.bfloat16, seed=12))
    for graph in graphs:
        graph.replay()
    torch.cuda.synchronize()
    for out in outs:
        _check(out, logits, topk, kwargs, 16)
