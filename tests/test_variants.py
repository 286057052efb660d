"""Every kernel variant (``rules.VARIANTS``) is documented and has a test that fails when it breaks.

The switches of the bitonic kernel are tested here one by one: on the plans where the rule turns a switch on, the
same plan with it off must give the same bits (every switch changes when values arrive or where they go, never
which values are used) and both must match float64, on rows of NaN, -inf, +inf among finite logits, exact ties
and tied groups, with window keys and with exact keys. A plan found for several switches runs once, against each
of them switched off.
"""

import re
from pathlib import Path

import pytest
import torch

from conftest import ON_GPU, assert_fully_written, poisoned_out
from moe_routing.call import check_call
from moe_routing.kernels import launch
from moe_routing.kernels.rules import CLASS_NAMES, SWITCHES, VARIANTS, choose_plan, two_passes
from moe_routing.measure.census import hard_inputs
from moe_routing.verify import verify

ROOT = Path(__file__).resolve().parents[1]
SWITCH_SHAPES = [  # (experts, topk, groups, kept, scoring, with_bias)
    (256, 8, 1, 1, "sigmoid", True), (256, 8, 8, 4, "sigmoid", True), (384, 8, 1, 1, "sigmoid", True),
    (160, 8, 1, 1, "sigmoid", True), (512, 8, 1, 1, "sigmoid", True), (128, 8, 1, 1, "softmax", False),
    (64, 6, 1, 1, "sigmoid", True), (256, 8, 1, 1, "sigmoid", False), (128, 8, 1, 1, "sigmoid", True),
]
BOOLEAN_SWITCHES = sorted({s.constexpr for s in SWITCHES} | {"DENSE_OUT"})


def _switched_off(plan, name):
    """``plan`` with the variant ``name`` at its default (the other switches as they were)."""
    if name == "ONE_PASS":
        return two_passes(plan)  # word loads need the one-pass stream
    c = dict(plan.constexprs)
    if name == "ROUNDS":
        c["HANDOVER"] = False  # the handover belongs to the rounds
    c[name] = name == "CHECKED_STREAM"  # every switch's default is off but the checked stream's
    return plan._replace(constexprs=c)


def _plans_with(name, limit=2):
    """Up to ``limit`` distinct rule plans (bf16 logits) in which the switch ``name`` is not at its default."""
    found = []
    for experts, topk, groups, kept, scoring, with_bias in SWITCH_SHAPES:
        call = check_call(torch.zeros(1, experts, dtype=torch.bfloat16), topk, scoring,
                          torch.zeros(experts) if with_bias else None, groups, kept, True, 2.5, None)
        for tclass in range(len(CLASS_NAMES)):
            plan = choose_plan(call, tclass, wide_loads=True, biased=with_bias)
            if plan.name != "bitonic" or plan.constexprs[name] == (name == "CHECKED_STREAM"):
                continue
            if all(plan != other for _, other in found):
                found.append(((experts, topk, groups, kept, scoring, with_bias), plan))
            if len(found) == limit:
                return found
    return found


def _switch_cases():
    """(shape, plan, switches) for each distinct plan of ``_plans_with`` over every switch: a plan in which several
    switches are on is run once and compared with each of them switched off."""
    cases = []
    for name in BOOLEAN_SWITCHES:
        for shape, plan in _plans_with(name):
            same = next((case for case in cases if case[1] == plan), None)
            if same is None:
                cases.append((shape, plan, [name]))
            else:
                same[2].append(name)
    return cases


SWITCH_CASES = _switch_cases()


def _case_id(shape, plan, switches):
    """The switches tested, the shape, the tile (rows x lanes) and whether it loads a step ahead."""
    prefetch = "-prefetch" if plan.constexprs["PREFETCH"] else ""
    return f"{'+'.join(switches)}-{'-'.join(map(str, shape[:4]))}-{plan.rows}x{plan.constexprs['LANES']}{prefetch}"


def test_every_switch_has_rule_plans():
    """Every switch is on in some rule plan of SWITCH_SHAPES, and ``test_variant_switch_keeps_the_bits`` runs it."""
    for name in BOOLEAN_SWITCHES:
        assert _plans_with(name), f"no rule plan switches {name}: the rule or SWITCH_SHAPES changed"
        assert sum(name in switches for _, _, switches in SWITCH_CASES) == len(_plans_with(name)), name


@pytest.mark.parametrize("shape,plan,switches", SWITCH_CASES,
                         ids=[_case_id(*case) for case in SWITCH_CASES])
def test_variant_switch_keeps_the_bits(shape, plan, switches):
    """The rule's plan and, for each switch it has on, the same plan with that switch off: the same bits, both
    matching float64. Tokens: the special rows of ``hard_inputs`` (at least 5), and programs enough that one is not
    the first and one is cut short by the last row."""
    experts, topk, groups, kept, scoring, with_bias = shape
    tokens = 64 * plan.rows + 3 if ON_GPU else max(plan.rows + 1, 5)
    logits, bias = hard_inputs(experts, groups, tokens, "cuda" if ON_GPU else "cpu", experts + topk)
    for shift in ((0.0, 8.0) if with_bias and scoring == "sigmoid" else (None,)):
        b = None if shift is None else bias + shift
        call = check_call(logits, topk, scoring, b, groups, kept, True, 2.5, None)
        results = []
        for name, variant in [(None, plan)] + [(name, _switched_off(plan, name)) for name in switches]:
            weights, ids = poisoned_out(tokens, topk, logits.device)
            launch(call, logits, b, weights, ids, plan=variant)
            assert_fully_written(weights, ids)
            verdict = verify(weights, ids, logits, topk, scoring_func=scoring, correction_bias=b,
                             num_expert_group=groups, topk_group=kept, routed_scaling_factor=2.5)
            assert verdict.ok, (name, variant.constexprs, shift, verdict)
            results.append((name, weights, ids))
        _, w_on, i_on = results[0]
        for name, w_off, i_off in results[1:]:
            assert torch.equal(i_on, i_off) and torch.equal(w_on, w_off), (name, plan.constexprs, shift)


def test_every_switch_of_the_kernel_is_a_variant():
    """Every boolean constexpr of the bitonic kernel that changes how it computes, not what, is named."""
    from moe_routing.kernels import _bitonic

    source = Path(_bitonic.__file__).read_text()
    signature = source[source.index("def bitonic_kernel("):source.index("):", source.index("def bitonic_kernel("))]
    switches = set(re.findall(r"(\w+): tl\.constexpr = (?:True|False)", signature)) | {"PREFETCH", "WORDS", "ONE_PASS"}
    assert switches <= set(VARIANTS), switches - set(VARIANTS)


def test_every_variant_is_documented_and_tested():
    """docs/kernels.md names every variant; each names a test function that exists."""
    docs = (ROOT / "docs" / "kernels.md").read_text()
    tests = "\n".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py"))
    for name, variant in VARIANTS.items():
        assert f"`{name}`" in docs, f"docs/kernels.md does not name the variant {name!r}"
        assert f"def {variant.test}(" in tests, f"{name}: no test {variant.test}"
