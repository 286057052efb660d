"""route_plan's grid kernel (kernels/_route_plan_grid.py): which calls take it, and that its weights, ids and plans
are route()'s and the literal reading of rule 9's, into poisoned buffers, for every layout and role of a map, int64
ids, padded rows, non-finite rows and ties, several count blocks and launches one after another sharing a workspace,
on the interpreter (and the GPU, where there is one: the direct launcher, the wait and CUDA graphs)."""

import pytest
import torch

import moe_routing
from conftest import DEVICE, random_logits
from moe_routing import plan as plan_module
from moe_routing import plan_call
from moe_routing.call import RoutingCall
from moe_routing.kernels import route_plan_launch, route_plan_workspace
from moe_routing.kernels._route_plan_grid import HEADER_ENTRIES as HEADER, ROUTE
from moe_routing.kernels.rules import choose_plan
from moe_routing.plan_call import ONE_LAUNCH_TOKENS
from test_align_and_group import maps
from test_route_plan_one_launch import (MODELS, _check, _kwargs, at_block_size, into_poisoned_buffers,
                                        on_a_non_finite_row_or_ties, with_an_expert_map)

def every_size(monkeypatch):
    """The grid kernel for every call of 2 to ONE_LAUNCH_TOKENS tokens, with or without a map (its rule's table aside:
    the kernel's own tests)."""
    monkeypatch.setattr(plan_call, "ONE_LAUNCH_FROM", ((1 << 30, 2),))
    may_take, grid_tile = plan_module.may_take_one_launch, route_plan_launch.grid_tile
    monkeypatch.setattr(plan_module, "may_take_one_launch",
                        lambda tokens, experts, mapped: may_take(tokens, experts, False))
    monkeypatch.setattr(route_plan_launch, "grid_tile",
                        lambda routing, tokens, mapped=False: grid_tile(routing, tokens))


@pytest.fixture
def one_launches(monkeypatch):
    """The grid kernel's calls made while the test runs (at every size, maps too: ``every_size``): the grids of its
    launches that route (the interpreter runs the routing and the plan as two launches; a GPU, as one)."""
    kernel = route_plan_launch.route_plan_grid_kernel
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

    monkeypatch.setattr(route_plan_launch, "route_plan_grid_kernel", Counted())
    every_size(monkeypatch)
    route_plan_launch.forget_route_plan_launchers()  # every call through the binder, so that each is counted
    yield made
    route_plan_launch.forget_route_plan_launchers()


@pytest.mark.parametrize("block_size", [None, 16])
@pytest.mark.parametrize("tokens", [2, 3])
@pytest.mark.parametrize("model", list(MODELS))
def test_grid_launch_is_route_then_the_rule(model, tokens, block_size, one_launches):
    experts, topk, _ = MODELS[model]
    kwargs = _kwargs(model, experts)
    logits = random_logits(tokens, experts, torch.bfloat16, seed=tokens * 7 + experts)
    plan = moe_routing.route_plan(logits, topk, block_size=block_size, **kwargs)
    assert one_launches == [(tokens,)]
    _check(plan, logits, topk, kwargs, block_size)


@pytest.mark.parametrize("block_size,expert_map", [(None, None), (16, None), (5, "round robin"), (None, "contiguous")])
def test_grid_launch_in_several_count_blocks(block_size, expert_map, one_launches, monkeypatch):
    """Programs count their slots in blocks past the first: with blocks of 16 slots (two programs of 6 slots), 11
    tokens take 6 count blocks, the last one short; a padded row and a row of ties."""
    monkeypatch.setattr(route_plan_launch, "COUNT_TILE", 16)
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


def test_launches_one_after_another_share_the_stream_workspace(one_launches, monkeypatch):
    """Each launch counts in one region and zeroes the other, which the launch before it used. Calls of 11, 3, 2 and
    11 tokens (6, 2, 1 and 6 count blocks of 16 slots) in a row give the rule's plans, and after each the header
    names the region the next launch takes and the extent of counts it used; after the last, the next region is
    zero and the other holds the last launch's totals and blocks' counts."""
    monkeypatch.setattr(route_plan_launch, "COUNT_TILE", 16)
    monkeypatch.setattr(route_plan_workspace, "_workspaces", {})  # a new workspace: these launches its first
    experts, topk = 64, 6
    kwargs = _kwargs("moonlight", experts)
    headers = []
    for tokens in (11, 3, 2, 11):
        route_plan_launch.forget_route_plan_launchers()  # through Triton's binder, so that each launch is counted
        logits = random_logits(tokens, experts, torch.bfloat16, seed=tokens)
        plan = moe_routing.route_plan(logits, topk, block_size=16, **kwargs)
        _check(plan, logits, topk, kwargs, 16)
        (work, _, region), = route_plan_workspace._workspaces.values()
        headers.append(work[:4].tolist())
    assert one_launches == [(11,), (3,), (2,), (11,)]
    bins = 128  # 64 experts and the dropped slots' bin, rounded up to a power of two
    # the parity of the next launch's region, its arrivals, the other's, the extent of counts the last launch used
    assert [header[0] for header in headers] == [1, 0, 1, 0]
    assert [header[3] for header in headers] == [7 * bins, 3 * bins, bins, 7 * bins]
    assert headers[3][2] == 0  # the arrivals of the region the next launch takes
    work = work.cpu()
    assert (work[HEADER:HEADER + region] == 0).all()
    last = work[HEADER + region:HEADER + 2 * region]
    ids = plan.ids.long().cpu()
    assert last[:bins].tolist() == torch.bincount(ids.flatten(), minlength=bins).tolist()
    for block in range(6):  # two tokens (programs) a block
        counts = torch.bincount(ids[2 * block:2 * block + 2].flatten(), minlength=bins)
        assert last[(block + 1) * bins:(block + 2) * bins].tolist() == counts.tolist()
    assert (last[7 * bins:] == 0).all()


@pytest.mark.parametrize("block_size", [1, 3, 64, 256])
def test_grid_launch_at_every_block_size(block_size, one_launches):
    at_block_size(block_size, 2)
    assert one_launches == [(2,)]


@pytest.mark.parametrize("block_size,ignore", [(None, False), (16, True), (16, False), (3, True)])
@pytest.mark.parametrize("placement", ["contiguous", "round robin", "none held"])
def test_grid_launch_with_an_expert_map(placement, block_size, ignore, one_launches):
    with_an_expert_map(placement, block_size, ignore, 3)
    assert one_launches == [(3,)]


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("layout", ["blocks", "grouped"])
def test_grid_launch_into_poisoned_buffers_with_int64_ids(layout, padded, one_launches):
    into_poisoned_buffers(layout, padded, 2)
    assert one_launches == [(2,)]


@pytest.mark.parametrize("row", ["nan", "-inf and inf", "ties"])
def test_grid_launch_on_non_finite_rows_and_ties(row, one_launches):
    """Beside a row of normal logits."""
    on_a_non_finite_row_or_ties(row, 2)
    assert one_launches == [(2,), (2,)]


def test_which_calls_take_the_grid_kernel(monkeypatch):
    """The rule's table (here made: above 128 experts from 4 tokens to ONE_LAUNCH_TOKENS, made 5; never at 128 or
    fewer), without a map. Other calls (3 tokens, 6, a map, 64 experts) take route() and then the plan kernel, with
    the same results."""
    launched = []
    kernel = route_plan_launch.route_plan_grid_kernel

    class Counted:
        def __getitem__(self, grid):
            launched.append(grid)
            return kernel[grid]

    monkeypatch.setattr(route_plan_launch, "route_plan_grid_kernel", Counted())
    monkeypatch.setattr(plan_call, "ONE_LAUNCH_FROM", ((128, None), (1 << 30, 4)))
    monkeypatch.setattr(plan_call, "ONE_LAUNCH_TOKENS", 5)
    monkeypatch.setattr(route_plan_launch, "ONE_LAUNCH_TOKENS", 5)
    route_plan_launch.forget_route_plan_launchers()
    experts, topk = 384, 8
    for tokens, expert_map in ((3, None), (6, None), (4, maps(experts)["contiguous"])):
        logits = random_logits(tokens, experts, seed=tokens)
        plan = moe_routing.route_plan(logits, topk, block_size=16, expert_map=expert_map)
        _check(plan, logits, topk, {}, 16, expert_map)
    assert launched == []
    for tokens in (4, 5):
        logits = random_logits(tokens, experts, seed=tokens)
        plan = moe_routing.route_plan(logits, topk, block_size=16)
        _check(plan, logits, topk, {}, 16)
    assert launched == [(4,), (4,), (5,), (5,)]  # the interpreter: two parts a launch
    moe_routing.route_plan(random_logits(5, 64, seed=1), 6, block_size=16)
    assert len(launched) == 4


def test_the_grid_tile():
    """The rule's own plan (route()'s binary at decode) from ONE_LAUNCH_FROM's token count for the experts up to
    ONE_LAUNCH_TOKENS, without a map; None for the rounds kernel, other sizes, maps and calls of more than
    COUNT_BLOCKS count blocks."""
    for experts, topk, first in ((256, 8, 256), (64, 6, None), (128, 8, None), (384, 8, 64), (160, 6, 256)):
        rule = choose_plan(RoutingCall(1, experts, topk, 0, 1, 1, True, 1.0), biased=True)
        assert plan_call.one_launch_from(experts) == first
        taking = [tokens for tokens in range(0, ONE_LAUNCH_TOKENS + 2)
                  if route_plan_launch.grid_tile(rule, tokens) is rule]
        assert taking == ([] if first is None else list(range(first, ONE_LAUNCH_TOKENS + 1)))
        assert all(plan_call.may_take_one_launch(tokens, experts, False) == (tokens in taking or tokens == 1)
                   for tokens in range(1, ONE_LAUNCH_TOKENS + 2))
        assert route_plan_launch.grid_tile(rule, ONE_LAUNCH_TOKENS, mapped=True) is None
        assert not plan_call.may_take_one_launch(ONE_LAUNCH_TOKENS, experts, True)
        expected = [(False, 1, rule)] + ([] if first is None else [(True, first, rule)])
        assert route_plan_launch.one_launch_tiles(rule) == expected
    softmax_biased = choose_plan(RoutingCall(1, 384, 6, 1, 1, 1, True, 1.0), biased=True)
    assert softmax_biased.name == "rounds" and route_plan_launch.grid_tile(softmax_biased, 64) is None
    # 32 slots a token: 8 programs a count block of 256 slots, so 128 tokens (16 blocks) but not 129
    wide = choose_plan(RoutingCall(1, 512, 32, 0, 1, 1, True, 1.0), biased=True)
    assert route_plan_launch.own_slots(wide) == 32 and route_plan_launch.count_blocks(wide, 129) == 17
    assert route_plan_launch.grid_tile(wide, 128) is wide and route_plan_launch.grid_tile(wide, 129) is None


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
@pytest.mark.parametrize("tokens", [48, 256])
def test_grid_launch_direct_path_workspaces_and_cuda_graph_replay(tokens, monkeypatch):
    """A key's second call takes the C launcher directly and gives the same plan, 200 calls in a row too; the
    stream's workspace has its next region at 0 after them; two graphs captured on one stream take a workspace each
    (the second holding two calls, of two token counts, one after another) and replay on new logits, twice, as the
    eager calls give it."""
    every_size(monkeypatch)
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
    device = logits.get_device()
    work, _, region = route_plan_workspace._workspaces[(device, torch.cuda.current_stream().cuda_stream, None)]
    parity = int(work[0])
    assert (work[HEADER + parity * region:HEADER + (parity + 1) * region] == 0).all() and int(work[1 + parity]) == 0
    other = random_logits(3, experts, torch.bfloat16, seed=14)
    plans = [first, first, moe_routing.route_plan(other, topk, block_size=16, **kwargs)]
    outs = [moe_routing.RoutePlan(*(torch.empty_like(t) for t in plan[:5]), None, None) for plan in plans]
    stream = torch.cuda.Stream()
    graphs = [torch.cuda.CUDAGraph() for _ in range(2)]
    with torch.cuda.stream(stream):
        moe_routing.route_plan(logits, topk, block_size=16, out=outs[0], **kwargs)
        used_before = route_plan_workspace._pools[device][1]
        with torch.cuda.graph(graphs[0], stream=stream):
            moe_routing.route_plan(logits, topk, block_size=16, out=outs[0], **kwargs)
        with torch.cuda.graph(graphs[1], stream=stream):
            moe_routing.route_plan(logits, topk, block_size=16, out=outs[1], **kwargs)
            moe_routing.route_plan(other, topk, block_size=16, out=outs[2], **kwargs)
    largest = route_plan_launch.region_entries(512, route_plan_launch.COUNT_BLOCKS)
    assert route_plan_workspace._pools[device][1] == used_before + 2 * route_plan_workspace.sized(largest)
    for seed in (12, 13):
        logits.copy_(random_logits(tokens, experts, torch.bfloat16, seed=seed))
        other.copy_(random_logits(3, experts, torch.bfloat16, seed=seed + 10))
        for graph in graphs:
            graph.replay()
        torch.cuda.synchronize()
        for out, inputs in zip(outs, (logits, logits, other)):
            _check(out, inputs, topk, kwargs, 16)
