"""Dispatch plans (docs/semantics.md, rule 9): ``align`` (blocks) and ``group`` (grouped) against a literal loop
reading of the rule and against the reference, ``route_plan`` against route() + align / group, and every bad call.

The kernel runs in Triton's interpreter here; the two-launch path (chunks of slots) is forced onto small calls with
a small chunk, so that every stage of the kernel runs on a few hundred slots."""

import pytest
import torch
import triton

import moe_routing
from conftest import DEVICE, random_bias, random_logits
from moe_routing import reference
from moe_routing.kernels.plan_launch import (CHUNK_CLASSES, ONE_LAUNCH_SLOTS, SLOT_CLASSES, TABLE_ENTRIES,
                                             WIDE_ONE_LAUNCH_SLOTS, PlanLaunch, chunk_bins, chunk_slots, chunk_warps, launch_plan,
                                             plan_launch, slot_warps)
from moe_routing.kernels._plan import BLOCKS, GROUPED, PER_BIN, PLACE_CHUNK
from moe_routing.plan_call import check_plan_call

POISON = -77


def literal_blocks(ids, block_size, experts, expert_map=None, ignore_invalid=False, pad_sorted_ids=False):
    """Rule 9's blocks layout read literally: a loop over the slots, then over the experts in ascending order."""
    flat = ids.reshape(-1).tolist()
    slots = len(flat)
    by_bin = {}
    for slot, expert in enumerate(flat):
        if not 0 <= expert < experts:
            continue
        bin_ = expert
        if expert_map is not None and ignore_invalid:
            bin_ = int(expert_map[expert])
            if bin_ < 0:
                continue
        by_bin.setdefault(bin_, []).append(slot)
    sorted_ids, expert_ids = [], []
    for bin_ in sorted(by_bin):
        members = by_bin[bin_]
        padded = -(-len(members) // block_size) * block_size
        sorted_ids += members + [slots] * (padded - len(members))
        value = int(expert_map[bin_]) if expert_map is not None and not ignore_invalid else bin_
        expert_ids += [value] * (padded // block_size)
    capacity = slots + experts * (block_size - 1)
    if pad_sorted_ids:
        capacity = -(-capacity // block_size) * block_size
    if slots < experts:
        capacity = min(slots * block_size, capacity)
    used = len(sorted_ids)
    return (sorted_ids + [slots] * (capacity - used), expert_ids + [-1] * (-(-capacity // block_size) - len(expert_ids)),
            used)


def literal_group(ids, experts, expert_map=None):
    flat = ids.reshape(-1).tolist()
    local = experts if expert_map is None else max(int(expert_map.max()) + 1, 0)
    by_bin, dropped = {}, []
    for slot, expert in enumerate(flat):
        bin_ = expert if 0 <= expert < experts else -1
        if bin_ >= 0 and expert_map is not None:
            bin_ = int(expert_map[expert])
        (by_bin.setdefault(bin_, []) if bin_ >= 0 else dropped).append(slot)
    permutation, offsets, end = [], [], 0
    for bin_ in range(local):
        permutation += by_bin.get(bin_, [])
        end += len(by_bin.get(bin_, []))
        offsets.append(end)
    return permutation + dropped, offsets


def random_ids(tokens, topk, experts, seed, dtype=torch.int32, invalid=True):
    """Routing-like ids (distinct within a row), with padded rows (-1) and ids >= E where ``invalid``."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(experts, generator=gen)[:topk] for _ in range(tokens)]) if tokens else \
        torch.empty(0, topk, dtype=torch.int64)
    if invalid and tokens:
        ids[::5] = -1  # padded rows
        ids[1::7, 0] = experts + 3
    return ids.to(dtype).to(DEVICE)


def maps(experts):
    """Expert-parallel maps as vLLM builds them: this rank holds a contiguous quarter, or every fourth expert
    (round robin); plus one holding none."""
    share = max(experts // 4, 1)
    contiguous = torch.full((experts,), -1, dtype=torch.int32)
    contiguous[share:2 * share] = torch.arange(share, dtype=torch.int32)
    round_robin = torch.full((experts,), -1, dtype=torch.int32)
    round_robin[1::4] = torch.arange(len(range(1, experts, 4)), dtype=torch.int32)
    return {"contiguous": contiguous.to(DEVICE), "round robin": round_robin.to(DEVICE),
            "none held": torch.full((experts,), -1, dtype=torch.int32, device=DEVICE)}


def poisoned(call, scatter=False):
    out = (torch.full((call.capacity,), POISON, dtype=torch.int32, device=DEVICE),
           torch.full((call.blocks,), POISON, dtype=torch.int32, device=DEVICE),
           torch.full((1,), POISON, dtype=torch.int32, device=DEVICE))
    return out + ((torch.full((call.slots, 1), POISON, dtype=torch.int32, device=DEVICE),) if scatter else ())


def assert_blocks(result, ids, block_size, experts, expert_map=None, ignore=False, pad=False):
    sorted_ids, expert_ids, used = literal_blocks(ids.cpu(), block_size, experts,
                                                  None if expert_map is None else expert_map.cpu(), ignore, pad)
    assert result[0].tolist() == sorted_ids
    assert result[1].tolist() == expert_ids
    assert result[2].tolist() == [used]
    if len(result) == 4:
        assert result[3].shape == (ids.numel(), 1)
        kept = set(s for s in sorted_ids if s < ids.numel())
        assert result[3].view(-1).tolist() == [s if s in kept else -1 for s in range(ids.numel())]


SHAPES = [(1, 8, 256, 16), (3, 6, 64, 16), (13, 8, 256, 1), (7, 5, 37, 4), (64, 8, 64, 64), (31, 8, 128, 256),
          (2, 1, 257, 32), (0, 8, 64, 16)]
# int64 ids on every shape but the two other calls of 256 experts or more (one program a bin: the widest grids),
# whose kernel code is that of (1, 8, 256, 16) with int64 ids
INT64_SHAPES = [shape for shape in SHAPES if shape not in ((13, 8, 256, 1), (2, 1, 257, 32))]


@pytest.mark.parametrize("tokens,topk,experts,block_size,dtype",
                         [(*shape, torch.int32) for shape in SHAPES] + [(*shape, torch.int64) for shape in INT64_SHAPES],
                         ids=str)
def test_align_is_the_rule(tokens, topk, experts, block_size, dtype):
    ids = random_ids(tokens, topk, experts, seed=tokens + experts, dtype=dtype)
    call = check_plan_call(ids, experts, block_size)
    for pad in (False, True):
        out = poisoned(call._replace(pad_sorted_ids=pad), scatter=True)
        result = moe_routing.align(ids, block_size, experts, None, pad, return_scatter_idx=True, out=out)
        assert all(r is o for r, o in zip(result, out))
        assert_blocks(result, ids, block_size, experts, pad=pad)
        expected = reference.align(ids, block_size, experts, None, pad, return_scatter_idx=True)
        assert all(torch.equal(r, e) for r, e in zip(result, expected))


@pytest.mark.parametrize("placement", ["contiguous", "round robin", "none held"])
@pytest.mark.parametrize("ignore", [True, False], ids=["ignore invalid", "map afterwards"])
def test_align_with_an_expert_map(placement, ignore):
    experts, block_size = 64, 16
    ids = random_ids(29, 6, experts, seed=5)
    expert_map = maps(experts)[placement]
    result = moe_routing.align(ids, block_size, experts, expert_map, False, ignore, return_scatter_idx=ignore)
    assert_blocks(result, ids, block_size, experts, expert_map, ignore)
    if ignore:  # blocks hold local ids only
        used = result[2].item() // block_size
        assert (result[1][:used] >= 0).all() and (result[1][used:] == -1).all()


@pytest.mark.parametrize("tokens,topk,experts", [(1, 8, 256), (13, 8, 64), (40, 6, 37), (0, 4, 16), (3, 2, 13)],
                         ids=str)
@pytest.mark.parametrize("placement", [None, "contiguous", "round robin", "none held"])
def test_group_is_the_rule(tokens, topk, experts, placement):
    expert_map = None if placement is None else maps(experts)[placement]
    ids = random_ids(tokens, topk, experts, seed=experts + tokens, dtype=torch.int64)
    call = check_plan_call(ids, experts, None, expert_map)
    out = (torch.full((call.slots,), POISON, dtype=torch.int32, device=DEVICE),
           torch.full((call.local_experts,), POISON, dtype=torch.int32, device=DEVICE))
    permutation, offsets = moe_routing.group(ids, experts, expert_map=expert_map, out=out)
    assert permutation is out[0] and offsets is out[1]
    expected = literal_group(ids.cpu(), experts, None if expert_map is None else expert_map.cpu())
    assert (permutation.tolist(), offsets.tolist()) == expected
    assert all(torch.equal(a, b) for a, b in zip((permutation, offsets),
                                                  reference.group(ids, experts, expert_map=expert_map)))


def test_the_two_launch_path_on_small_chunks():
    """Chunks of 64 slots (several programs, each counting its chunk, then sorting and placing it by the earlier
    chunks' counts): the same plans as one program a bin, for both layouts, with and without a map."""
    experts = 64
    ids = random_ids(45, 6, experts, seed=3)
    for block_size, expert_map in ((16, None), (4, maps(experts)["round robin"]), (None, None),
                                   (None, maps(experts)["contiguous"])):
        call = check_plan_call(ids, experts, block_size, expert_map, ignore_invalid_experts=True)
        one = plan_launch(call)
        assert one.launches == 1 and one.constexprs["STAGE"] == PER_BIN
        chunked = PlanLaunch(-(-call.slots // 64), {**one.constexprs, "STAGE": PLACE_CHUNK, "SLOTS": 64,
                                                    "BINS": chunk_bins(experts),
                                                    "LAYOUT": BLOCKS if block_size else GROUPED}, 4)
        results = []
        for launch in (one, chunked):
            if block_size:
                out = poisoned(call, scatter=True)
                launch_plan(call, ids, expert_map, *out, launch=launch)
            else:
                out = (torch.full((call.slots,), POISON, dtype=torch.int32, device=DEVICE),
                       torch.full((call.local_experts,), POISON, dtype=torch.int32, device=DEVICE))
                launch_plan(call, ids, expert_map, permutation=out[0], offsets=out[1], launch=launch)
            results.append(out)
        for a, b in zip(*results):
            assert torch.equal(a, b), (block_size, expert_map is not None)
        if block_size:
            assert_blocks(results[0], ids, block_size, experts, expert_map, True)


def test_one_launch_slot_classes_warps_and_limits():
    """A one-launch program loads the smallest slot class holding the plan, its histogram a bin an expert rounded
    up to a power of two, on warps by the class and the bins; 385-512 experts take one launch up to 2048 slots."""
    for experts, bins in ((64, 64), (128, 128), (256, 256), (384, 512), (37, 64), (512, 512)):
        limit = WIDE_ONE_LAUNCH_SLOTS if bins >= 512 else ONE_LAUNCH_SLOTS
        for slots in (1, 32, 33, 128, 129, 256, 257, 512, 1024, 1025, 2048, 2049, 4096):
            launch = plan_launch(check_plan_call(torch.zeros(slots, 1, dtype=torch.int32), experts, 16))
            if slots > limit:
                assert launch.launches == 2 and launch.constexprs["BINS"] == triton.next_power_of_2(experts + 1)
                continue
            assert launch.launches == 1 and launch.programs == experts + 1
            assert launch.constexprs["BINS"] == bins
            assert launch.constexprs["SLOTS"] == min(size for size in SLOT_CLASSES if size >= slots)
            assert launch.num_warps == slot_warps(launch.constexprs["SLOTS"], bins)
    # the H100 sweep's choices (benchmarks/NOTES.md, plan v2.3)
    assert [slot_warps(size, 256) for size in SLOT_CLASSES] == [1, 1, 2, 4, 4, 4, 8]
    assert [slot_warps(size, 128) for size in SLOT_CLASSES] == [1, 1, 2, 4, 4, 8, 8]


def test_plans_take_one_launch_up_to_the_limit_and_chunks_beyond():
    small = check_plan_call(torch.zeros(512, 8, dtype=torch.int32), 256, 16)
    large = check_plan_call(torch.zeros(65536, 8, dtype=torch.int32), 256, 16)
    one, chunked = plan_launch(small), plan_launch(large)
    assert small.slots <= ONE_LAUNCH_SLOTS and one.launches == 1
    assert one.programs == 256 + 1 and one.constexprs["SLOTS"] == ONE_LAUNCH_SLOTS  # a program a bin, then the dropped
    for slots in (0, 1, 255, 256, 257, 1024, 1025, ONE_LAUNCH_SLOTS):
        call = check_plan_call(torch.zeros(slots, 1, dtype=torch.int32), 64, 16)
        assert plan_launch(call).constexprs["SLOTS"] == min(size for size in SLOT_CLASSES if size >= slots)
    # beyond: the smallest chunk class whose programs each sum at most TABLE_ENTRIES histogram entries, else the
    # largest class; warps by the histogram's bins, at least 4 for 2048-slot chunks
    for experts, bins, warps in ((64, 128, 2), (128, 256, 4), (256, 512, 8), (384, 512, 8), (1024, 2048, 8)):
        most = TABLE_ENTRIES // bins  # programs a class may take
        for slots in (ONE_LAUNCH_SLOTS + 1, 256 * most, 256 * most + 1, 1024 * most, 1024 * most + 1, 2048 * most,
                      2048 * most + 1, 10 ** 7):
            slots = max(slots, ONE_LAUNCH_SLOTS + 1)
            launch = plan_launch(check_plan_call(torch.zeros(slots, 1, dtype=torch.int32), experts, 16))
            chunk = launch.constexprs["SLOTS"]
            assert chunk == chunk_slots(slots, bins) and chunk in CHUNK_CLASSES and launch.launches == 2
            assert launch.constexprs["BINS"] == bins and launch.num_warps == chunk_warps(bins, chunk)
            assert launch.num_warps == (max(warps, 4) if chunk == 2048 else warps)
            assert launch.programs == -(-slots // chunk)
            assert launch.programs * bins <= TABLE_ENTRIES or chunk == CHUNK_CLASSES[-1]
            smaller = CHUNK_CLASSES[:CHUNK_CLASSES.index(chunk)]
            assert all(-(-slots // size) * bins > TABLE_ENTRIES for size in smaller)
        assert chunk_slots(10 ** 7, bins) == CHUNK_CLASSES[-1]
    assert chunk_slots(ONE_LAUNCH_SLOTS + 1, 512) == CHUNK_CLASSES[0]
    # the classes the H100 sweep chose (benchmarks/NOTES.md, plan v2.2): DeepSeek-V3 at 1024, 8192 and 65536 tokens,
    # Moonlight at 8192 and 65536
    assert [chunk_slots(tokens * 8, 512) for tokens in (1024, 8192, 65536)] == [256, 1024, 2048]
    assert [chunk_slots(tokens * 6, 128) for tokens in (8192, 65536)] == [256, 1024]
    mapped = check_plan_call(torch.zeros(4, 8, dtype=torch.int32), 64, None, torch.arange(64) % 8 - 1)
    assert plan_launch(mapped).programs == 7 + 1  # a program a local expert, then the dropped


@pytest.mark.parametrize("block_size", [None, 16])
@pytest.mark.parametrize("case", ["deepseek-v3", "softmax", "padded int64"])
def test_route_plan_is_route_then_the_plan(case, block_size):
    experts, topk = (64, 6) if case == "softmax" else (256, 8)
    logits = random_logits(9, experts, torch.bfloat16, seed=experts)
    kwargs = dict(correction_bias=random_bias(experts), num_expert_group=8, topk_group=4, routed_scaling_factor=2.5)
    if case == "softmax":
        kwargs = dict(scoring_func="softmax")
    if case == "padded int64":
        kwargs.update(is_padding=torch.tensor([i % 3 == 0 for i in range(9)], device=DEVICE), ids_dtype=torch.int64)
    plan = moe_routing.route_plan(logits, topk, block_size=block_size, **kwargs)
    weights, ids = moe_routing.route(logits, topk, **kwargs)
    assert torch.equal(plan.weights, weights) and torch.equal(plan.ids, ids)
    if block_size is None:
        assert plan.sorted_token_ids is None and plan.expert_ids is None and plan.num_tokens_post_padded is None
        expected = moe_routing.group(ids, experts)
        assert torch.equal(plan.permutation, expected[0]) and torch.equal(plan.offsets, expected[1])
    else:
        assert plan.permutation is None and plan.offsets is None
        expected = moe_routing.align(ids, block_size, experts)
        assert all(torch.equal(a, b) for a, b in zip(plan[2:5], expected))
    assert plan == type(plan)(*plan)  # a NamedTuple
    expected = reference.route_plan(logits.cpu(), topk, block_size=block_size,
                                    **{k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()})
    torch.testing.assert_close(plan.weights.cpu(), expected.weights, rtol=0, atol=5e-6)  # float32 rounding
    assert all((a is None and b is None) or torch.equal(a.cpu(), b) for a, b in zip(plan[1:], expected[1:]))


def test_route_plan_writes_into_caller_buffers():
    logits = random_logits(5, 64, torch.float32, seed=1)
    call = check_plan_call(torch.zeros(5, 6, dtype=torch.int32), 64, 16)
    blocks = poisoned(call)
    out = moe_routing.RoutePlan(torch.full((5, 6), float("nan"), device=DEVICE),
                                torch.full((5, 6), POISON, dtype=torch.int32, device=DEVICE), *blocks, None, None)
    plan = moe_routing.route_plan(logits, 6, block_size=16, out=out)
    assert all(p is o for p, o in zip(plan, out))
    assert not torch.isnan(plan.weights).any() and (plan.ids != POISON).all()
    assert_blocks(plan[2:5], plan.ids, 16, 64)


IDS = torch.zeros(4, 2, dtype=torch.int32, device=DEVICE)
BAD_ALIGN = [  # (what, arguments, keywords, error, the argument named)
    ("float ids", (IDS.float(), 16, 8), {}, TypeError, "topk_ids"),
    ("1-D ids", (IDS.view(-1), 16, 8), {}, ValueError, "topk_ids"),
    ("ids not a tensor", ([[0, 1]], 16, 8), {}, TypeError, "topk_ids"),
    ("block size 0", (IDS, 0, 8), {}, ValueError, "block_size"),
    ("block size a float", (IDS, 16.0, 8), {}, TypeError, "block_size"),
    ("no experts", (IDS, 16, 0), {}, ValueError, "num_experts"),
    ("map too short", (IDS, 16, 8, torch.zeros(7, dtype=torch.int32, device=DEVICE)), {}, ValueError, "expert_map"),
    ("map of floats", (IDS, 16, 8, torch.zeros(8, device=DEVICE)), {}, TypeError, "expert_map"),
    ("map entry out of range", (IDS, 16, 8, torch.full((8,), 8, dtype=torch.int32, device=DEVICE)), {}, ValueError,
     "expert_map"),
    ("map entry below -1", (IDS, 16, 8, torch.full((8,), -2, dtype=torch.int32, device=DEVICE)), {}, ValueError,
     "expert_map"),
    ("flag not a bool", (IDS, 16, 8, None, 1), {}, TypeError, "pad_sorted_ids"),
    ("scatter with an unapplied map", (IDS, 16, 8, torch.zeros(8, dtype=torch.int32, device=DEVICE)),
     dict(return_scatter_idx=True), ValueError, "return_scatter_idx"),
    ("out too small", (IDS, 16, 8), dict(out=(torch.empty(7, dtype=torch.int32, device=DEVICE),
                                             torch.empty(64, dtype=torch.int32, device=DEVICE),
                                             torch.empty(1, dtype=torch.int32, device=DEVICE))), ValueError,
     "sorted_token_ids"),
    ("out of int64", (IDS, 16, 8), dict(out=(torch.empty(128, dtype=torch.int64, device=DEVICE),
                                            torch.empty(64, dtype=torch.int32, device=DEVICE),
                                            torch.empty(1, dtype=torch.int32, device=DEVICE))), TypeError,
     "sorted_token_ids"),
    ("out missing one", (IDS, 16, 8), dict(out=(torch.empty(128, dtype=torch.int32, device=DEVICE),)), TypeError,
     "out"),
    ("expert_ids too small", (IDS, 16, 8), dict(out=(torch.empty(128, dtype=torch.int32, device=DEVICE),
                                                    torch.empty(1, dtype=torch.int32, device=DEVICE),
                                                    torch.empty(1, dtype=torch.int32, device=DEVICE))), ValueError,
     "expert_ids"),
]


@pytest.mark.parametrize("entry", [moe_routing.align, reference.align], ids=["op", "reference"])
@pytest.mark.parametrize("what,args,kwargs,error,argument", BAD_ALIGN, ids=[b[0] for b in BAD_ALIGN])
def test_bad_align_calls_raise_naming_the_argument(entry, what, args, kwargs, error, argument):
    if entry is reference.align and "out" in kwargs:
        pytest.skip("the reference checks no buffers")
    with pytest.raises(error, match=argument):
        entry(*args, **kwargs)


BAD_GROUP = [
    ("float ids", (IDS.double(), 8), {}, TypeError, "topk_ids"),
    ("experts a float", (IDS, 8.0), {}, TypeError, "num_experts"),
    ("map on wrong length", (IDS, 8), dict(expert_map=torch.zeros(9, dtype=torch.int64, device=DEVICE)), ValueError,
     "expert_map"),
    ("permutation too short", (IDS, 8), dict(out=(torch.empty(7, dtype=torch.int32, device=DEVICE),
                                                 torch.empty(8, dtype=torch.int32, device=DEVICE))), ValueError,
     "permutation"),
    ("offsets of int64", (IDS, 8), dict(out=(torch.empty(8, dtype=torch.int32, device=DEVICE),
                                            torch.empty(8, dtype=torch.int64, device=DEVICE))), TypeError, "offsets"),
]


@pytest.mark.parametrize("what,args,kwargs,error,argument", BAD_GROUP, ids=[b[0] for b in BAD_GROUP])
def test_bad_group_calls_raise_naming_the_argument(what, args, kwargs, error, argument):
    with pytest.raises(error, match=argument):
        moe_routing.group(*args, **kwargs)


def test_bad_route_plan_calls_raise_naming_the_argument():
    logits = random_logits(2, 16)
    with pytest.raises(ValueError, match="block_size"):
        moe_routing.route_plan(logits, 2, block_size=0)
    with pytest.raises(ValueError, match="pad_sorted_ids"):
        moe_routing.route_plan(logits, 2, pad_sorted_ids=True)
    with pytest.raises(TypeError, match="out"):
        moe_routing.route_plan(logits, 2, out=(None,))
    with pytest.raises(TypeError, match="topk"):
        moe_routing.route_plan(logits, 2.0)


def test_align_compiles_under_torch_compile():
    ids = random_ids(6, 4, 32, seed=2)
    compiled = torch.compile(lambda t: moe_routing.align(t, 8, 32), fullgraph=True, backend="eager")
    assert all(torch.equal(a, b) for a, b in zip(compiled(ids), moe_routing.align(ids, 8, 32)))
    grouped = torch.compile(lambda t: moe_routing.group(t, 32), fullgraph=True, backend="eager")
    assert all(torch.equal(a, b) for a, b in zip(grouped(ids), moe_routing.group(ids, 32)))


def test_a_map_is_read_again_when_changed_in_place_or_replaced():
    """E_local comes from the map's entries, read once per map and in-place version: an in-place change, or a new
    map where a freed one was (the allocator reuses its memory), is read again."""
    ids = random_ids(3, 2, 16, seed=4, invalid=False)
    expert_map = torch.arange(16, dtype=torch.int32, device=DEVICE)
    assert moe_routing.group(ids, 16, expert_map=expert_map)[1].numel() == 16
    expert_map[8:] = -1
    assert moe_routing.group(ids, 16, expert_map=expert_map)[1].numel() == 8
    del expert_map
    replaced = torch.full((16,), -1, dtype=torch.int32, device=DEVICE)
    assert moe_routing.group(ids, 16, expert_map=replaced)[1].numel() == 0


@pytest.mark.skipif(DEVICE != "cuda", reason="CUDA graphs need a GPU")
def test_plans_replay_in_a_cuda_graph():
    """align, group and route_plan into caller buffers are captured in a CUDA graph (no host sync: a map is read
    once before capture) and a replay on new ids gives the eager plans."""
    experts, topk = 256, 8
    logits = random_logits(37, experts, torch.bfloat16, seed=7)
    bias = random_bias(experts)
    expert_map = maps(experts)["round robin"]
    kwargs = dict(correction_bias=bias, num_expert_group=8, topk_group=4)
    ids = moe_routing.route(logits, topk, **kwargs)[1].clone()
    call = check_plan_call(ids, experts, 16, expert_map, ignore_invalid_experts=True)
    blocks = poisoned(call)
    grouped = (torch.empty(call.slots, dtype=torch.int32, device=DEVICE),
               torch.empty(call.local_experts, dtype=torch.int32, device=DEVICE))
    routed = moe_routing.RoutePlan(torch.empty(37, topk, device=DEVICE),
                                   torch.empty(37, topk, dtype=torch.int32, device=DEVICE), *poisoned(call), None, None)

    def stage():
        moe_routing.align(ids, 16, experts, expert_map, False, True, out=blocks)
        moe_routing.group(ids, experts, expert_map=expert_map, out=grouped)
        moe_routing.route_plan(logits, topk, block_size=16, expert_map=expert_map, ignore_invalid_experts=True,
                               out=routed, **kwargs)

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        stage()  # compiles outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            stage()
    logits.copy_(random_logits(37, experts, torch.bfloat16, seed=8))
    ids.copy_(moe_routing.route(logits, topk, **kwargs)[1])
    graph.replay()
    torch.cuda.synchronize()
    expected = moe_routing.align(ids, 16, experts, expert_map, False, True)
    assert all(torch.equal(a, b) for a, b in zip(blocks, expected))
    assert all(torch.equal(a, b) for a, b in zip(grouped, moe_routing.group(ids, experts, expert_map=expert_map)))
    assert torch.equal(routed.ids, ids) and all(torch.equal(a, b) for a, b in zip(routed[2:5], expected))


@pytest.mark.parametrize("placement", ["contiguous", "round robin"])
@pytest.mark.parametrize("block_size,ignore", [(None, False), (16, True), (16, False)])
def test_route_plan_with_an_expert_parallel_map(placement, block_size, ignore):
    """An EP rank's plan: route_plan(..., expert_map=) equals route() then align / group with that map, for a
    contiguous and a round-robin placement, and with both roles of the map in the blocks layout."""
    experts, topk = 64, 6
    logits = random_logits(11, experts, torch.bfloat16, seed=1 if placement == "contiguous" else 2)
    expert_map = maps(experts)[placement]
    kwargs = dict(correction_bias=random_bias(experts), routed_scaling_factor=2.446)
    plan = moe_routing.route_plan(logits, topk, block_size=block_size, expert_map=expert_map,
                                  ignore_invalid_experts=ignore, **kwargs)
    _, ids = moe_routing.route(logits, topk, **kwargs)
    assert torch.equal(plan.ids, ids)
    if block_size is None:
        expected = reference.group(ids, experts, expert_map=expert_map)
        assert torch.equal(plan.permutation, expected[0]) and torch.equal(plan.offsets, expected[1])
        assert plan.offsets.shape == (int(expert_map.max()) + 1,)  # E_local: the map's largest entry + 1
    else:
        expected = reference.align(ids, block_size, experts, expert_map, False, ignore)
        assert all(torch.equal(a, b) for a, b in zip(plan[2:5], expected))
        used = int(plan.num_tokens_post_padded) // block_size
        local = set(plan.expert_ids[:used].tolist())
        assert local <= (set(range(16)) if ignore else set(range(16)) | {-1}), local


def test_the_direct_path_keys_what_triton_specialises_on():
    """The direct path's key tells apart what selects another binary beyond the call: the ids' and the map's dtypes,
    each pointer's 16-byte alignment; a buffer length past int32 takes Triton's own binder (no key)."""
    from moe_routing.kernels.plan_launch import _direct_key, plan_arguments

    def key_of(ids, expert_map=None, offset=0):
        call = check_plan_call(ids, 64, 16, expert_map, ignore_invalid_experts=expert_map is not None)
        room = torch.empty(call.capacity + offset, dtype=torch.int32)
        out = (room[offset:], torch.empty(call.blocks, dtype=torch.int32), torch.empty(1, dtype=torch.int32))
        args, _ = plan_arguments(call, ids, expert_map, *out, None, None, None, plan_launch(call))
        return _direct_key(call, 0, args), args

    ids = torch.zeros(5, 3, dtype=torch.int32)
    base, args = key_of(ids)
    assert base == key_of(ids.clone())[0]
    assert key_of(ids.long())[0] != base
    assert key_of(ids, torch.arange(64, dtype=torch.int64))[0] != key_of(ids, torch.arange(64, dtype=torch.int32))[0]
    unaligned = key_of(ids, offset=1)[0]
    # sorted_token_ids is the fourth pointer, and stands in for those the call does not use (the map, the workspace,
    # the scatter index, the grouped buffers); the ids, expert_ids and num_tokens_post_padded stay aligned
    assert unaligned[:-1] == base[:-1] and base[-1] == 0
    assert unaligned[-1] == sum(1 << bit for bit in (1, 2, 3, 6, 7, 8))
    wide = args[:13] + (2**31,) + args[14:]
    assert _direct_key(check_plan_call(ids, 64, 16), 0, wide) is None


@pytest.mark.skipif(DEVICE != "cuda", reason="the direct path launches on a GPU")
def test_the_direct_path_gives_the_binders_plans():
    """A key's second call takes the direct path (the C launchers of the first call's binaries) and writes the same
    plan as the reference, for both launch paths, int64 ids and map, unaligned buffers and the scatter index."""
    from moe_routing.kernels import plan_launch as plans

    plans.forget_plan_launchers()
    expert_map = maps(256)["round robin"].long()
    for tokens, dtype, offset in ((3, torch.int32, 0), (37, torch.int64, 1), (700, torch.int32, 3)):
        ids = torch.randint(-1, 256, (tokens, 8), dtype=dtype, device=DEVICE)
        for emap, ignore in ((None, False), (expert_map, True), (expert_map, False)):
            call = check_plan_call(ids, 256, 16, emap, ignore_invalid_experts=ignore)
            scatter = emap is None or ignore
            expected = reference.align(ids, 16, 256, emap, False, ignore, return_scatter_idx=scatter)
            for attempt in range(3):
                room = torch.full((call.capacity + offset,), POISON, dtype=torch.int32, device=DEVICE)
                out = (room[offset:],) + poisoned(call, scatter)[1:]
                moe_routing.align(ids, 16, 256, emap, False, ignore, return_scatter_idx=scatter, out=out)
                assert all(torch.equal(a, b) for a, b in zip(out, expected)), (tokens, dtype, ignore, attempt)
            permutation, offsets = moe_routing.group(ids, 256, expert_map=emap)
            grouped = reference.group(ids, 256, expert_map=emap)
            assert torch.equal(permutation, grouped[0]) and torch.equal(offsets, grouped[1])
    assert plans._direct and all(direct is not None for direct in plans._direct.values())
