"""transformers integration on tiny models: round trip, shadow accounting, replace-mode equivalence."""

import pytest
import torch

pytest.importorskip("transformers")

from conftest import DEVICE  # noqa: E402
from moe_routing.integrations.transformers import ShadowRecorder, patch, supported, unpatch  # noqa: E402
from moe_routing.measure.shadow import TINY_FAMILIES, run_shadow, tiny_model  # noqa: E402


def prompt(model, tokens=6, seed=0):
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
        assert all("forward" in m.__dict__ for m in routers)
        with pytest.raises(ValueError, match="already patched"):
            patch(model, mode)
        assert unpatch(model) == len(routers)
        assert all("forward" not in m.__dict__ and not hasattr(m, "_moe_routing_patch") for m in routers)
    with torch.no_grad():
        after = model(ids).logits
    assert torch.equal(before, after)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_replace_mode_routes_like_the_model_where_margins_are_clear(family):
    model = tiny_model(family, device=DEVICE)
    recorder = run_shadow(model, prompts=2, prompt_tokens=6, new_tokens=2)
    clear = recorder.rows - recorder.rows_of("exact tie") - recorder.rows_of("near tie")
    assert recorder.calls > 0 and recorder.rows_of("disagreement") == 0, recorder.summary()
    assert clear > 0 and recorder.max_weight_delta < 1e-5
    ids = prompt(model)
    with torch.no_grad():
        own = model(ids).logits
        patch(model, "replace")
        try:
            replaced = model(ids).logits
        finally:
            unpatch(model)
    torch.testing.assert_close(replaced, own, rtol=1e-4, atol=1e-4)


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
