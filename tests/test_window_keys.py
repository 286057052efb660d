"""The bitonic kernel's key encodings (kernels/_bitonic.py), on every plan the rules can choose.

Window keys quantise the choice value inside a window set by the bias; a row with fewer than K valid
experts inside it lands on the floor and is redone with exact keys; a non-finite bias entry, a window
outside (-8, 8) or more than 512 experts take the exact keys for the whole call.
"""

import math

import pytest
import torch

from conftest import DEVICE, route_every_plan

NAN = float("nan")


def _route_every_plan(logits, topk, bias):
    """(token class, weights, ids as lists) of every plan the rules choose for this sigmoid call, each
    checked against float64; every one of them is the bitonic kernel."""
    results = []
    for tclass, (plan, weights, ids) in route_every_plan(logits, topk, correction_bias=bias).items():
        assert plan.name == "bitonic", tclass
        results.append((tclass, weights, ids.cpu().tolist()))
    return results


def test_rows_below_the_window_are_redone_exactly():
    # bias spread 3: the window is [max b + 1 - 2, max b + 1] = [0.5, 2.5]; with logits of -20 every
    # choice value is its bias (plus 2e-9), so experts whose bias is below 0.5 fall under the window
    experts, topk = 64, 6
    bias = torch.linspace(-1.5, 1.5, experts, device=DEVICE)
    logits = torch.full((3, experts), -20.0, device=DEVICE)
    logits[1, 40:] = NAN  # every valid expert under the window: the whole row on the floor
    logits[2, 40:58] = NAN  # five valid experts in the window (58..62), the sixth pick from under it
    logits[2, 63] = NAN
    expected = [[63, 62, 61, 60, 59, 58], [39, 38, 37, 36, 35, 34], [62, 61, 60, 59, 58, 39]]
    for tclass, _, ids in _route_every_plan(logits, topk, bias):
        assert ids == expected, tclass


def _close_pair(gap: float, shift: float = 0.0, experts: int = 64):
    """Logits and bias under which experts 20 and 10 are chosen first, expert 20's choice value above
    expert 10's by ``gap`` (representable: the values are 0.75 + shift and that plus gap)."""
    bias = torch.full((experts,), shift)
    bias[10] = 0.25 + shift
    bias[20] = 0.25 + shift + gap
    logits = torch.zeros(2, experts)  # sigmoid(0) = 0.5 exactly: c = 0.5 + b
    return logits.to(DEVICE), bias.to(DEVICE)


def _float32_ulp(value: float) -> float:
    return 2.0 ** (math.floor(math.log2(abs(value))) - 23)


WINDOW_STEP = 1.25 / (2**23 - 256)  # the window of _close_pair without shift: [min b, max b + 1] = [0, 1.25]


def test_exact_keys_separate_values_one_ulp_apart():
    logits, bias = _close_pair(_float32_ulp(0.75))
    assert (0.5 + bias[20]).item() - (0.5 + bias[10]).item() == _float32_ulp(0.75)  # one float32 ulp apart
    bias[63] = NAN  # a non-finite bias entry: exact keys for the whole call
    for tclass, _, ids in _route_every_plan(logits, 2, bias):
        assert ids == [[20, 10]] * 2, tclass


@pytest.mark.parametrize("experts", [64, 256], ids=["window from bits", "window from floats"])
@pytest.mark.parametrize("entry", ["nan", "-nan", "inf", "-inf"])
def test_a_non_finite_bias_entry_of_either_sign_takes_exact_keys(entry, experts):
    # decode plans of short rows find the window's min and max from order-preserving bits, where a
    # NaN orders beyond the infinity of its sign; longer rows by float reductions: each kind of non-finite entry
    # alone must still make the window unusable on every plan
    logits, bias = _close_pair(_float32_ulp(0.75), experts=experts)
    bias[experts - 1] = -float(entry.lstrip("-")) if entry.startswith("-") else float(entry)
    if entry == "-nan":
        assert bias[experts - 1:].view(torch.int32).item() < 0  # the sign bit is set
    for tclass, _, ids in _route_every_plan(logits, 2, bias):
        assert ids == [[20, 10]] * 2, tclass


def test_window_keys_order_values_three_steps_apart():
    logits, bias = _close_pair(3 * WINDOW_STEP)
    for tclass, _, ids in _route_every_plan(logits, 2, bias):
        assert ids == [[20, 10]] * 2, tclass


def test_window_keys_may_order_values_within_a_step_by_index():
    # one ulp apart: a near tie (float64 gap 6e-8 < 1e-6), either order is right, and every plan
    # answers the same (batch invariance)
    logits, bias = _close_pair(_float32_ulp(0.75))
    answers = {str(ids) for _, _, ids in _route_every_plan(logits, 2, bias)}
    assert len(answers) == 1 and answers <= {str([[20, 10]] * 2), str([[10, 20]] * 2)}


@pytest.mark.parametrize("shift", [7.5, 12.0, -9.5])
def test_windows_outside_the_range_separate_values_one_float32_step_apart(shift):
    # a window outside (-8, 8): exact keys, which separate one float32 step of c
    logits, bias = _close_pair(_float32_ulp(0.75 + shift), shift)
    assert (0.5 + bias[20]).item() - (0.5 + bias[10]).item() == _float32_ulp(0.75 + shift)
    for tclass, _, ids in _route_every_plan(logits, 2, bias):
        assert ids == [[20, 10]] * 2, tclass


@pytest.mark.parametrize("shift", [3.25, 3.5, 4.0, 5.0, 5.5, 6.25])
def test_window_keys_of_biases_far_from_zero_separate_values_one_float32_step_apart(shift):
    """A trained checkpoint's bias can sit far from 0 (DeepSeek-V3's is reported around +5): windows inside (-8, 8)
    take window keys, whose steps (2.4e-7 at most) are at most half a float32 step of c from |c| = 4 up, so two
    values one float32 step apart keep their order there; the keys' FMA must round once (Triton's interpreter
    rounds its tl.fma twice, which can give both the same key)."""
    ulp = _float32_ulp(0.75 + shift)
    for place in range(8):  # c = 0.75 + shift + place steps: positions across a float32 binade's keys
        logits, bias = _close_pair(ulp, shift + place * 37 * ulp)
        assert (0.5 + bias[20]).item() - (0.5 + bias[10]).item() == ulp
        for tclass, _, ids in _route_every_plan(logits, 2, bias):
            assert ids == [[20, 10]] * 2, (tclass, place)


@pytest.mark.parametrize("shift", [4.5, -5.0])
def test_random_rows_with_a_bias_far_from_zero_match_float64_on_every_plan(shift):
    """Random rows (float64's ids wherever the margin is at least 1e-6, checked by route_every_plan) with every
    bias entry moved by ``shift``: window keys inside (-8, 8)."""
    gen = torch.Generator().manual_seed(17)
    logits = (torch.randn(6, 256, generator=gen) * 2).to(DEVICE)
    bias = (torch.randn(256, generator=gen) * 0.5 + shift).to(DEVICE)
    results = _route_every_plan(logits, 8, bias)
    assert len({str(ids) for _, _, ids in results}) == 1
