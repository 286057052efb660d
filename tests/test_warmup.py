"""warmup(): after it, route() calls of the warmed shapes at every token count compile nothing.

On a CPU the kernels run in Triton's interpreter, which compiles nothing, so the CPU tests compare Triton's own
cache keys (kernels/targets.py, for the H200's target): the key of every launch a sweep of route() calls makes
must be one warm-up compiled. On a GPU the test counts Triton's real compiles.
"""

import sys

import pytest
import torch

import moe_routing
from moe_routing import precompile
from moe_routing.kernels import targets

from conftest import DEVICE, ON_GPU

launch_module = sys.modules["moe_routing.kernels.launch"]

SHAPES = ("deepseek-v3", "kimi-k2", "moonlight", "qwen3-moe", "deepseek-v4")


def sweep_token_counts() -> list[int]:
    """Both sides of every token-class boundary, and beyond the last."""
    counts = {1, 2, 255, 256, 70000}
    for start in precompile.class_token_counts()[1:]:
        counts |= {start - 1, start, start + 1}
    return sorted(counts)


def sweep(shapes, dtype, ids_dtype=torch.int32, padded=False, unaligned=False, token_counts=None):
    """route() once for every token count of the sweep (or of ``token_counts``), every shape (outputs never
    read)."""
    for name in shapes:
        shape = moe_routing.MODEL_SHAPES[name]
        bias = None if shape.bias_dtype is None else torch.zeros(shape.experts, dtype=shape.bias_dtype, device=DEVICE)
        for tokens in sweep_token_counts() if token_counts is None else token_counts:
            storage = torch.zeros(tokens * shape.experts + 1, dtype=dtype, device=DEVICE)
            logits = (storage[1:] if unaligned else storage[:-1]).view(tokens, shape.experts)
            padding = torch.zeros(tokens, dtype=torch.bool, device=DEVICE) if padded else None
            moe_routing.route(logits, shape.topk, scoring_func=shape.scoring_func, correction_bias=bias,
                              num_expert_group=shape.num_expert_group, topk_group=shape.topk_group,
                              renormalize=shape.renormalize, is_padding=padding, ids_dtype=ids_dtype)


@pytest.fixture
def launch_keys(monkeypatch):
    """Replace the launch's Triton call by one that records Triton's cache key (as on an H200) and runs nothing:
    {"warmup": keys warm-up asked for, "calls": keys the calls asked for}."""
    keys = {"warmup": set(), "calls": set()}

    def record(plan, call, logits, bias, weights, ids, warmup=False, padding=None):
        args, kwargs = launch_module.triton_arguments(plan, call, logits, bias, weights, ids, padding)
        keys["warmup" if warmup else "calls"].add(targets.cache_key(plan.kernel, targets.TARGETS["sm_90"], args,
                                                                    kwargs))

    monkeypatch.setattr(launch_module, "_run_triton", record)
    monkeypatch.setattr(launch_module, "_launchers", {})
    return keys


needs_cpu = pytest.mark.skipif(ON_GPU, reason="the GPU test counts real compiles instead")


@needs_cpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_warmup_holds_every_kernel_a_sweep_launches(launch_keys, dtype):
    moe_routing.warmup(SHAPES, dtypes=(dtype,))
    sweep(SHAPES, dtype)
    assert len(launch_keys["calls"]) >= 20  # the sweep reaches many plans, not one
    assert launch_keys["calls"] <= launch_keys["warmup"]


@needs_cpu
def test_warmup_with_int64_ids_padding_and_unaligned_logits(launch_keys):
    moe_routing.warmup(["deepseek-v3", "deepseek-v4"], ids_dtypes=(torch.int32, torch.int64), padded=True,
                       unaligned=True)
    sweep(["deepseek-v3", "deepseek-v4"], torch.bfloat16, torch.int64, padded=True)
    sweep(["deepseek-v3", "deepseek-v4"], torch.bfloat16, unaligned=True)
    assert launch_keys["calls"] <= launch_keys["warmup"]


@needs_cpu
def test_warmup_of_token_counts_holds_their_kernels_only(launch_keys):
    """``token_counts``: the plans those counts take, every one of them, and fewer than every class's; a count
    of another class asks for a new kernel."""
    counts = (1, 64, 8192)
    moe_routing.warmup(["deepseek-v3"], token_counts=counts)
    warmed = set(launch_keys["warmup"])
    sweep(["deepseek-v3"], torch.bfloat16, token_counts=counts)
    assert launch_keys["calls"] and launch_keys["calls"] <= warmed
    sweep(["deepseek-v3"], torch.bfloat16, token_counts=(65536,))
    assert launch_keys["calls"] - warmed
    launch_keys["warmup"].clear()
    moe_routing.warmup(["deepseek-v3"])
    assert len(warmed) < len(launch_keys["warmup"])


@needs_cpu
@pytest.mark.parametrize("missing", ["dtype", "shape", "int64 ids", "padding", "unaligned"])
def test_a_sweep_outside_the_warmed_launches_asks_for_new_kernels(launch_keys, missing):
    """The check above can fail: each thing warm-up was not told about is a new key."""
    moe_routing.warmup(["deepseek-v3"], dtypes=(torch.bfloat16,))
    if missing == "dtype":
        sweep(["deepseek-v3"], torch.float16)
    elif missing == "shape":
        sweep(["kimi-k2"], torch.bfloat16)
    elif missing == "int64 ids":
        sweep(["deepseek-v3"], torch.bfloat16, torch.int64)
    elif missing == "padding":
        sweep(["deepseek-v3"], torch.bfloat16, padded=True)
    else:
        sweep(["deepseek-v3"], torch.bfloat16, unaligned=True)
    assert launch_keys["calls"] - launch_keys["warmup"]


@pytest.mark.skipif(not ON_GPU, reason="counts real Triton compiles: needs a GPU")
def test_no_compile_after_warmup_on_the_gpu():
    launch_module.forget_launchers()
    report = moe_routing.warmup(SHAPES, dtypes=(torch.bfloat16, torch.float32))
    assert report.compiled and report.kernels >= 20
    with precompile.counting_compiles() as compiled:
        for dtype in (torch.bfloat16, torch.float32):
            sweep(SHAPES, dtype)
        torch.cuda.synchronize()
    assert compiled == []
    with precompile.counting_compiles() as compiled:  # and the counter sees a compile when there is one
        sweep(["mixtral"], torch.float16)
    assert compiled


def test_model_shapes_cover_the_issue_models_and_route():
    for name in ("deepseek-v3", "kimi-k2", "moonlight", "qwen3-moe", "deepseek-v4"):
        shape = moe_routing.MODEL_SHAPES[name]
        logits = torch.randn(3, shape.experts, device=DEVICE)
        bias = None if shape.bias_dtype is None else torch.zeros(shape.experts, dtype=shape.bias_dtype,
                                                                  device=DEVICE)
        weights, ids = moe_routing.route(logits, shape.topk, scoring_func=shape.scoring_func, correction_bias=bias,
                                         num_expert_group=shape.num_expert_group, topk_group=shape.topk_group)
        assert ids.shape == (3, shape.topk)


def test_report_says_what_was_made_ready():
    report = moe_routing.warmup("moonlight", dtypes=(torch.bfloat16,))
    assert report.kernels >= 3 and report.seconds >= 0
    assert ("kernels for 1 routing shapes" if report.compiled else "nothing to compile") in str(report)


@pytest.mark.parametrize("call, error, message", [
    (lambda: moe_routing.warmup("deepseek-v9"), ValueError, "shapes: unknown model 'deepseek-v9'"),
    (lambda: moe_routing.warmup([3]), TypeError, "shapes must hold RoutingShape"),
    (lambda: moe_routing.warmup("kimi-k2", dtypes=(torch.int8,)), ValueError, "dtypes must be"),
    (lambda: moe_routing.warmup("kimi-k2", dtypes=()), ValueError, "dtypes must be"),
    (lambda: moe_routing.warmup("kimi-k2", ids_dtypes=(torch.uint8,)), ValueError, "ids_dtypes must be"),
    (lambda: moe_routing.warmup("kimi-k2", threads=0), ValueError, "threads must be"),
    (lambda: moe_routing.warmup("kimi-k2", token_counts=()), ValueError, "token_counts must be"),
    (lambda: moe_routing.warmup("kimi-k2", token_counts=(16, 0)), ValueError, "token_counts must be"),
    (lambda: moe_routing.warmup("kimi-k2", token_counts=(16.0,)), ValueError, "token_counts must be"),
    (lambda: moe_routing.RoutingShape(64, 6, "tanh"), ValueError, "scoring_func must be"),
    (lambda: moe_routing.RoutingShape(64, 6, bias_dtype="float32"), TypeError, "bias_dtype must be"),
    (lambda: moe_routing.warmup(moe_routing.RoutingShape(64, 70)), ValueError, "topk"),
    (lambda: moe_routing.warmup(moe_routing.RoutingShape(60, 4, num_expert_group=7, topk_group=2)), ValueError,
     "num_expert_group"),
])
def test_warmup_errors_name_the_argument(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("value", ["0", "1,x", "", "-4"])
def test_warmup_cli_refuses_bad_token_counts(value):
    from click.testing import CliRunner

    from moe_routing.cli import main

    result = CliRunner().invoke(main, ["warmup", "--tokens", value])
    assert result.exit_code == 2 and "--tokens" in result.output and "token counts >= 1" in result.output


@needs_cpu
def test_warmup_cli_passes_its_token_counts(monkeypatch):
    from click.testing import CliRunner

    from moe_routing.cli import main

    told = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(precompile, "warmup", lambda *args, **kwargs: told.append(kwargs) or "warmed")
    result = CliRunner().invoke(main, ["warmup", "--model", "moonlight", "--tokens", "1,16,64"])
    assert result.exit_code == 0, result.output
    assert told[0]["token_counts"] == (1, 16, 64)
