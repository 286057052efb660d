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
