"""transformers' experts served through its experts registry with ``moe_routing.group``'s plan: registration and
selection, outputs against transformers' ``grouped_mm`` on tiny models of several families, expert parallelism's
sentinel ids, ``patch``/``unpatch`` and ``switch_experts``/``restore_experts`` round trips, shadow accounting, and
models whose experts cannot switch.

``grouped_mm`` sorts the slots with ``torch.sort``, which on CPU is not stable: within one expert its rows may come
in another order than ``group``'s (stable) permutation, and the CPU GEMM rounds a row differently at another
position. The bit-for-bit comparisons therefore use ids without ties (one slot an expert: a single possible order) or
give grouped_mm a stable sort; with ties and the default sort the outputs agree within float32 rounding.
"""

import copy

import pytest
import torch

pytest.importorskip("transformers")

from conftest import DEVICE  # noqa: E402
from moe_routing.integrations import transformers_experts as experts_integration  # noqa: E402
from moe_routing.integrations.transformers import patch, unpatch  # noqa: E402
from moe_routing.integrations.transformers_experts import (EXPERTS_IMPLEMENTATION,  # noqa: E402
                                                           SHADOW_EXPERTS_IMPLEMENTATION, experts_modules,
                                                           experts_switched, moe_routing_experts_forward,
                                                           register_experts, restore_experts, switch_experts)
from moe_routing.measure.shadow import tiny_model  # noqa: E402
from transformers.integrations.moe import (ALL_EXPERTS_FUNCTIONS, ExpertsInterface,  # noqa: E402
                                           grouped_mm_experts_forward)

# gated (Qwen3-MoE, Mixtral, DeepSeek-V3), a custom gate (DeepSeek-V4's clamps), biases on transposed interleaved
# weights (gpt-oss), no gate (Nemotron-H's up projection), softmax-after-top-k (GraniteMoE)
FAMILIES = ("qwen3_moe", "mixtral", "deepseek_v3", "deepseek_v4", "gpt_oss", "nemotron_h", "granitemoe")
EXACT = DEVICE == "cpu"  # bit for bit on CPU; elsewhere within float32 rounding


def assert_same(ours, theirs):
    if EXACT:
        assert torch.equal(ours, theirs), float((ours - theirs).abs().max())
    else:
        torch.testing.assert_close(ours, theirs, rtol=1.3e-6, atol=1e-6)


def first_experts(model):
    return next(iter(experts_modules(model).values()))


def hidden_size(model):
    return model.config.get_text_config().hidden_size


def layer_inputs(model, tokens, topk, seed=0):
    generator = torch.Generator().manual_seed(seed)
    experts = first_experts(model)
    hidden = torch.randn(tokens, hidden_size(model), generator=generator).to(DEVICE)
    ids = torch.randint(0, experts.num_experts, (tokens, topk), generator=generator).to(DEVICE)
    weights = torch.rand(tokens, topk, generator=generator).to(DEVICE)
    return experts, hidden, ids, weights


def grouped_mm_with_stable_sort(monkeypatch, experts, hidden, ids, weights):
    """transformers' grouped_mm with its torch.sort made stable: the rows of an expert in slot order, as group()."""
    unstable = torch.sort
    with monkeypatch.context() as context:
        context.setattr(torch, "sort", lambda *args, **kwargs: unstable(*args, **{**kwargs, "stable": True}))
        return grouped_mm_experts_forward(experts, hidden, ids, weights)


def prompt(model, tokens=7, seed=0):
    vocabulary = model.config.get_text_config().vocab_size
    return torch.randint(3, vocabulary, (2, tokens), generator=torch.Generator().manual_seed(seed)).to(DEVICE)


def logits_of(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def count_group_calls(monkeypatch):
    calls = []
    real_group = experts_integration.group

    def counting_group(*args, **kwargs):
        calls.append(args[1])
        return real_group(*args, **kwargs)

    monkeypatch.setattr(experts_integration, "group", counting_group)
    return calls


# registration and selection


def test_importing_the_integration_registers_the_implementation():
    assert ALL_EXPERTS_FUNCTIONS[EXPERTS_IMPLEMENTATION] is moe_routing_experts_forward
    assert ExpertsInterface()[EXPERTS_IMPLEMENTATION] is moe_routing_experts_forward  # global: every instance
    assert SHADOW_EXPERTS_IMPLEMENTATION in ALL_EXPERTS_FUNCTIONS
    keys = list(ALL_EXPERTS_FUNCTIONS.keys())
    assert register_experts() is True and register_experts() is True
    assert list(ALL_EXPERTS_FUNCTIONS.keys()) == keys  # idempotent
    assert ALL_EXPERTS_FUNCTIONS["grouped_mm"] is grouped_mm_experts_forward  # the default untouched


def test_set_experts_implementation_runs_group_once_a_layer(monkeypatch):
    model = tiny_model("qwen3_moe", device=DEVICE, small=True)
    assert model.config._experts_implementation == "grouped_mm"
    ids = prompt(model)
    own = logits_of(model, ids)
    calls = count_group_calls(monkeypatch)
    model.set_experts_implementation(EXPERTS_IMPLEMENTATION)
    assert model.config._experts_implementation == EXPERTS_IMPLEMENTATION
    assert model.get_experts_implementation()[""] == EXPERTS_IMPLEMENTATION
    ours = logits_of(model, ids)
    layers = len(experts_modules(model))
    assert layers == 2 and calls == [16] * layers
    torch.testing.assert_close(ours, own, rtol=1e-5, atol=1e-5)


def test_the_config_and_from_pretrained_select_it(monkeypatch, tmp_path):
    import transformers

    model = tiny_model("mixtral", small=True)
    config = copy.deepcopy(model.config)
    config._experts_implementation = EXPERTS_IMPLEMENTATION
    built = transformers.AutoModelForCausalLM.from_config(config)
    assert built.config._experts_implementation == EXPERTS_IMPLEMENTATION  # validated against the registry

    assert model.config._experts_implementation == "grouped_mm"
    model.save_pretrained(tmp_path)  # a local checkpoint: nothing is downloaded
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, experts_implementation=EXPERTS_IMPLEMENTATION)
    loaded = loaded.to(DEVICE).eval()
    assert loaded.config._experts_implementation == EXPERTS_IMPLEMENTATION
    calls = count_group_calls(monkeypatch)
    ids = prompt(loaded)
    ours = logits_of(loaded, ids)
    assert calls == [first_experts(loaded).num_experts] * len(experts_modules(loaded)) and len(calls) == 2
    torch.testing.assert_close(ours, logits_of(model.to(DEVICE), ids), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="not supported"):
        loaded.set_experts_implementation("not_an_experts_implementation")


# outputs against grouped_mm


@pytest.mark.parametrize("family", FAMILIES)
def test_outputs_equal_grouped_mm_when_no_expert_repeats(family):
    """One slot an expert (and one sentinel): grouped_mm's sort has a single order, so the same bits."""
    model = tiny_model(family, device=DEVICE, small=True)
    experts, hidden, _, weights = layer_inputs(model, 4, 4)
    ids = torch.randperm(experts.num_experts, generator=torch.Generator().manual_seed(1))[:16].view(4, 4).to(DEVICE)
    ids[2, 1] = experts.num_experts  # expert parallelism's sentinel
    with torch.no_grad():
        ours = moe_routing_experts_forward(experts, hidden, ids, weights)
        theirs = grouped_mm_experts_forward(experts, hidden, ids, weights)
    assert ours.dtype == theirs.dtype == hidden.dtype and ours.shape == hidden.shape
    assert ours.abs().max() > 0
    assert_same(ours, theirs)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("tokens", [1, 13, 40])
def test_outputs_equal_grouped_mm_with_repeated_experts(family, tokens, monkeypatch):
    model = tiny_model(family, device=DEVICE, small=True)
    experts, hidden, ids, weights = layer_inputs(model, tokens, 4, seed=tokens)
    with torch.no_grad():
        ours = moe_routing_experts_forward(experts, hidden, ids, weights)
        stable = grouped_mm_with_stable_sort(monkeypatch, experts, hidden, ids, weights)
        default = grouped_mm_experts_forward(experts, hidden, ids, weights)
    assert_same(ours, stable)
    torch.testing.assert_close(ours, default, rtol=1.3e-6, atol=1e-6)


def test_bf16_experts_keep_the_hidden_states_dtype(monkeypatch):
    model = tiny_model("qwen3_moe", device=DEVICE, small=True, dtype=torch.bfloat16)
    experts, hidden, ids, weights = layer_inputs(model, 9, 4)
    hidden = hidden.bfloat16()
    with torch.no_grad():
        ours = moe_routing_experts_forward(experts, hidden, ids, weights)
        theirs = grouped_mm_with_stable_sort(monkeypatch, experts, hidden, ids, weights)
    assert ours.dtype == torch.bfloat16
    assert_same(ours, theirs)


@pytest.mark.parametrize("family", ["qwen3_moe", "gpt_oss"])
def test_sentinel_ids_add_nothing(family, monkeypatch):
    """Ids >= num_experts (expert parallelism's sentinel and beyond), with nonzero weights, contribute nothing:
    a token routed only to sentinels gets zeros, the others what their valid slots give, as in grouped_mm."""
    model = tiny_model(family, device=DEVICE, small=True)
    experts, hidden, ids, weights = layer_inputs(model, 10, 4, seed=3)
    sentinel = experts.num_experts
    with_sentinels = ids.clone()
    with_sentinels[0, :] = sentinel  # a token with no local expert
    with_sentinels[4, 1] = sentinel
    with_sentinels[7, 3] = sentinel + 5
    dropped = with_sentinels >= sentinel
    # the same slots as valid ids of weight zero: the reference for "no contribution"
    zero_weighted_ids = with_sentinels.masked_fill(dropped, 0)
    zero_weights = weights.masked_fill(dropped, 0.0)
    with torch.no_grad():
        ours = moe_routing_experts_forward(experts, hidden, with_sentinels, weights)
        theirs = grouped_mm_with_stable_sort(monkeypatch, experts, hidden, with_sentinels, weights)
        reference = grouped_mm_experts_forward(experts, hidden, zero_weighted_ids, zero_weights)
    assert torch.equal(ours[0], torch.zeros_like(ours[0]))
    assert torch.isfinite(ours).all() and ours[1:].abs().sum(dim=-1).min() > 0
    assert_same(ours, theirs)
    torch.testing.assert_close(ours, reference, rtol=1.3e-6, atol=1e-6)


def test_gradients_flow_like_grouped_mm(monkeypatch):
    model = tiny_model("mixtral", device=DEVICE, small=True)
    experts, hidden, ids, weights = layer_inputs(model, 6, 4)
    ids[1, 2] = experts.num_experts
    gradients = []
    for forward in (moe_routing_experts_forward, None):
        experts.zero_grad()
        x, w = hidden.clone().requires_grad_(), weights.clone().requires_grad_()
        out = forward(experts, x, ids, w) if forward else grouped_mm_with_stable_sort(monkeypatch, experts, x, ids, w)
        out.square().sum().backward()
        gradients.append((x.grad, w.grad, experts.gate_up_proj.grad.clone(), experts.down_proj.grad.clone()))
    for ours, theirs in zip(*gradients):
        assert torch.isfinite(ours).all()
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    assert gradients[0][1][1, 2] == 0  # the sentinel slot's weight has no effect


# switching a loaded model


@pytest.mark.parametrize("family", ["qwen3_moe", "deepseek_v3", "gpt_oss"])
def test_patch_switches_the_experts_and_unpatch_restores_them(family):
    model = tiny_model(family, device=DEVICE, small=True)
    ids = prompt(model)
    own = logits_of(model, ids)
    before = model.get_experts_implementation()
    names = list(experts_modules(model))
    result = patch(model, "replace")
    try:
        switch = result.experts
        assert switch.switched and switch.mode == "replace" and switch.modules == names and switch.reason is None
        assert switch.previous == {name: "grouped_mm" for name in names}
        assert switch.describe() == f"{len(names)} experts modules switched from grouped_mm to moe_routing"
        assert result.experts_recorder is None
        assert all(m.config._experts_implementation == EXPERTS_IMPLEMENTATION for m in experts_modules(model).values())
        replaced = logits_of(model, ids)
    finally:
        assert unpatch(model) == len(result.patched)
    torch.testing.assert_close(replaced, own, rtol=1e-5, atol=1e-5)
    assert model.get_experts_implementation() == before and not experts_switched(model)
    assert torch.equal(logits_of(model, ids), own)


@pytest.mark.parametrize("previous", ["batched_mm", "eager"])
def test_restore_puts_back_the_implementation_the_model_had(previous):
    model = tiny_model("mixtral", device=DEVICE, small=True)
    model.set_experts_implementation(previous)
    own = logits_of(model, prompt(model))
    for mode in ("replace", "shadow"):
        switch = switch_experts(model, mode)
        assert set(switch.previous.values()) == {previous}
        with pytest.raises(ValueError, match="already switched"):
            switch_experts(model, mode)
        with pytest.raises(ValueError, match="already patched"):
            patch(model, mode)
        assert restore_experts(model) is True and restore_experts(model) is False
        assert model.config._experts_implementation == previous
        assert all(m.config._experts_implementation == previous for m in experts_modules(model).values())
        assert all(not hasattr(m, "_moe_routing_experts_shadow") for m in experts_modules(model).values())
    assert torch.equal(logits_of(model, prompt(model)), own)


def test_patch_can_leave_the_experts_alone():
    model = tiny_model("qwen3_moe", device=DEVICE, small=True)
    result = patch(model, "replace", experts=False)
    try:
        assert result.experts is None and result.patched
        assert model.config._experts_implementation == "grouped_mm" and not experts_switched(model)
    finally:
        unpatch(model)
    with pytest.raises(TypeError, match="experts"):
        patch(model, experts="yes")
    assert not any("_moe_routing_patch" in m.__dict__ for m in model.modules())  # nothing patched on refusal


# shadow mode


@pytest.mark.parametrize("family", ["qwen3_moe", "deepseek_v3", "deepseek_v4"])
def test_shadow_counts_bitwise_agreement(family, monkeypatch):
    """With grouped_mm's sort stable, every experts call agrees bit for bit; the model's output is its own."""
    model = tiny_model(family, device=DEVICE, small=True)
    ids = prompt(model)
    unstable = torch.sort
    monkeypatch.setattr(torch, "sort", lambda *args, **kwargs: unstable(*args, **{**kwargs, "stable": True}))
    own = logits_of(model, ids)
    result = patch(model, "shadow")
    try:
        assert model.config._experts_implementation == SHADOW_EXPERTS_IMPLEMENTATION
        shadowed = logits_of(model, ids)
        logits_of(model, ids[:, :3])
    finally:
        unpatch(model)
    recorder = result.experts_recorder
    layers = len(experts_modules(model))
    assert recorder is result.experts.recorder and recorder.calls == 2 * layers
    assert recorder.calls_bitwise_equal == recorder.calls and recorder.max_abs_difference == 0.0, recorder.summary()
    assert torch.equal(shadowed, own)
    assert model.config._experts_implementation == "grouped_mm"


def test_shadow_with_the_default_sort_agrees_within_rounding():
    model = tiny_model("mixtral", device=DEVICE, small=True)
    ids = prompt(model, tokens=12)
    own = logits_of(model, ids)
    switch = switch_experts(model, "shadow")
    try:
        shadowed = logits_of(model, ids)
    finally:
        restore_experts(model)
    assert torch.equal(shadowed, own)  # shadow never changes the model's computation
    assert switch.recorder.calls == len(switch.modules) == 2
    assert switch.recorder.max_abs_difference < 1e-5, switch.recorder.summary()


def test_shadow_reports_an_implementation_that_differs(monkeypatch):
    """The model's current implementation (a registered one that adds 1 to grouped_mm) is what shadow compares."""
    def shifted(self, hidden_states, top_k_index, top_k_weights):
        return grouped_mm_experts_forward(self, hidden_states, top_k_index, top_k_weights) + 1.0

    monkeypatch.setitem(ExpertsInterface._global_mapping, "shifted_for_test", shifted)
    model = tiny_model("qwen3_moe", device=DEVICE, small=True)
    model.set_experts_implementation("shifted_for_test")
    ids = prompt(model)
    own = logits_of(model, ids)
    result = patch(model, "shadow")
    try:
        assert result.experts.previous == {name: "shifted_for_test" for name in result.experts.modules}
        shadowed = logits_of(model, ids)
    finally:
        unpatch(model)
    recorder = result.experts_recorder
    assert torch.equal(shadowed, own)
    assert recorder.calls == 2 and recorder.calls_bitwise_equal == 0 and abs(recorder.max_abs_difference - 1.0) < 1e-3
    assert model.config._experts_implementation == "shifted_for_test"


def test_shadow_selected_without_switch_experts_says_how():
    model = tiny_model("qwen3_moe", device=DEVICE, small=True)
    model.set_experts_implementation(SHADOW_EXPERTS_IMPLEMENTATION)
    with pytest.raises(RuntimeError, match="switch_experts"):
        logits_of(model, prompt(model))


# models whose experts cannot switch


def test_a_model_without_registry_experts_is_left_alone():
    model = tiny_model("jetmoe", device=DEVICE, small=True)  # its experts are not @use_experts_implementation
    before = model.config._experts_implementation
    switch = switch_experts(model, "replace")
    assert not switch.switched and switch.mode is None and switch.modules == []
    assert "cannot set its experts implementation" in switch.reason
    assert not experts_switched(model) and model.config._experts_implementation == before
    result = patch(model, "shadow")  # its routers are patched all the same
    try:
        assert result.patched and not result.experts.switched and result.experts_recorder is None
        assert result.experts.describe() == f"experts left alone: {switch.reason}"
    finally:
        unpatch(model)
    assert model.config._experts_implementation == before


def test_switch_experts_refuses_bad_arguments():
    assert "not a transformers PreTrainedModel" in switch_experts(torch.nn.Linear(2, 2)).reason
    model = tiny_model("qwen3_moe", small=True)
    with pytest.raises(ValueError, match="mode"):
        switch_experts(model, "both")
    with pytest.raises(TypeError, match="model"):
        switch_experts("qwen3_moe")
    assert not experts_switched(model)
