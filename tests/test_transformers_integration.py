"""transformers integration on tiny models: round trip, shadow accounting, replace-mode equivalence, for every
router family patch() serves (each built from its own configuration class)."""

from functools import partial

import pytest
import torch

pytest.importorskip("transformers")

from conftest import DEVICE  # noqa: E402
from moe_routing.integrations.transformers import (FAMILIES, ShadowRecorder, family_of, patch,  # noqa: E402
                                                   skipped_routers, supported, unpatch)
from moe_routing.measure import shadow  # noqa: E402
from moe_routing.measure.shadow import PATTERN_FAMILIES, TINY_FAMILIES, run_shadow, tiny_model  # noqa: E402

# The state-space and linear-attention layers of these families run transformers' reference PyTorch code on CPU,
# which at the configurations' default widths (128 Mamba heads of 64 with a state of 128, 32-64 linear heads of
# 128) takes seconds a forward; their routers' shapes do not depend on these widths, so the pattern tests take
# them small.
NARROW_MIXERS = {
    "nemotron_h": dict(mamba_num_heads=4, mamba_head_dim=8, ssm_state_size=16, n_groups=1, chunk_size=16,
                       moe_shared_expert_intermediate_size=16),
    "kimi_linear": dict(linear_head_dim=16, linear_num_heads=2),
    "glm5_next": dict(linear_head_dim=16, linear_num_heads=2, index_n_heads=2),
    "qwen3_next": dict(linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
                       linear_num_value_heads=2, shared_expert_intermediate_size=16),
    "qwen3_5_moe": dict(linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
                        linear_num_value_heads=2, shared_expert_intermediate_size=16),
}


def prompt(model, tokens=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.config.vocab_size, (2, tokens), generator=gen).to(DEVICE)


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_patch_unpatch_round_trip_restores_the_model_exactly(family):
    model = tiny_model(family, device=DEVICE)
    ids = prompt(model)
    with torch.no_grad():
        before = model(ids).logits
    routers = [m for m in model.modules() if supported(m)]
    assert routers, family
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for mode in ("replace", "shadow"):
        patch(model, mode)
        assert all(family_of(m).method in m.__dict__ for m in routers)
        with pytest.raises(ValueError, match="already patched"):
            patch(model, mode)
        assert unpatch(model) == len(routers)
        assert all(family_of(m).method not in m.__dict__ and not hasattr(m, "_moe_routing_patch") for m in routers)
    with torch.no_grad():
        after = model(ids).logits
    assert torch.equal(before, after)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_replace_mode_routes_like_the_model_where_margins_are_clear(family):
    model = tiny_model(family, device=DEVICE)
    # routers only (the experts have their own file); prompts of 3 tokens: in the interpreter each row is a program
    # of the latency class's plan, which a prefill of 6 rows and a decode of 2 reach as longer ones do
    recorder = run_shadow(model, prompts=2, prompt_tokens=3, new_tokens=2, experts=False)
    clear = recorder.rows - recorder.rows_of("exact tie") - recorder.rows_of("near tie")
    assert recorder.calls > 0 and recorder.rows_of("disagreement") == 0, recorder.summary()
    assert clear > 0 and recorder.max_weight_delta < 1e-5
    ids = prompt(model)
    with torch.no_grad():
        own = model(ids).logits
        patch(model, "replace", experts=False)
        try:
            replaced = model(ids).logits
        finally:
            unpatch(model)
    torch.testing.assert_close(replaced, own, rtol=1e-4, atol=1e-4)


def model_output(model, ids):
    with torch.no_grad():
        output = model(input_ids=ids)
    return output.logits if getattr(output, "logits", None) is not None else output.last_hidden_state


@pytest.mark.parametrize("family", PATTERN_FAMILIES)
def test_every_pattern_family_is_served(family, monkeypatch):
    """On a small model of the family's own configuration (``NARROW_MIXERS``' widths where it has them): replace
    keeps its outputs within float32 rounding, shadow sees every router agree with the model (experts equal, weights
    within float32 rounding), and unpatch restores the model bit for bit (where the model repeats its own bits:
    within float32 rounding otherwise). Two prompts of 3 tokens: each row is a program of the interpreter."""
    if family in NARROW_MIXERS:
        narrow = {**shadow._PER_FAMILY.get(family, {}), **NARROW_MIXERS[family]}
        monkeypatch.setitem(shadow._PER_FAMILY, family, narrow)
    model = tiny_model(family, device=DEVICE, small=True)
    config = model.config.get_text_config()
    assert all(getattr(config, key) == value for key, value in NARROW_MIXERS.get(family, {}).items())
    ids = torch.randint(3, config.vocab_size, (2, 3), generator=torch.Generator().manual_seed(0)).to(DEVICE)
    own = model_output(model, ids)
    # shadow mode never changes the model's computation, and unpatch restores it: the same bits, where the model's
    # own forward repeats its bits (on a GPU JetMoE sums its experts' outputs by atomic adds, whose order varies)
    repeats = torch.equal(model_output(model, ids), own)
    same = torch.equal if repeats else partial(torch.allclose, rtol=1e-5, atol=1e-5)
    replaced_routers = patch(model, "replace").patched
    assert replaced_routers and all(family_of(model.get_submodule(name)) for name in replaced_routers)
    try:
        replaced = model_output(model, ids)
    finally:
        assert unpatch(model) == len(replaced_routers)
    torch.testing.assert_close(replaced, own, rtol=1e-5, atol=1e-5)
    result = patch(model, "shadow")
    try:
        shadowed = model_output(model, ids)
    finally:
        unpatch(model)
    recorder = result.recorder
    assert same(shadowed, own)
    assert recorder.calls >= len(replaced_routers) and recorder.route_wrong() == 0, recorder.summary()
    assert recorder.rows_of("disagreement") == 0 and recorder.max_weight_delta < 1e-6, recorder.summary()
    if result.experts.switched:  # the experts' plan shadowed in the same forwards: grouped_mm's outputs
        assert recorder.experts.calls > 0 and recorder.experts.max_abs_difference < 1e-5, recorder.summary()
    assert same(model_output(model, ids), own)
    assert result.skipped == {}


def test_the_families_cover_the_pattern_models_once():
    classes = [name for family in FAMILIES for name in family.classes]
    assert len(classes) == len(set(classes))
    assert {family.pattern for family in FAMILIES} == {"P1", "P2", "P3", "P4", "DeepSeek-V4", "DeepSeek-V4 hash"}


def test_the_shadow_command_offers_every_family():
    from moe_routing.cli import _SHADOW_FAMILIES

    assert set(_SHADOW_FAMILIES) == set(TINY_FAMILIES) | set(PATTERN_FAMILIES)


class UnknownRouter(torch.nn.Module):  # a router none of the patterns knows
    def forward(self, hidden_states):
        return hidden_states


def test_patch_names_the_routers_it_skips():
    model = tiny_model("qwen3_moe", device=DEVICE, small=True)
    model.model.layers[0].mlp.extra_router = UnknownRouter()
    result = patch(model, "replace")
    try:
        assert result.skipped == {"model.layers.0.mlp.extra_router": "UnknownRouter"}
        assert len(result.patched) == 2 and result.recorder is None
    finally:
        unpatch(model)
    with pytest.raises(ValueError, match="UnknownRouter"):
        patch(torch.nn.Sequential(UnknownRouter()))


def test_a_deepseek_v4_router_with_an_unknown_scoring_is_skipped():
    model = tiny_model("deepseek_v4", device=DEVICE, small=True)
    routers = {name: m for name, m in model.named_modules() if supported(m)}
    assert {type(m).__name__ for m in routers.values()} == {"DeepseekV4TopKRouter", "DeepseekV4HashRouter"}
    name, router = next((n, m) for n, m in routers.items() if type(m).__name__ == "DeepseekV4TopKRouter")
    router.score_fn = torch.nn.Tanh()
    assert skipped_routers(model) == {name: "DeepseekV4TopKRouter"}
    assert name not in patch(model, "replace").patched
    unpatch(model)


def test_shadow_tells_near_ties_from_disagreements():
    """Planted: one row the model routes wrongly (clear margin), one row that is a float32 near tie."""
    recorder = ShadowRecorder()
    logits = torch.randn(3, 16).clamp(-3, 3)
    logits[1, 0], logits[1, 1] = 5.0, torch.nextafter(torch.tensor(5.0), torch.tensor(6.0)).item()
    logits[1, 2:] = -5.0
    from moe_routing import route

    arguments = dict(topk=1, scoring_func="sigmoid", renormalize=True)
    weights, ids = route(logits.to(DEVICE), 1, scoring_func="sigmoid")
    model_ids = ids.clone().long()
    model_ids[0, 0] = int(torch.argmin(logits[0]))  # row 0: a clear mistake by "the model"
    model_ids[1, 0] = 1  # row 1: the float64 answer, which float32 ties away (lower index first)
    recorder.record("layer", logits, arguments, weights, model_ids, weights, ids)
    kinds = {d.row: (d.kind, d.agrees) for d in recorder.differing}
    assert kinds == {0: ("disagreement", "route"), 1: ("near tie", "model")}
    assert recorder.calls == 1 and recorder.calls_all_equal == 0 and recorder.rows == 3


def test_shadow_flags_a_router_that_goes_wrong_inside_a_model(monkeypatch):
    model = tiny_model("mixtral", device=DEVICE)
    router_class = type(next(m for m in model.modules() if supported(m)))
    original = router_class.forward

    def broken(self, hidden_states):  # the model's router picks its worst expert for token 0
        logits, weights, ids = original(self, hidden_states)
        ids = ids.clone()
        ids[0, -1] = int(torch.argmin(logits[0]))
        return logits, weights, ids

    monkeypatch.setattr(router_class, "forward", broken)
    recorder = run_shadow(model, prompts=1, prompt_tokens=4, new_tokens=2)
    assert recorder.rows_of("disagreement") == recorder.calls > 0
    assert all(d.agrees == "route" and d.row == 0 for d in recorder.differing)


def test_patch_refuses_unknown_modes_and_models():
    with pytest.raises(ValueError, match="mode"):
        patch(torch.nn.Linear(2, 2), "both")
    with pytest.raises(ValueError, match="no supported router"):
        patch(torch.nn.Linear(2, 2))


@pytest.mark.parametrize("family", ["deepseek_v3", "qwen3_moe", "deepseek_v4"])
def test_patch_with_warmup_warms_the_routers_shapes(family):
    from moe_routing.integrations.transformers import routing_shapes, unpatch

    model = tiny_model(family, device=DEVICE, small=True)
    shapes, dtypes = routing_shapes(model)
    assert shapes and dtypes
    routers = [m for m in model.modules() if supported_router(m)]
    assert {s.experts for s in shapes} == {m.weight.shape[0] for m in routers if getattr(m, "weight", None) is not None}
    result = patch(model, warmup=True)
    try:
        assert result.warmup is not None and result.warmup.kernels >= 1
        assert result.warmup.shapes == tuple(shapes)
    finally:
        unpatch(model)
    assert patch(model).warmup is None
    unpatch(model)


def supported_router(module) -> bool:
    from moe_routing.integrations.transformers import supported

    return supported(module)
