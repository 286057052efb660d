"""The measuring tools: the float64 judge catches what it must, the report renders, the CLI parses."""

import importlib.util
import json

import pytest
import torch
from click.testing import CliRunner

import moe_routing
from conftest import DEVICE, random_bias, random_logits
from moe_routing.cli import _parse_shapes, main
from moe_routing.measure.bench import Measurement, Shape
from moe_routing.measure.suite import markdown, plot
from moe_routing.verify import verify


def good_result():
    logits = random_logits(6, 64, torch.float32, seed=1)
    bias = random_bias(64, seed=2)
    weights, ids = moe_routing.route(logits, 4, correction_bias=bias)
    return logits, bias, weights.clone(), ids.clone()


def test_judge_accepts_a_correct_result():
    logits, bias, weights, ids = good_result()
    assert verify(weights, ids, logits, 4, correction_bias=bias).ok


@pytest.mark.parametrize("damage", ["swap order", "wrong expert", "repeat", "out of range", "nan weight", "weight off"])
def test_judge_rejects_damaged_results(damage):
    logits, bias, weights, ids = good_result()
    if damage == "swap order":
        ids[0, [0, 1]] = ids[0, [1, 0]]
    elif damage == "wrong expert":
        ids[0, 3] = next(e for e in range(64) if e not in ids[0].tolist())
    elif damage == "repeat":
        ids[0, 1] = ids[0, 0]
    elif damage == "out of range":
        ids[0, 0] = 64
    elif damage == "nan weight":
        weights[0, 0] = float("nan")
    else:
        weights[0, 0] += 1e-5
    verdict = verify(weights, ids, logits, 4, correction_bias=bias)
    assert not verdict.ok, damage


def test_judge_rejects_a_forbidden_group():
    logits = random_logits(4, 64, torch.float32, seed=3)
    bias = random_bias(64, seed=4)
    weights, ids = moe_routing.route(logits, 4, correction_bias=bias)  # ungrouped answer ...
    grouped = moe_routing.route(logits, 4, correction_bias=bias, num_expert_group=8, topk_group=1)
    if torch.equal(ids, grouped[1]):
        pytest.skip("this draw happens to agree")
    assert not verify(weights, ids, logits, 4, correction_bias=bias, num_expert_group=8, topk_group=1).ok


def test_drift_is_the_spread_of_an_arms_own_rounds():
    m = Measurement("a", Shape(256, 8, 1), [2.0, 2.2, 2.1], [])
    summary = m.summary()["device"]
    assert summary["median"] == 2.1 and summary["drift"] == pytest.approx(0.2 / 2.1)
    assert m.summary()["host"] == {}


def synthetic_result():
    rows = []
    for tokens in (1, 128, 65536):
        for arm, base in (("moe_routing.route(out=)", 1.0), ("reference (eager)", 50.0), ("bytes floor", 0.1)):
            value = base * (1 + tokens / 1000)
            rows.append({"experts": 256, "topk": 8, "groups": 8, "topk_group": 4, "tokens": tokens,
                         "scoring": "sigmoid", "bias": True, "dtype": "bfloat16", "label": "256 / 8 / 4 of 8",
                         "arm": arm, "device_median": value, "device_min": value, "device_max": value * 1.01,
                         "device_drift": 0.01, **({"host_median": 5.0, "host_drift": 0.02} if tokens == 1 else {})})
    return {"gpu": "Test GPU", "torch": "x", "triton": "y", "moe_routing": "0", "date": "2026-11-29T00:00:00+00:00",
            "command": "moe-routing bench", "copy_bandwidth_TBps": 4.2, "calls_per_graph": 50, "replays": 20,
            "rounds": 3, "engine_notes": {"vLLM grouped_topk": ["not importable"]}, "rows": rows}


def test_markdown_table_has_every_arm_shape_and_target(tmp_path):
    text = markdown(synthetic_result())
    assert "| 256 / 8 / 4 of 8 | 65536 |" in text and "≤ 20.0" in text and "≤ 1.6" in text
    assert "moe_routing.route(out=)" in text and "bytes floor" in text and "±1%" in text
    assert "Eager host time" in text and "vLLM grouped_topk: not importable" in text
    plot(synthetic_result(), tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 10_000
    json.dumps(synthetic_result())


def test_shape_specs_parse():
    shapes = _parse_shapes(("256/8/8:4", "128/8/softmax/nobias/fp32"), "1,128")
    assert [(s.experts, s.topk, s.groups, s.topk_group, s.tokens) for s in shapes[:2]] == [(256, 8, 8, 4, 1),
                                                                                          (256, 8, 8, 4, 128)]
    assert shapes[2].scoring == "softmax" and not shapes[2].bias and shapes[2].dtype == torch.float32
    with pytest.raises(Exception, match="expected E/K"):
        _parse_shapes(("256/8/what",), "1")


def test_a_shape_can_shift_its_bias():
    """``/bias+SHIFT`` moves every bias entry (trained checkpoints' biases need not sit around 0); the label says so,
    and a non-number or non-finite shift is refused."""
    from moe_routing.measure.bench import make_inputs

    shifted, plain = _parse_shapes(("256/8/8:4/bias+5", "256/8/8:4"), "3")
    assert shifted.bias_shift == 5.0 and plain.bias_shift == 0.0
    assert shifted.label == "256 / 8 / 4 of 8 bias+5" and plain.label == "256 / 8 / 4 of 8"
    assert _parse_shapes(("64/6/bias-2.5",), "1")[0].bias_shift == -2.5
    bias = make_inputs(shifted, device="cpu", l2_bytes=0).bias
    torch.testing.assert_close(bias - 5.0, make_inputs(plain, device="cpu", l2_bytes=0).bias)
    for spec in ("256/8/bias+x", "256/8/bias+inf", "256/8/bias+nan"):
        with pytest.raises(Exception, match="expected E/K"):
            _parse_shapes((spec,), "1")


@pytest.mark.skipif(DEVICE == "cuda", reason="checks the CPU refusal")
def test_bench_refuses_without_gpu():
    result = CliRunner().invoke(main, ["bench"])
    assert result.exit_code == 2 and "needs a CUDA GPU" in result.output


def test_straightforward_peer_is_checked_before_it_is_timed(monkeypatch):
    """The peer arm routes correctly on clean inputs (it is timed only after this same check)."""
    from moe_routing.measure.arms import PEERS, checked_engine_arm
    from moe_routing.measure.bench import Inputs

    shape = Shape(64, 6, 5)
    gen = torch.Generator().manual_seed(0)
    inputs = Inputs(shape, [(torch.randn(5, 64, generator=gen) * 2).bfloat16().to(DEVICE)],
                    (torch.randn(64, generator=gen) * 0.5).to(DEVICE))
    if DEVICE == "cpu":
        monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)  # the check syncs a GPU; none here
    call, note = checked_engine_arm("straightforward Triton", PEERS["straightforward Triton"], inputs, bias_cast=False)
    assert call is not None, note
    assert PEERS["straightforward Triton"](Inputs(Shape(256, 8, 5, 8, 4), inputs.logits, inputs.bias)) is None


def test_an_engine_arm_runs_from_the_engines_source_file(tmp_path, monkeypatch):
    """``--engine-source vllm=DIR``: the dsv4_topk arm loads the file from DIR with vLLM's two helpers supplied, and
    leaves no stand-in vLLM module behind."""
    import sys

    import triton

    from moe_routing.measure import arms

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: the arm imports it instead")
    path = tmp_path / "vllm/model_executor/layers/fused_moe/router/dsv4_topk.py"
    path.parent.mkdir(parents=True)
    path.write_text("from vllm.platforms import current_platform\nfrom vllm.triton_utils import tl, triton\n"
                    "CUDA = current_platform.is_cuda()\n\n\ndef dsv4_topk(*args):\n    return 'ran'\n")
    monkeypatch.setitem(arms.ENGINE_SOURCES, "vllm", str(tmp_path))
    module = arms._vllm_dsv4_module()
    assert module.dsv4_topk() == "ran" and module.tl is triton.language
    assert module.CUDA == torch.cuda.is_available()
    assert not any(name == "vllm" or name.startswith("vllm.") for name in sys.modules)
    monkeypatch.setitem(arms.ENGINE_SOURCES, "vllm", str(tmp_path / "elsewhere"))
    with pytest.raises(FileNotFoundError, match="engine-source"):
        arms._vllm_dsv4_module()


def test_bench_refuses_an_engine_source_that_is_not_a_directory(tmp_path):
    from click.testing import CliRunner

    from moe_routing.cli import main

    result = CliRunner().invoke(main, ["bench", "--engine-source", f"vllm={tmp_path / 'missing'}"])
    assert result.exit_code == 2 and "is not a directory" in result.output
    result = CliRunner().invoke(main, ["bench", "--engine-source", "vllm"])
    assert result.exit_code == 2 and "ENGINE=DIR" in result.output


def test_the_bench_table_compares_sqrtsoftplus_with_sigmoid_and_dsv4():
    from moe_routing.measure.suite import scoring_comparison

    def row(scoring, arm, median):
        return {"experts": 256, "topk": 6, "groups": 1, "topk_group": 1, "tokens": 64, "bias": True,
                "dtype": "float32", "scoring": scoring, "arm": arm, "device_median": median, "device_drift": 0.01}

    result = {"rows": [row("sqrtsoftplus", "moe_routing.route(out=)", 2.0), row("sigmoid", "moe_routing.route(out=)", 1.6),
                       row("sqrtsoftplus", "vLLM dsv4_topk", 3.0)]}
    lines = scoring_comparison(result)
    assert lines[-1] == "| 256 / 6 | 64 | float32 | 2.00 ±1% | 1.60 ±1% | 1.25 | 3.00 ±1% | 1.50x |"
    assert scoring_comparison({"rows": result["rows"][1:]}) == []


def test_check_compares_each_plan_with_the_reference_and_fails_a_wrong_one(monkeypatch):
    from moe_routing.measure import check

    mixtral = [c for c in check.MODEL_CASES if c.name == "Mixtral"]
    row = check.run_check(8, DEVICE, mixtral)[0]
    # 2 block sizes x 3 map roles, 2 groups; route_plan at 1 and 8 tokens in both layouts
    assert row["plans equal to reference"] == "12/12" and row["ok"] == "yes"
    real_align = check.align

    def off_by_one(*args, **kwargs):
        sorted_ids, expert_ids, post_padded = real_align(*args, **kwargs)
        return sorted_ids, expert_ids, post_padded + 1

    monkeypatch.setattr(check, "align", off_by_one)
    row = check.run_check(8, DEVICE, mixtral)[0]
    assert row["plans equal to reference"] == "6/12" and row["ok"] == "NO"
    monkeypatch.setattr(check, "align", real_align)
    real_route_plan = check.route_plan

    def poisoned_ids(*args, **kwargs):
        plan = real_route_plan(*args, **kwargs)
        plan.ids[-1, -1] = -7
        return plan

    monkeypatch.setattr(check, "route_plan", poisoned_ids)
    row = check.run_check(8, DEVICE, mixtral)[0]
    assert row["plans equal to reference"] == "8/12" and row["ok"] == "NO"


def test_check_runs_route_plan_at_the_sizes_that_take_one_launch():
    """One token, the grid kernel's first token count where the batch holds it (64 tokens above 256 experts, 256
    up to 256, none up to 128), and the whole batch."""
    from moe_routing.measure.check import route_plan_sizes

    assert route_plan_sizes(4096, 384) == [1, 64, 4096] and route_plan_sizes(4096, 256) == [1, 256, 4096]
    assert route_plan_sizes(4096, 128) == [1, 4096] and route_plan_sizes(24, 384) == [1, 24]
    assert route_plan_sizes(1, 8) == [1]


def test_plan_kernels_compiled_ahead_are_each_distinct_launch_once(monkeypatch):
    """The bench's and the report's compile-ahead of dispatch-plan kernels: every launch their plans take, each
    distinct binary once. A decode plan without a map is one launch; a chunked plan with a map (blocks layout with
    the map's two roles, grouped layout) is two placing launches (one a layout: the map's role is a runtime
    argument) and one counting launch (the layout does not reach it); block sizes are not compiled into the
    binary."""
    from moe_routing.kernels import _plan
    from moe_routing.measure.suite import compile_plan_kernels_ahead

    seen = []
    monkeypatch.setattr(_plan.plan_kernel, "warmup", lambda *args, grid, **kwargs: seen.append(kwargs))
    count = compile_plan_kernels_ahead([(1, 8, 256, 0, (16,)), (4096, 8, 256, 64, (16, 64, None)),
                                        (4096, 8, 256, 64, (128,))], device=DEVICE)
    assert count == len(seen) == 4
    stages = sorted((k["STAGE"], k["LAYOUT"]) for k in seen)
    assert stages == [(_plan.PER_BIN, _plan.BLOCKS), (_plan.COUNT, _plan.BLOCKS), (_plan.PLACE_CHUNK, _plan.BLOCKS),
                      (_plan.PLACE_CHUNK, _plan.GROUPED)]
    # the decode plan: 8 slots, the 32-lane class on one warp; the chunks: warps by their bins and chunk
    from moe_routing.kernels.plan_launch import chunk_warps
    assert all(k["num_warps"] == (1 if k["STAGE"] == _plan.PER_BIN else chunk_warps(k["BINS"], k["SLOTS"]))
               for k in seen)


def test_compile_ahead_warms_the_token_counts_the_shapes_time(monkeypatch):
    """The bench's compile-ahead warms each routing shape at the token counts its shapes (stage and layer shapes
    included) time, in the logits dtypes they use: not every token class."""
    from moe_routing import precompile
    from moe_routing.measure import suite

    warmed = {}
    monkeypatch.setattr(precompile, "warmup", lambda routing, dtypes, token_counts: warmed.setdefault(
        (routing.experts, routing.topk, routing.scoring_func, routing.num_expert_group), []).append(
            (tuple(dtypes), tuple(token_counts))))
    monkeypatch.setattr(suite, "compile_plan_kernels_ahead", lambda plans: None)
    shapes = suite.PRESETS["plan"] + suite.PRESETS["moe-layer"]
    suite.compile_ahead(shapes)
    expected = {}
    for shape in shapes:
        routing = getattr(shape, "routing", shape)
        dtypes, tokens = expected.setdefault((routing.experts, routing.topk, routing.scoring, routing.groups),
                                             (set(), set()))
        dtypes.add(routing.dtype)
        tokens.add(shape.tokens)
    assert {key: calls[0][1] for key, calls in warmed.items()} == {
        key: tuple(sorted(tokens)) for key, (_, tokens) in expected.items()}
    assert all(len(calls) == 1 and set(calls[0][0]) == expected[key][0] for key, calls in warmed.items())
    assert (256, 8, "sigmoid", 8) in warmed and 65536 in warmed[(256, 8, "sigmoid", 8)][0][1]
