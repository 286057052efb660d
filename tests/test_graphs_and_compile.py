"""The op inside a captured CUDA graph and under torch.compile(fullgraph=True)."""

import pytest
import torch

import moe_routing
from conftest import DEVICE, ON_GPU, random_bias, random_logits, route_and_check

CASES = [  # (tokens, experts, topk, groups, topk_group, scoring)
    (8, 256, 8, 8, 4, "sigmoid"), (5, 384, 8, 1, 1, "sigmoid"), (3, 128, 8, 1, 1, "softmax"),
]


@pytest.mark.skipif(not ON_GPU, reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("tokens,experts,topk,groups,topk_group,scoring", CASES, ids=str)
def test_captured_graph_replays_on_new_inputs(tokens, experts, topk, groups, topk_group, scoring):
    tokens *= 64
    logits = random_logits(tokens, experts, torch.bfloat16, seed=1)
    bias = random_bias(experts, seed=2)
    out = (torch.empty(tokens, topk, device=DEVICE), torch.empty(tokens, topk, dtype=torch.int32, device=DEVICE))
    kwargs = dict(scoring_func=scoring, correction_bias=bias, num_expert_group=groups, topk_group=topk_group)
    moe_routing.route(logits, topk, out=out, **kwargs)  # compile and load outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        moe_routing.route(logits, topk, out=out, **kwargs)
        allocated = moe_routing.route(logits, topk, **kwargs)  # outputs allocated inside the capture
    for seed in range(3, 6):
        logits.copy_(random_logits(tokens, experts, torch.bfloat16, seed=seed))
        out[0].fill_(float("nan"))
        out[1].fill_(-7)
        graph.replay()
        expected = moe_routing.route(logits, topk, **kwargs)
        assert torch.equal(out[1], expected[1]) and torch.equal(out[0], expected[0])
        assert torch.equal(allocated[1], expected[1]) and torch.equal(allocated[0], expected[0])
        route_and_check(logits, topk, **kwargs)


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("tokens,experts,topk,groups,topk_group,scoring", CASES, ids=str)
def test_torch_compile_fullgraph(tokens, experts, topk, groups, topk_group, scoring, dynamic):
    torch._dynamo.reset()  # each case compiles the same code object afresh (no recompile-limit carry-over)
    bias = random_bias(experts, seed=2)
    kwargs = dict(scoring_func=scoring, correction_bias=bias, num_expert_group=groups, topk_group=topk_group)

    def model_step(x):
        weights, ids = moe_routing.route(x * 1.0, topk, **kwargs)
        return weights * 2.0, ids

    # CPU: trace and run through aot_eager (the interpreter kernel has no inductor lowering to test)
    compiled = torch.compile(model_step, fullgraph=True, dynamic=dynamic, backend="inductor" if ON_GPU else "aot_eager")
    for t in (tokens, tokens + 3):
        logits = random_logits(t, experts, torch.bfloat16, seed=t)
        got = compiled(logits)
        expected = model_step(logits)
        assert torch.equal(got[1], expected[1]) and torch.equal(got[0], expected[0])


def test_reference_compiles_with_symbolic_sizes_and_scale():
    """The benchmark's compiled-reference arm: fullgraph, dynamic shapes and a symbolic scale."""
    torch._dynamo.reset()
    compiled = torch.compile(moe_routing.reference.route, fullgraph=True, dynamic=True,
                             backend="inductor" if ON_GPU else "aot_eager")
    bias = random_bias(256, seed=3)
    for tokens, scale in ((5, 2.5), (9, 1.5)):
        logits = random_logits(tokens, 256, torch.bfloat16, seed=tokens)
        kwargs = dict(correction_bias=bias, num_expert_group=8, topk_group=4, routed_scaling_factor=scale)
        got, expected = compiled(logits, 8, **kwargs), moe_routing.reference.route(logits, 8, **kwargs)
        assert torch.equal(got[1], expected[1])
        torch.testing.assert_close(got[0], expected[0], rtol=0, atol=1e-6)


def test_custom_op_fake_has_no_outputs():
    """The registered op mutates its buffers and returns nothing, so its fake is trivial."""
    schema = torch.ops.moe_routing.route_into.default._schema
    assert len(schema.returns) == 0
    assert [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write] == ["weights", "ids"]


@pytest.mark.skipif(not ON_GPU, reason="programmatic dependent launch needs a GPU")
@pytest.mark.parametrize("tokens", [1, 128, 8192])
def test_pdl_keeps_stream_order_with_the_kernels_around_it(tokens):
    """Kernels are launched with programmatic dependent launch on GPUs that have it (compute capability 9.0+): its
    programs may start while the previous kernel drains, so they must still read the logits that kernel writes, and the
    kernel after route() must read route's outputs. A chain in one stream, eager and replayed from a graph: a kernel
    writes the logits from one of several sources, route() routes them, kernels copy its outputs away; every step
    equals route() of its source alone."""
    from moe_routing.kernels.launch import programmatic_launch_ok

    assert programmatic_launch_ok(torch.cuda.current_device()) == (torch.cuda.get_device_capability() >= (9, 0))
    experts, topk = 256, 8
    sources = [random_logits(tokens, experts, torch.bfloat16, seed=seed) for seed in range(10, 16)]
    bias = random_bias(experts, seed=9)
    expected = [moe_routing.route(source, topk, correction_bias=bias) for source in sources]
    logits = torch.empty_like(sources[0])
    out = (torch.empty(tokens, topk, device=DEVICE), torch.empty(tokens, topk, dtype=torch.int32, device=DEVICE))
    copied = [(torch.empty_like(out[0]), torch.empty_like(out[1])) for _ in sources]

    def chain():
        for source, (weights, ids) in zip(sources, copied):
            torch.mul(source, 1, out=logits)  # a kernel writes the logits
            moe_routing.route(logits, topk, correction_bias=bias, out=out)
            torch.mul(out[0], 1, out=weights)  # kernels read the outputs
            torch.mul(out[1], 1, out=ids)

    def check():
        for (weights, ids), (want_weights, want_ids) in zip(copied, expected):
            assert torch.equal(ids, want_ids) and torch.equal(weights.view(torch.int32), want_weights.view(torch.int32))
            weights.fill_(float("nan"))
            ids.fill_(-7)

    chain()
    torch.cuda.synchronize()
    check()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain()
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        check()
