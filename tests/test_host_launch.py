"""The C++ host path of route() (kernels/host_launch.py).

Everywhere (the extension is built here too): it accepts only calls that ``check_call`` accepts, with the
same normalised call, declines every bad call (so the Python path raises the documented error), and keys
calls exactly as the Python launcher cache does. On a GPU: its launches give the Python path's bits
for every token class, layout and dtype, inside CUDA graphs too, and it steps aside for launch hooks.
"""

import contextlib
import itertools
import os
import shutil

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import DEVICE, ON_GPU, POISON_ID, poisoned_out
from moe_routing import op
from moe_routing.call import check_call
from moe_routing.kernels import host_launch
from moe_routing.kernels.launch import dense_outputs, forget_launchers, launcher_key
from test_errors import BAD_CALLS


@pytest.fixture(scope="module")
def host():
    op._kernel_module()  # route() listens for the extension before it loads (so host_route sees its entry)
    module = host_launch.load(require_driver=ON_GPU)
    assert module is not None, "the C++ host path did not build (a C++ compiler and ninja are needed)"
    return module


def route_args(logits, topk, scoring_func="sigmoid", correction_bias=None, num_expert_group=1, topk_group=1,
               renormalize=True, routed_scaling_factor=1.0, out=None):
    """route()'s arguments in the order the C++ entry point takes them."""
    return (logits, topk, scoring_func, correction_bias, num_expert_group, topk_group, renormalize,
            routed_scaling_factor, out)


def python_check(args):
    try:
        return tuple(check_call(*args))
    except (TypeError, ValueError):
        return None


def ordinary_calls():
    """Valid calls of every kind an engine makes: each must be accepted, with check_call's normalised call."""
    calls = []
    for dtype, (experts, topk, groups, kept), bias_dtype, scoring, renorm, scale, out_kind in itertools.product(
            (torch.float32, torch.bfloat16, torch.float16),
            ((1, 1, 1, 1), (64, 6, 1, 1), (256, 8, 8, 4), (256, 8, 8, 8), (256, 8, 8, 9), (160, 8, 4, 1)),
            (None, torch.float32, torch.bfloat16, torch.float64),
            ("sigmoid", "softmax"), (True, False), (1.0, 2.5, 2), ("none", "tuple", "list")):
        tokens = 3
        logits = torch.randn(tokens, experts).to(dtype).to(DEVICE)
        bias = None if bias_dtype is None else torch.randn(experts).to(bias_dtype).to(DEVICE)
        out = None
        if out_kind != "none":
            out = poisoned_out(tokens, topk)
            out = out if out_kind == "tuple" else list(out)
        calls.append(route_args(logits, topk, scoring, bias, groups, kept, renorm, scale, out))
    return calls


def test_accepts_ordinary_calls_with_the_python_normalisation(host):
    calls = ordinary_calls()
    assert len(calls) > 1000
    for args in calls:
        expected = python_check(args)
        assert expected is not None
        assert host.check(*args) == expected


@pytest.mark.parametrize("description,args,kwargs,error,argument", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_declines_every_bad_call(host, description, args, kwargs, error, argument):
    assert host.check(*route_args(*args, **kwargs)) is None
    assert host.key(*route_args(*args, **kwargs)) is None


ARGUMENT_VALUES = dict(
    topk=[1, 2, 8, 0, -1, 2.0, True, 65, 10**30],
    scoring_func=["sigmoid", "softmax", "relu", 1, None],
    num_expert_group=[1, 2, 3, 8, 0, 128, 2.0, False, None],
    topk_group=[1, 2, 4, 8, 9, 0, None, 1.0],
    renormalize=[True, False, 1, None],
    routed_scaling_factor=[1.0, 2.5, 3, -0.5, float("nan"), float("inf"), "2", True, 10**400],
)


@settings(max_examples=400, deadline=None)
@given(experts=st.sampled_from([1, 8, 24, 64, 256]), dtype=st.sampled_from([torch.float32, torch.bfloat16,
                                                                           torch.float64, torch.int32]),
       bias=st.sampled_from(["none", "fp32", "short", "int", "2-D", "list"]),
       out=st.sampled_from(["none", "good", "dtype", "shape", "single", "triple"]),
       values=st.fixed_dictionaries({name: st.sampled_from(v) for name, v in ARGUMENT_VALUES.items()}))
def test_never_accepts_what_check_call_refuses(host, experts, dtype, bias, out, values):
    logits = torch.zeros(4, experts, dtype=dtype)
    bias_value = {"none": None, "fp32": torch.zeros(experts), "short": torch.zeros(max(experts - 1, 0)),
                  "int": torch.zeros(experts, dtype=torch.int64), "2-D": torch.zeros(1, experts),
                  "list": [0.0] * experts}[bias]
    k = values["topk"] if isinstance(values["topk"], int) and 0 < values["topk"] < 100 else 2
    good = (torch.empty(4, k), torch.empty(4, k, dtype=torch.int32))
    out_value = {"none": None, "good": good, "dtype": (good[0].half(), good[1]), "shape": (good[0][:3], good[1]),
                 "single": good[0], "triple": good + (good[0],)}[out]
    args = (logits, values["topk"], values["scoring_func"], bias_value, values["num_expert_group"],
            values["topk_group"], values["renormalize"], values["routed_scaling_factor"], out_value)
    accepted = host.check(*args)
    if accepted is not None:
        assert accepted == python_check(args)


def python_key(args):
    logits, bias, out = args[0], args[3], args[8]
    call = check_call(*args)
    dense = out is None or dense_outputs(out[0], out[1], call.topk)  # route() allocates dense outputs
    return launcher_key(call, logits, bias, logits.get_device(), logits.data_ptr(),
                        None if bias is None else bias.data_ptr(), logits.stride(0), dense)


def key_variants():
    """Calls that differ from a base call in one thing the launcher cache may or may not key on."""
    base = torch.randn(100, 272).to(torch.bfloat16).to(DEVICE)
    logits = base[:, :256]  # aligned, row stride 272 (a multiple of 16)
    bias = torch.randn(260).to(DEVICE)
    variants = {
        "base": route_args(logits, 8, correction_bias=bias[:256], num_expert_group=8, topk_group=4),
        "other scale": route_args(logits, 8, correction_bias=bias[:256], num_expert_group=8, topk_group=4,
                                  routed_scaling_factor=2.5),
        "tokens, same class": route_args(logits[:7], 8, correction_bias=bias[:256], num_expert_group=8,
                                         topk_group=4),
        "tokens, next class": route_args(torch.randn(257, 272).to(torch.bfloat16).to(DEVICE)[:, :256], 8,
                                         correction_bias=bias[:256], num_expert_group=8, topk_group=4),
        "unaligned logits": route_args(base[:, 1:257], 8, correction_bias=bias[:256], num_expert_group=8,
                                       topk_group=4),
        "contiguous rows": route_args(logits.contiguous(), 8, correction_bias=bias[:256], num_expert_group=8,
                                      topk_group=4),
        "odd row stride": route_args(torch.randn(100, 263).to(torch.bfloat16).to(DEVICE)[:, :256], 8,
                                     correction_bias=bias[:256], num_expert_group=8, topk_group=4),
        "unaligned bias": route_args(logits, 8, correction_bias=bias[1:257], num_expert_group=8, topk_group=4),
        "no bias": route_args(logits, 8, num_expert_group=8, topk_group=4),
        "bias dtype": route_args(logits, 8, correction_bias=bias[:256].double(), num_expert_group=8, topk_group=4),
        "logits dtype": route_args(logits.half(), 8, correction_bias=bias[:256], num_expert_group=8, topk_group=4),
        "flat": route_args(logits, 8, correction_bias=bias[:256]),
        "uneliminating groups": route_args(logits, 8, correction_bias=bias[:256], num_expert_group=8,
                                           topk_group=8),
        "topk": route_args(logits, 6, correction_bias=bias[:256], num_expert_group=8, topk_group=4),
        "renormalize": route_args(logits, 8, correction_bias=bias[:256], num_expert_group=8, topk_group=4,
                                  renormalize=False),
        "softmax": route_args(logits, 8, "softmax", bias[:256], 8, 4),
        "out given": route_args(logits, 8, correction_bias=bias[:256], num_expert_group=8, topk_group=4,
                                out=poisoned_out(100, 8)),
        "strided out": route_args(logits, 8, correction_bias=bias[:256], num_expert_group=8, topk_group=4,
                                  out=tuple(t[:, :8] for t in poisoned_out(100, 12))),
        "unaligned out": route_args(logits, 8, correction_bias=bias[:256], num_expert_group=8, topk_group=4,
                                    out=tuple(t.view(-1)[1:801].view(100, 8) for t in poisoned_out(101, 8))),
    }
    return variants


def test_keys_calls_as_the_python_launcher_cache(host):
    variants = key_variants()
    keys = {name: host.key(*args) for name, args in variants.items()}
    assert all(key is not None for key in keys.values())
    python_keys = {name: python_key(args) for name, args in variants.items()}
    for a, b in itertools.combinations(variants, 2):
        assert (keys[a] == keys[b]) == (python_keys[a] == python_keys[b]), (a, b)
    # the key is not trivially coarse or fine: these pairs must share one, these must not
    assert keys["base"] == keys["other scale"] == keys["tokens, same class"] == keys["out given"]
    assert keys["flat"] == keys["uneliminating groups"]
    assert keys["strided out"] == keys["unaligned out"]  # both not dense (launch.dense_outputs)
    assert len({keys[name] for name in ("base", "tokens, next class", "unaligned logits", "odd row stride",
                                        "unaligned bias", "no bias", "bias dtype", "logits dtype", "flat", "topk",
                                        "renormalize", "softmax", "strided out")}) == 13


def test_declines_layouts_the_python_path_copies(host):
    logits = torch.randn(256, 8).to(DEVICE).t()  # column stride 8
    assert host.check(*route_args(logits, 2)) is not None
    assert host.key(*route_args(logits, 2)) is None
    bias = torch.randn(512).to(DEVICE)[::2]
    assert host.key(*route_args(torch.randn(4, 256).to(DEVICE), 2, correction_bias=bias)) is None


def test_declines_cpu_tensors_even_when_registered(host):
    logits = torch.randn(4, 64)
    args = route_args(logits, 4, out=poisoned_out(4, 4, "cpu"))
    assert host.register(*args, 0, 1, 0, 1, (0, 2, 3, 4, 5, 6, 7, 8, 9, 10), False) is not None
    try:
        assert host.route(*args) is None
        assert (args[-1][1] == POISON_ID).all()
    finally:
        forget_launchers()  # both caches: the Python one must not keep keys the C++ one forgot


def test_declines_pdl_kernels_without_cuLaunchKernelEx(host):
    """A kernel launched with programmatic dependent launch needs the driver's cuLaunchKernelEx: where it
    cannot be found, registering it is declined (its calls stay on the Python path, which Triton launches) and calls of
    its key are not taken here; a kernel launched plainly registers."""
    if host.open_driver():
        pytest.skip("this machine has a CUDA driver: cuLaunchKernelEx is found")
    args = route_args(torch.randn(4, 64), 4, out=poisoned_out(4, 4, "cpu"))
    codes = (0, 2, 3, 4, 5, 6, 7, 8, 9, 10)
    try:
        assert host.register(*args, 0, 1, 0, 1, codes, True) is None
        assert host.size() == 0
        assert host.register(*args, 0, 1, 0, 1, codes, False) is not None
        assert host.size() == 1
    finally:
        forget_launchers()
    with pytest.raises(TypeError, match="register expects 15 arguments, got 14"):
        host.register(*args, 0, 1, 0, 1, codes)


def test_ninja_comes_from_its_package_when_none_is_on_path(monkeypatch):
    import ninja

    monkeypatch.setenv("PATH", "/nonexistent")
    with host_launch._ninja_on_path():
        assert shutil.which("ninja") == os.path.join(ninja.BIN_DIR, "ninja")
    assert os.environ["PATH"] == "/nonexistent"


# --- on a GPU: the launches themselves ------------------------------------------------------------

gpu = pytest.mark.skipif(not ON_GPU, reason="the C++ launch needs a CUDA device")


@contextlib.contextmanager
def host_route(entry):
    previous = op._host_route
    op.use_host_route(entry)
    try:
        yield
    finally:
        op.use_host_route(previous)


def launched_by_host(host, args):
    """route() on the C++ path, after one Python-path call registered its plan; asserts it launched there."""
    kwargs = dict(zip(("scoring_func", "correction_bias", "num_expert_group", "topk_group", "renormalize",
                       "routed_scaling_factor", "out"), args[2:]))
    with host_route(None):
        expected = op.route(args[0], args[1], **kwargs)
        expected = tuple(t.clone() for t in expected)
    with host_route(host.route):
        before = host.launches()
        result = op.route(args[0], args[1], **kwargs)
        assert host.launches() == before + 1, "the call did not take the C++ path"
    return expected, result


def assert_same_bits(expected, result):
    assert torch.equal(expected[1], result[1])
    assert torch.equal(expected[0].view(torch.int32), result[0].view(torch.int32))


GPU_CASES = [
    # (experts, topk, groups, kept, scoring, logits dtype, bias dtype, tokens)
    (256, 8, 8, 4, "sigmoid", torch.bfloat16, torch.float32, tokens)
    for tokens in (1, 200, 1500, 3000, 9000, 20000)
] + [
    (256, 8, 1, 1, "sigmoid", torch.bfloat16, torch.float32, 65536),
    (384, 8, 1, 1, "sigmoid", torch.bfloat16, torch.float32, 20000),
    (64, 6, 1, 1, "sigmoid", torch.float32, None, 128),
    (128, 8, 1, 1, "softmax", torch.float16, None, 4096),
    (160, 8, 4, 2, "sigmoid", torch.bfloat16, torch.float64, 33),
    (1024, 32, 1, 1, "sigmoid", torch.bfloat16, torch.bfloat16, 5),
]


@gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "padded rows", "unaligned"])
@pytest.mark.parametrize("out", [True, False], ids=["out", "allocating"])
def test_same_bits_as_the_python_path(host, case, layout, out):
    experts, topk, groups, kept, scoring, dtype, bias_dtype, tokens = case
    pad = {"contiguous": 0, "padded rows": 16, "unaligned": 1}[layout]
    base = torch.randn(tokens, experts + pad, device=DEVICE).to(dtype)
    logits = base[:, pad:] if layout == "unaligned" else base[:, :experts]
    logits[: tokens // 7, : experts // 3] = float("nan")  # non-finite rows take their documented path
    bias = None if bias_dtype is None else (torch.randn(experts, device=DEVICE) * 0.5).to(bias_dtype)
    args = route_args(logits, topk, scoring, bias, groups, kept, True, 2.5,
                      poisoned_out(tokens, topk) if out else None)
    expected, result = launched_by_host(host, args)
    assert_same_bits(expected, result)
    if out:
        assert result[0] is args[-1][0] and result[1] is args[-1][1]


@gpu
def test_graph_replay_uses_the_capture_stream(host):
    tokens, experts, topk = 64, 256, 8
    logits = torch.randn(tokens, experts, device=DEVICE).to(torch.bfloat16)
    bias = torch.randn(experts, device=DEVICE) * 0.5
    out = poisoned_out(tokens, topk)
    kwargs = dict(correction_bias=bias, num_expert_group=8, topk_group=4, routed_scaling_factor=2.5, out=out)
    op.route(logits, topk, **kwargs)  # registers the plan
    torch.cuda.synchronize()
    before = host.launches()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        op.route(logits, topk, **kwargs)
    assert host.launches() == before + 1
    for _ in range(3):
        logits.copy_(torch.randn_like(logits, dtype=torch.float32).to(torch.bfloat16))
        out[0].fill_(float("nan"))
        out[1].fill_(POISON_ID)
        graph.replay()
        torch.cuda.synchronize()
        replayed = tuple(t.clone() for t in out)
        with host_route(None):
            expected = op.route(logits, topk, **{**kwargs, "out": None})
        assert_same_bits(expected, replayed)


@gpu
def test_steps_aside_for_launch_hooks(host):
    import triton

    logits = torch.randn(8, 256, device=DEVICE)
    op.route(logits, 8)
    seen = []

    def hook(*args, **kwargs):
        seen.append(1)

    chain = triton.knobs.runtime.launch_enter_hook
    chain.add(hook)
    try:
        before = host.launches()
        op.route(logits, 8)
        assert host.launches() == before
    finally:
        chain.remove(hook)
    before = host.launches()
    op.route(logits, 8)
    assert host.launches() == before + 1


@gpu
@pytest.mark.parametrize("description,args,kwargs,error,argument", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_calls_still_raise_with_the_host_path_loaded(host, description, args, kwargs, error, argument):
    op.route(torch.randn(4, 64, device=DEVICE), 2)  # something registered
    with host_route(host.route), pytest.raises(error, match=argument):
        op.route(*args, **kwargs)


@gpu
def test_forget_launchers_clears_both_caches(host):
    logits = torch.randn(8, 64, device=DEVICE)
    op.route(logits, 4)
    assert host.size() > 0
    forget_launchers()
    assert host.size() == 0
    before = host.launches()
    op.route(logits, 4)  # through Triton again, which registers it anew
    assert host.launches() == before and host.size() > 0


def test_concurrent_loads_build_once(monkeypatch):
    """A warmup's build thread and the first launches may load at once: one builds, the others wait and get the
    same module."""
    import threading
    import time

    import torch.utils.cpp_extension as cpp_extension

    builds = []

    class Built:
        route = None

        def open_driver(self):
            return True

        def configure(self, *args):
            pass

    def build(**kwargs):
        builds.append(kwargs["name"])
        time.sleep(0.2)  # a build takes seconds: the other threads arrive meanwhile
        return Built()

    monkeypatch.setattr(cpp_extension, "load", build)
    monkeypatch.setattr(host_launch, "_module", None)
    monkeypatch.setattr(host_launch, "_load_failed", False)
    monkeypatch.setattr(host_launch, "_listeners", [])
    loaded = []
    threads = [threading.Thread(target=lambda: loaded.append(host_launch.load())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert builds == ["moe_routing_host_launch"]
    assert len(loaded) == 4 and all(module is loaded[0] for module in loaded) and isinstance(loaded[0], Built)
