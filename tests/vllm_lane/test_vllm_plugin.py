"""The vLLM plugin against a real vLLM install (the CI lane `.ci/vllm-lane` runs these; skipped elsewhere).

Checks, for the installed vLLM: every patch point exists, register() patches it (twice is harmless),
the patched functions keep the replaced op's contract and equal the reference on CPU tensors under a
real vLLM forward context in CUDA-graph mode, and fall back to vLLM's op otherwise.
"""

import contextlib
import importlib

import pytest
import torch

pytest.importorskip("vllm.forward_context")  # the real vLLM, not a folder named vllm

from moe_routing import dispatch, reference  # noqa: E402
from moe_routing.integrations import vllm as plugin  # noqa: E402
from moe_routing.verify import verify  # noqa: E402

ROUTER = "vllm.model_executor.layers.fused_moe.router."


@pytest.fixture(scope="module", autouse=True)
def registered():
    first = plugin.register()
    second = plugin.register()  # vLLM calls general plugins in every process; re-entrant
    assert first == second
    yield first
    plugin.unregister()


@pytest.fixture(autouse=True)
def gate():
    before = dispatch.settings()
    dispatch.configure(devices=("cuda", "cpu"), grouped=False, eager=False, source_rows=True)
    dispatch.COUNTERS.clear()
    yield
    dispatch.configure(**before.__dict__)


def forward_context(mode: str, is_padding: torch.Tensor | None = None):
    from vllm.config import CUDAGraphMode
    from vllm.forward_context import ForwardContext, override_forward_context

    context = ForwardContext(no_compile_layers={}, attn_metadata={}, slot_mapping={},
                             cudagraph_runtime_mode=getattr(CUDAGraphMode, mode), is_padding=is_padding)
    return override_forward_context(context)


def test_every_site_is_found_and_patched(registered):
    assert set(registered) == {site.name for site in plugin.SITES + (plugin.WARMUP_SITE,)}
    assert all(status.startswith("patched") for status in registered.values()), registered
    for site in plugin.SITES + (plugin.WARMUP_SITE,):
        owner, name, current = plugin._resolve(site)
        assert hasattr(plugin._function_of(current), "__moe_routing_original__"), site.name


def test_routers_call_the_wrappers():
    """The routers look the functions up in their own modules: those names are the wrappers now."""
    grouped = importlib.import_module(ROUTER + "grouped_topk_router")
    bias = importlib.import_module(ROUTER + "fused_topk_bias_router")
    flat = importlib.import_module(ROUTER + "fused_topk_router")
    for function in (grouped.grouped_topk, grouped.fused_topk_bias, grouped.fused_topk, bias.fused_topk_bias,
                     flat.fused_topk):
        assert hasattr(function, "__moe_routing_original__"), function


def test_execution_mode_reads_vllm_forward_context():
    assert plugin.execution_mode() is None
    for mode in ("NONE", "PIECEWISE", "FULL"):
        with forward_context(mode):
            assert plugin.execution_mode() == mode


def assert_routes_like_the_reference(weights, ids, logits, topk, ids_dtype=torch.int32, **kwargs):
    """Same float64 judgement as the main suite (route() may run the kernels in Triton's interpreter here)."""
    expected = reference.route(logits, topk, ids_dtype=ids_dtype, **kwargs)
    assert weights.dtype == torch.float32 and ids.dtype == ids_dtype and ids.shape == expected[1].shape
    verdict = verify(weights, ids, logits, topk, **kwargs)
    assert verdict.ok and verdict.near_tie_rows == 0, verdict
    assert torch.equal(ids, expected[1])
    torch.testing.assert_close(weights, expected[0], rtol=0, atol=2e-6 * kwargs.get("routed_scaling_factor", 1.0))


def logits_and_bias(tokens=7, experts=256, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(tokens, experts, generator=gen) * 2).bfloat16(), torch.randn(experts, generator=gen) * 0.5


@pytest.mark.parametrize("groups,kept", [(1, 1), (2, 2), (8, 8)])
def test_grouped_topk_substitutes_uneliminating_groupings_in_graph_mode(groups, kept):
    module = importlib.import_module(ROUTER + "grouped_topk_router")
    logits, bias = logits_and_bias()
    hidden = torch.zeros(logits.shape[0], 16)
    with forward_context("PIECEWISE"):
        weights, ids = module.grouped_topk(hidden, logits, 8, True, groups, kept, "sigmoid", 2.5, bias)
    assert_routes_like_the_reference(weights, ids, logits, 8, correction_bias=bias, num_expert_group=groups,
                                     topk_group=kept, routed_scaling_factor=2.5)
    assert dispatch.counters()["grouped_topk"] == {dispatch.SUBSTITUTED: 1}


def test_eliminating_groups_and_eager_steps_keep_vllms_op():
    module = importlib.import_module(ROUTER + "grouped_topk_router")
    logits, bias = logits_and_bias()
    hidden = torch.zeros(logits.shape[0], 16)
    for mode, groups, kept in (("PIECEWISE", 8, 4), ("NONE", 1, 1)):
        with forward_context(mode):
            try:  # vLLM's own op runs; on a CPU-only build it may not be runnable, which is fine here
                module.grouped_topk(hidden, logits, 8, True, groups, kept, "sigmoid", 2.5, bias)
            except Exception:  # noqa: BLE001
                pass
    reasons = dispatch.counters()["grouped_topk"]
    assert reasons == {"eliminating groups (grouped path disabled)": 1, "eager step (eager path disabled)": 1}
    dispatch.configure(grouped=True)
    with forward_context("FULL"):
        weights, ids = module.grouped_topk(hidden, logits, 8, True, 8, 4, "sigmoid", 2.5, bias)
    assert_routes_like_the_reference(weights, ids, logits, 8, correction_bias=bias, num_expert_group=8, topk_group=4,
                                     routed_scaling_factor=2.5)


def test_no_forward_context_falls_back_to_vllm():
    from vllm._aiter_ops import rocm_aiter_ops

    logits, bias = logits_and_bias()
    weights, ids = torch.empty(7, 8), torch.empty(7, 8, dtype=torch.int32)
    try:
        rocm_aiter_ops.biased_grouped_topk(logits, bias, weights, ids, 1, 1, True, 2.5)
    except Exception:  # noqa: BLE001 - the AITER op itself does not exist off ROCm: proof that it was called
        pass
    assert dispatch.counters() == {"rocm_aiter_ops.biased_grouped_topk": {"no forward context": 1}}


def test_aiter_site_writes_into_the_callers_buffers_with_the_bias_cast():
    from vllm._aiter_ops import rocm_aiter_ops

    logits, bias = logits_and_bias()
    weights = torch.full((7, 8), float("nan"))
    ids = torch.full((7, 8), -1, dtype=torch.int32)
    with forward_context("PIECEWISE"):
        assert rocm_aiter_ops.biased_grouped_topk(logits, bias, weights, ids, 8, 8, True, 2.5) is None
    assert_routes_like_the_reference(weights, ids, logits, 8, correction_bias=bias.to(logits.dtype),
                                     routed_scaling_factor=2.5)


@pytest.mark.parametrize("scoring", ["sigmoid", "softmax"])
def test_fused_topk_bias_and_fused_topk_keep_their_contracts(scoring):
    bias_module = importlib.import_module(ROUTER + "fused_topk_bias_router")
    flat_module = importlib.import_module(ROUTER + "fused_topk_router")
    logits, bias = logits_and_bias(tokens=5, experts=64)
    hidden = torch.zeros(5, 16)
    with forward_context("PIECEWISE"):
        weights, ids = bias_module.fused_topk_bias(hidden, logits, scoring, bias, 6, True, routed_scaling_factor=2.0)
        flat = flat_module.fused_topk(hidden, logits, 6, True, scoring_func=scoring)
    assert_routes_like_the_reference(weights, ids, logits, 6, scoring_func=scoring, correction_bias=bias,
                                     routed_scaling_factor=2.0)
    assert len(flat) == 3
    assert_routes_like_the_reference(flat[0], flat[1], logits, 6, scoring_func=scoring)
    slots = flat[2]
    assert slots.dtype == torch.int32 and slots.tolist() == [[k * 5 + t for k in range(6)] for t in range(5)]
    with forward_context("PIECEWISE"):  # int64 ids are served too
        weights, ids = bias_module.fused_topk_bias(hidden, logits, scoring, bias, 6, True, indices_type=torch.int64)
        flat = flat_module.fused_topk(hidden, logits, 6, True, indices_type=torch.int64, scoring_func=scoring)
    assert_routes_like_the_reference(weights, ids, logits, 6, ids_dtype=torch.int64, scoring_func=scoring,
                                     correction_bias=bias)
    assert_routes_like_the_reference(flat[0], flat[1], logits, 6, ids_dtype=torch.int64, scoring_func=scoring)
    assert dispatch.counters()["fused_topk_bias"] == {dispatch.SUBSTITUTED: 2}


# ---- DeepSeek-V4: sqrt-softplus, hash layers, padded rows ------------------------------------------------------------

V4 = dict(scoring_func="sqrtsoftplus", routed_scaling_factor=1.5)


def v4_inputs(tokens=9, experts=256, seed=3):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(tokens, experts, generator=gen) * 2  # float32: vLLM's dsv4_topk path
    bias = torch.randn(experts, generator=gen) * 0.1
    padding = torch.arange(tokens) % 4 == 2
    return logits, bias, padding


def assert_padded(weights, ids, padding, zero_weights=True):
    assert (ids[padding] == -1).all()
    if zero_weights:
        assert (weights[padding] == 0).all()


@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64], ids=str)
def test_fused_topk_bias_serves_sqrtsoftplus_with_padding(ids_dtype):
    """DeepSeek-V4's routed layers: float32 logits, top-6 of 256, scale 1.5; vLLM's skip-padding mask from the forward
    context; padded rows (0, -1) as dsv4_topk gives them."""
    module = importlib.import_module(ROUTER + "fused_topk_bias_router")
    logits, bias, padding = v4_inputs()
    with forward_context("FULL", is_padding=padding):
        weights, ids = module.fused_topk_bias(torch.zeros(9, 16), logits, "sqrtsoftplus", bias, 6, True,
                                              indices_type=ids_dtype, routed_scaling_factor=1.5)
    assert_padded(weights, ids, padding)
    expected = reference.route(logits, 6, correction_bias=bias, is_padding=padding, ids_dtype=ids_dtype, **V4)
    assert ids.dtype == ids_dtype and torch.equal(ids, expected[1])
    assert verify(weights, ids, logits, 6, correction_bias=bias, is_padding=padding, **V4).ok
    assert dispatch.counters()["fused_topk_bias"] == {dispatch.SUBSTITUTED: 1}


def test_fused_topk_bias_serves_hash_layers():
    module = importlib.import_module(ROUTER + "fused_topk_bias_router")
    logits, bias, padding = v4_inputs()
    gen = torch.Generator().manual_seed(4)
    table = torch.stack([torch.randperm(256, generator=gen)[:6] for _ in range(50)]).int()
    tokens = torch.randint(0, 50, (9,), generator=gen)  # int64: vLLM casts them to the table's dtype
    with forward_context("PIECEWISE", is_padding=padding):
        weights, ids = module.fused_topk_bias(torch.zeros(9, 16), logits, "sqrtsoftplus", bias, 6, True,
                                              input_tokens=tokens, hash_indices_table=table,
                                              routed_scaling_factor=1.5)
    expected = reference.route_hash(logits, tokens, table, is_padding=padding, routed_scaling_factor=1.5)
    assert_padded(weights, ids, padding)
    assert torch.equal(ids, expected[1]) and torch.equal(ids[~padding], table[tokens][~padding])
    torch.testing.assert_close(weights, expected[0], rtol=0, atol=3e-6)
    assert dispatch.counters()["fused_topk_bias"] == {dispatch.SUBSTITUTED: 1}


def test_sigmoid_and_softmax_sites_keep_padded_rows_weights():
    """topk_sigmoid / topk_softmax mark padded rows -1 and keep their weights: the sites do the same."""
    bias_module = importlib.import_module(ROUTER + "fused_topk_bias_router")
    flat_module = importlib.import_module(ROUTER + "fused_topk_router")
    logits, bias, padding = v4_inputs(experts=64)
    hidden = torch.zeros(9, 16)
    with forward_context("PIECEWISE", is_padding=padding):
        weights, ids = bias_module.fused_topk_bias(hidden, logits, "sigmoid", bias, 6, True)
        flat = flat_module.fused_topk(hidden, logits, 6, True)
    plain = reference.route(logits, 6, correction_bias=bias)
    assert_padded(weights, ids, padding, zero_weights=False)
    assert torch.equal(ids[~padding], plain[1][~padding])
    torch.testing.assert_close(weights, plain[0], rtol=0, atol=2e-6)  # padded rows' weights kept
    flat_plain = reference.route(logits, 6, scoring_func="softmax")
    assert_padded(flat[0], flat[1], padding, zero_weights=False)
    assert torch.equal(flat[1][~padding], flat_plain[1][~padding])


@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64], ids=str)
def test_dsv4_topk_site(ids_dtype):
    module = importlib.import_module(ROUTER + "dsv4_topk")
    logits, bias, padding = v4_inputs(experts=384)
    with forward_context("FULL"):
        weights, ids = module.dsv4_topk(logits, bias, ids_dtype, 1.5, is_padding=padding)
    expected = reference.route(logits, 6, correction_bias=bias, is_padding=padding, ids_dtype=ids_dtype, **V4)
    assert ids.dtype == ids_dtype and torch.equal(ids, expected[1])
    assert verify(weights, ids, logits, 6, correction_bias=bias, is_padding=padding, **V4).ok
    assert dispatch.counters()["dsv4_topk"] == {dispatch.SUBSTITUTED: 1}


@pytest.mark.parametrize("hashed", [False, True])
def test_topk_hash_softplus_sqrt_site_writes_into_the_callers_buffers(hashed):
    from vllm import _custom_ops as ops

    logits, bias, padding = v4_inputs()
    table = torch.stack([torch.randperm(256, generator=torch.Generator().manual_seed(t))[:6] for t in range(20)])
    tokens = torch.arange(9) * 2
    weights, ids = torch.full((9, 6), float("nan")), torch.full((9, 6), 7, dtype=torch.int64)
    sources = torch.full((9, 6), -5, dtype=torch.int32)
    with forward_context("PIECEWISE"):
        assert ops.topk_hash_softplus_sqrt(weights, ids, sources, logits, True, 1.5, bias,
                                           tokens if hashed else None, table if hashed else None, padding) is None
    if hashed:
        expected = reference.route_hash(logits, tokens, table, is_padding=padding, routed_scaling_factor=1.5,
                                        ids_dtype=torch.int64)
    else:
        expected = reference.route(logits, 6, correction_bias=bias, is_padding=padding, ids_dtype=torch.int64, **V4)
    assert torch.equal(ids, expected[1])
    torch.testing.assert_close(weights, expected[0], rtol=0, atol=3e-6)
    assert sources.tolist() == [[k * 9 + t for k in range(6)] for t in range(9)]
    assert dispatch.counters()["topk_hash_softplus_sqrt"] == {dispatch.SUBSTITUTED: 1}


def test_vision_bias_and_softmax_hash_tables_stay_with_vllm():
    module = importlib.import_module(ROUTER + "fused_topk_bias_router")
    logits, bias, _ = v4_inputs()
    tokens = torch.arange(9)
    table = torch.zeros(20, 6, dtype=torch.int32)
    with forward_context("PIECEWISE"):
        for kwargs, scoring in ((dict(input_tokens=tokens, bias_vl=bias.clone(), image_sentinel_lo=3), "sqrtsoftplus"),
                                (dict(input_tokens=tokens, hash_indices_table=table), "softmax")):
            try:  # vLLM's own op: on this CPU-only build it may not run, which is fine here
                module.fused_topk_bias(torch.zeros(9, 16), logits, scoring, bias, 6, True, **kwargs)
            except Exception:  # noqa: BLE001
                pass
        # a sentinel of 0 turns bias_vl off in vLLM: such calls are plain ones, and served
        module.fused_topk_bias(torch.zeros(9, 16), logits, "sqrtsoftplus", bias, 6, True, input_tokens=tokens,
                               bias_vl=bias.clone(), image_sentinel_lo=0, routed_scaling_factor=1.5)
    reasons = dispatch.counters()["fused_topk_bias"]
    assert reasons == {"per-token vision bias (bias_vl) not supported": 1, "hash table with softmax scoring": 1,
                       dispatch.SUBSTITUTED: 1}


@pytest.mark.parametrize("grouped, groups, kept, scoring, bias, expected", [
    (True, 8, 8, "sigmoid", True, (256, 8, "sigmoid", torch.float32, 1, 1)),  # uneliminating: the flat path
    (True, 1, 1, "sigmoid", True, (256, 8, "sigmoid", torch.float32, 1, 1)),
    (False, None, None, "softmax", False, (256, 8, "softmax", None, 1, 1)),
    (False, None, None, "sqrtsoftplus", True, (256, 8, "sqrtsoftplus", torch.float32, 1, 1)),
    (True, 8, 4, "sigmoid", True, None),  # eliminating, grouped path off: the plugin does not serve it
])
def test_routers_built_by_vllms_factory_are_warmed_as_the_plugin_serves_them(grouped, groups, kept, scoring, bias,
                                                                              expected, monkeypatch):
    """At model load vLLM builds each MoE layer's router with create_fused_moe_router; the plugin's wrapper reads
    the routing shape off the router it returns and starts a warm-up (on a GPU; recorded here)."""
    factory = importlib.import_module(ROUTER + "router_factory")
    started = []
    monkeypatch.setattr(plugin, "warm_router", lambda router: started.append(plugin.routing_shape_of(router)))
    router = factory.create_fused_moe_router(
        top_k=8, global_num_experts=256, renormalize=True, use_grouped_topk=grouped, num_expert_group=groups,
        topk_group=kept, scoring_func=scoring, e_score_correction_bias=torch.zeros(256) if bias else None)
    assert router is not None and len(started) == 1
    shape = started[0]
    found = None if shape is None else (shape.experts, shape.topk, shape.scoring_func, shape.bias_dtype,
                                        shape.num_expert_group, shape.topk_group)
    assert found == expected


def test_warm_router_warms_each_shape_once_and_not_without_a_gpu(monkeypatch):
    class Router:
        top_k, global_num_experts, scoring_func, renormalize = 8, 384, "sigmoid", True
        e_score_correction_bias = torch.zeros(384)

    if not torch.cuda.is_available():
        assert plugin.warm_router(Router()) is False
        return
    monkeypatch.setattr(plugin, "_warm_up", lambda *args: None)
    plugin._warmed.clear()
    assert plugin.warm_router(Router()) is True
    assert plugin.warm_router(Router()) is False
    monkeypatch.setenv(plugin.WARMUP_ENV_SWITCH, "0")
    plugin._warmed.clear()
    assert plugin.warm_router(Router()) is False


def test_sites_that_write_token_expert_indices_keep_vllms_op_by_default():
    """fused_topk and topk_hash_softplus_sqrt: the k * T + t rows cost more than route() saves (RESULTS.md)."""
    dispatch.configure(source_rows=False)
    module = importlib.import_module(ROUTER + "fused_topk_router")
    logits = torch.randn(16, 64)
    with forward_context("FULL"):
        try:  # vLLM's op runs; on a CPU-only build it may not be runnable, which is fine here
            module.fused_topk(torch.zeros(16, 8), logits, 6, True)
        except Exception:  # noqa: BLE001
            pass
    assert dispatch.counters()["fused_topk"] == {"token_expert_indices asked for (source-rows sites disabled)": 1}


# ---- the dispatch-plan site: moe_align_block_size, served by moe_routing.align ---------------------------------

ALIGN = "vllm.model_executor.layers.fused_moe.moe_align_block_size"


def vllm_capacities(slots: int, block_size: int, experts: int, pad_sorted_ids: bool) -> tuple[int, int]:
    """The buffer sizes vLLM 0.33's moe_align_block_size allocates (its callers slice them), restated here."""
    padded = slots + experts * (block_size - 1)
    if pad_sorted_ids:
        padded = -(-padded // block_size) * block_size
    if slots < experts:
        padded = min(slots * block_size, padded)
    return padded, -(-padded // block_size)


def expert_maps(experts: int = 256, ranks: int = 8, rank: int = 3) -> dict:
    """Expert maps as vLLM builds them for an expert-parallel rank: its own determine_expert_map."""
    from vllm.model_executor.layers.fused_moe.expert_map_manager import determine_expert_map

    return {strategy: determine_expert_map(ranks, rank, experts, strategy)[1] for strategy in ("linear", "round_robin")}


def routed_ids(tokens: int, topk: int, experts: int, dtype=torch.int32, padded_rows=()) -> torch.Tensor:
    gen = torch.Generator().manual_seed(tokens * 7 + topk)
    ids = torch.rand(tokens, experts, generator=gen).topk(topk, dim=1).indices.to(dtype)
    ids[list(padded_rows)] = -1  # vLLM's padded rows (is_padding)
    return ids


def test_the_fused_moe_modules_call_the_align_wrapper():
    """vLLM's experts import moe_align_block_size by name: those names are the wrapper now."""
    for name in ("vllm.model_executor.layers.fused_moe.fused_moe",
                 "vllm.model_executor.layers.fused_moe.experts.triton_moe", ALIGN):
        module = importlib.import_module(name)
        assert hasattr(module.moe_align_block_size, "__moe_routing_original__"), name


@pytest.mark.parametrize("case", ["plain", "int64 ids", "padded rows", "pad_sorted_ids", "scatter", "few slots",
                                  "linear map, ignore", "linear map, relabel", "round_robin map, ignore",
                                  "round_robin map, relabel", "round_robin map, scatter", "int64 map, relabel"])
def test_align_site_keeps_vllms_contract(case):
    """In a CUDA-graph step: vLLM's returns (count, order, dtypes, buffer sizes its callers slice), equal to the
    reference, for every option vLLM's callers pass; expert maps as vLLM builds them for EP ranks."""
    experts, block_size, tokens, topk = 256, 16, 31, 8  # 248 slots: served up to 512 (ALIGN_SERVED_SLOTS)
    kwargs = {}
    ids = routed_ids(tokens, topk, experts)
    if case == "int64 ids":
        ids = ids.long()
    if case == "padded rows":
        ids = routed_ids(tokens, topk, experts, padded_rows=(0, 5, 30))
    if case == "pad_sorted_ids":
        kwargs["pad_sorted_ids"] = True
    if case == "few slots":
        ids = routed_ids(3, topk, experts)  # T * K < E: the smaller capacity
    if "map" in case:
        strategy = case.split()[0]
        kwargs["expert_map"] = expert_maps()["linear" if strategy == "int64" else strategy]
        if strategy == "int64":
            kwargs["expert_map"] = kwargs["expert_map"].long()
        kwargs["ignore_invalid_experts"] = "ignore" in case or "scatter" in case
    scatter = "scatter" in case
    module = importlib.import_module(ALIGN)
    with forward_context("PIECEWISE"):
        got = module.moe_align_block_size(ids, block_size, experts, return_scatter_idx=scatter, **kwargs)
    assert dispatch.counters()["moe_align_block_size"] == {dispatch.SUBSTITUTED: 1}
    expected = reference.align(ids, block_size, experts, kwargs.get("expert_map"), kwargs.get("pad_sorted_ids", False),
                               kwargs.get("ignore_invalid_experts", False), return_scatter_idx=scatter)
    assert len(got) == (4 if scatter else 3)
    capacity, blocks = vllm_capacities(ids.numel(), block_size, experts, kwargs.get("pad_sorted_ids", False))
    assert got[0].shape == (capacity,) and got[1].shape == (blocks,) and got[2].shape == (1,)
    relabelled = "expert_map" in kwargs and not kwargs["ignore_invalid_experts"]
    assert got[1].dtype == (kwargs["expert_map"].dtype if relabelled else torch.int32)
    assert got[0].dtype == got[2].dtype == torch.int32
    for value, wanted in zip(got, expected):
        assert torch.equal(value, wanted.to(value.dtype)), case
    used = int(got[2]) // block_size
    if relabelled:  # blocks of other ranks' experts are -1; each used block a local index or -1
        assert set(got[1][:used].tolist()) <= set(kwargs["expert_map"].tolist())
    if scatter:
        assert got[3].shape == (ids.numel(), 1)


def test_align_site_keeps_vllms_op_in_eager_steps_without_a_context_and_for_what_vllm_refuses():
    module = importlib.import_module(ALIGN)
    ids = routed_ids(9, 8, 64)
    relabel_map = expert_maps(64, 4, 1)["linear"]
    calls = (("NONE", {}), (None, {}), ("FULL", dict(expert_map=relabel_map, return_scatter_idx=True)),
             ("FULL", dict(expert_map=relabel_map[:10])))
    for mode, kwargs in calls:
        context = forward_context(mode) if mode else contextlib.nullcontext()
        with context:
            try:  # vLLM's own op runs (or refuses); on a CPU-only build it may not be runnable, which is fine here
                module.moe_align_block_size(ids, 16, 64, **kwargs)
            except Exception:  # noqa: BLE001
                pass
    with forward_context("FULL"):  # 640 slots: where the plan is not served (not measured faster than vLLM's op)
        try:
            module.moe_align_block_size(routed_ids(80, 8, 64), 16, 64)
        except Exception:  # noqa: BLE001
            pass
    assert dispatch.counters()["moe_align_block_size"] == {
        "eager step (eager path disabled)": 1, "no forward context": 1,
        "scatter index with a relabelling map (vLLM refuses it)": 1,
        "expert_map not an int32/int64 [E] tensor on the ids' device": 1,
        "513 to 65535 slots (not measured faster than vLLM's op there)": 1}
    dispatch.configure(eager=True)
    with forward_context("NONE"):
        got = module.moe_align_block_size(ids, 16, 64)
    assert all(torch.equal(a, b) for a, b in zip(got, reference.align(ids, 16, 64)))
