"""What the benchmark times: our op, the reference, the floors, and any engine op importable here.

Each factory takes the :class:`~moe_routing.measure.bench.Inputs` of a shape and returns a callable
``call(i)`` that routes input set ``i`` once (or ``None`` when the arm cannot run that shape). Engine
ops are imported lazily; an engine arm is only timed after its output on set 0 matched the reference
(same ids wherever the row has no near tie, weights within 1e-3), and the reason it was skipped is
recorded otherwise.
"""

from __future__ import annotations

from typing import Callable

import torch
import triton
import triton.language as tl

from .. import op, reference
from ..op import route
from .bench import Inputs
from ..verify import verify


@triton.jit
def _empty_kernel(x_ptr, n):
    pass


@triton.jit
def _straightforward_kernel(x_ptr, bias_ptr, weights_ptr, ids_ptr, stride, scale, E: tl.constexpr, K: tl.constexpr,
                            BLOCK: tl.constexpr, BLOCK_K: tl.constexpr):
    """A first Triton version (the issue's peer): one row per program, K rounds of max + lowest-index argmin."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < E
    x = tl.load(x_ptr + row * stride + cols, mask=inside, other=0.0).to(tl.float32)
    s = tl.sigmoid(x)
    c = tl.where(inside, s + tl.load(bias_ptr + cols, mask=inside, other=0.0), float("-inf"))
    slot = tl.arange(0, BLOCK_K)
    ids = tl.zeros((BLOCK_K,), dtype=tl.int32)
    weights = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for k in tl.static_range(K):
        best = tl.max(c, axis=0)
        at = tl.min(tl.where(c == best, cols, BLOCK), axis=0)
        ids = tl.where(slot == k, at, ids)
        weights = tl.where(slot == k, tl.sum(tl.where(cols == at, s, 0.0), axis=0), weights)
        c = tl.where(cols == at, float("-inf"), c)
    weights = weights / tl.sum(weights, axis=0) * scale
    tl.store(weights_ptr + row * K + slot, weights, mask=slot < K)
    tl.store(ids_ptr + row * K + slot, ids, mask=slot < K)


def arm_straightforward_triton(inputs: Inputs):
    """The issue's "straightforward Triton" peer (flat sigmoid + bias only; no NaN handling)."""
    shape = inputs.shape
    if shape.topk_group < shape.groups or shape.scoring != "sigmoid" or not shape.bias:
        return None
    block, block_k = triton.next_power_of_2(shape.experts), triton.next_power_of_2(shape.topk)

    def call(i):
        x = inputs.logits[i]
        _straightforward_kernel[(shape.tokens,)](x, inputs.bias, inputs.weights, inputs.ids, x.stride(0),
                                                 shape.scale, E=shape.experts, K=shape.topk, BLOCK=block,
                                                 BLOCK_K=block_k, num_warps=1)
        return inputs.weights, inputs.ids

    return call


def arm_route(inputs: Inputs):
    shape, kw = inputs.shape, inputs.shape.kwargs(inputs.bias)
    out = (inputs.weights, inputs.ids)
    return lambda i: route(inputs.logits[i], shape.topk, out=out, **kw)


def arm_route_python_launch(inputs: Inputs):
    """route(out=) kept on the Python launch path: the C++ host path switched off around each call (the
    eager A/B of kernels/host_launch.py; the switch adds two module-attribute writes to this arm)."""
    shape, kw = inputs.shape, inputs.shape.kwargs(inputs.bias)
    out = (inputs.weights, inputs.ids)

    def call(i):
        entry = op._host_route
        op._host_route = None
        try:
            return route(inputs.logits[i], shape.topk, out=out, **kw)
        finally:
            op._host_route = entry

    return call


def arm_route_without_pdl(inputs: Inputs):
    """route(out=)'s kernel and plan launched without programmatic dependent launch (``GRID_WAIT`` off):
    the device-time A/B of ``launch.with_device``. It launches through Triton's own binder (a forced plan), so its eager
    host time is not route()'s."""
    from ..call import check_call
    from ..kernels.launch import launch
    from ..kernels.rules import choose_plan, tensor_traits

    shape, logits = inputs.shape, inputs.logits[0]
    call = check_call(logits, shape.topk, shape.scoring, inputs.bias, shape.groups, shape.topk_group, True,
                      shape.scale, None)
    plan = choose_plan(call, **tensor_traits(logits, inputs.bias))
    return lambda i: launch(call, inputs.logits[i], inputs.bias, inputs.weights, inputs.ids, plan=plan)


def arm_route_allocating(inputs: Inputs):
    shape, kw = inputs.shape, inputs.shape.kwargs(inputs.bias)
    return lambda i: route(inputs.logits[i], shape.topk, **kw)


def arm_reference(inputs: Inputs):
    shape, kw = inputs.shape, inputs.shape.kwargs(inputs.bias)
    return lambda i: reference.route(inputs.logits[i], shape.topk, **kw)


_compiled_reference = None


def arm_reference_compiled(inputs: Inputs):
    """The reference through torch.compile (one compiled function for all shapes: T is dynamic)."""
    global _compiled_reference
    if _compiled_reference is None:
        _compiled_reference = torch.compile(reference.route, fullgraph=True, dynamic=True)
    shape, kw = inputs.shape, inputs.shape.kwargs(inputs.bias)
    compiled = _compiled_reference
    return lambda i: compiled(inputs.logits[i], shape.topk, **kw)


def arm_empty_kernel(inputs: Inputs):
    """The floor of any kernel launch: a Triton kernel that does nothing."""
    x = inputs.logits[0]
    return lambda i: _empty_kernel[(1,)](x, 0)


def arm_torch_max(inputs: Inputs):
    """A single ATen op returning two tensors on the same input: the eager host-time yardstick."""
    return lambda i: torch.max(inputs.logits[i], dim=-1)


# --- engine ops: adapters to our semantics (sigmoid + bias + groups, renormalise, scale) -----------

def _vllm_op(name: str):
    """vLLM's CUDA routing op ``name``: the installed vLLM's (``torch.ops._moe_C``), else built from the source tree
    of ``ENGINE_SOURCES["vllm"]`` (engine_build.py)."""
    try:
        import vllm._moe_C  # noqa: F401 - registers torch.ops._moe_C

        return getattr(torch.ops._moe_C, name)
    except ImportError:
        if "vllm" not in ENGINE_SOURCES:
            raise
    from .engine_build import vllm_cuda_ops

    return getattr(vllm_cuda_ops(ENGINE_SOURCES["vllm"]), name)


def arm_vllm_grouped_topk(inputs: Inputs):
    """vLLM's CUDA grouped top-k (TensorRT-LLM noaux_tc lineage), as ``fused_grouped_topk`` calls it (raw logits,
    scoring_func=1: sigmoid; the bias in the logits' dtype); it allocates its outputs. The op of the plugin's
    ``grouped_topk`` / ``fused_grouped_topk`` sites (DeepSeek-V3, Kimi-K2, Moonlight, GLM-4.5)."""
    op = _vllm_op("grouped_topk")
    shape = inputs.shape
    if shape.scoring != "sigmoid" or not shape.bias:
        return None
    bias = inputs.bias.to(inputs.logits[0].dtype)
    return lambda i: op(inputs.logits[i], shape.groups, shape.topk_group, shape.topk, True, shape.scale, bias, 1)


def _vllm_fused_topk_outputs(inputs: Inputs, ids_dtype=torch.int32):
    """The three buffers vLLM's ``fused_topk`` / ``fused_topk_bias`` allocate before calling their op."""
    tokens, topk, device = inputs.shape.tokens, inputs.shape.topk, inputs.logits[0].device
    return (torch.empty(tokens, topk, dtype=torch.float32, device=device),
            torch.empty(tokens, topk, dtype=ids_dtype, device=device),
            torch.empty(tokens, topk, dtype=torch.int32, device=device))


def _vllm_fused_topk_arm(inputs: Inputs, name: str, scoring: str, biased: bool, run: Callable):
    """An arm of a vLLM top-k op that writes into buffers its caller allocates per call (``fused_topk`` /
    ``fused_topk_bias``): ``run(op, weights, ids, source_rows, logits, bias)`` calls it; flat calls of ``scoring``
    with (``biased``: a float32 bias) or without a bias only."""
    op = _vllm_op(name)
    shape = inputs.shape
    if shape.scoring != scoring or shape.bias != biased or shape.topk_group < shape.groups:
        return None
    bias = inputs.bias.float() if biased else None

    def call(i):
        weights, ids, source_rows = _vllm_fused_topk_outputs(inputs)
        run(op, weights, ids, source_rows, inputs.logits[i], bias)
        return weights, ids

    return call


def arm_vllm_topk_sigmoid(inputs: Inputs):
    """vLLM's ``topk_sigmoid`` CUDA op as ``fused_topk_bias`` calls it for sigmoid scoring (outputs allocated per
    call, a float32 bias, no groups): the plugin's ``fused_topk_bias`` site for sigmoid routers."""
    scale = inputs.shape.scale
    return _vllm_fused_topk_arm(inputs, "topk_sigmoid", "sigmoid", True, lambda op, weights, ids, rows, logits, bias:
                                op(weights, ids, rows, logits, True, bias, scale, None))


def arm_vllm_topk_softmax(inputs: Inputs):
    """vLLM's ``topk_softmax`` CUDA op as ``fused_topk`` calls it (softmax, no bias, outputs allocated per call; the
    scale multiplied after, as ``fused_topk_bias`` does): the plugin's ``fused_topk`` site (Qwen3-MoE, Mixtral)."""
    scale = inputs.shape.scale

    def run(op, weights, ids, rows, logits, bias):
        op(weights, ids, rows, logits, True, None, None)
        if scale != 1.0:
            weights *= scale

    return _vllm_fused_topk_arm(inputs, "topk_softmax", "softmax", False, run)


def arm_vllm_topk_softplus_sqrt(inputs: Inputs):
    """vLLM's ``topk_softplus_sqrt`` CUDA op (``_custom_ops.topk_hash_softplus_sqrt``) as ``fused_topk_bias`` calls
    it for sqrt-softplus calls outside ``dsv4_topk``'s reach: the plugin's ``topk_hash_softplus_sqrt`` site."""
    scale = inputs.shape.scale
    return _vllm_fused_topk_arm(inputs, "topk_softplus_sqrt", "sqrtsoftplus", True,
                                lambda op, weights, ids, rows, logits, bias:
                                op(weights, ids, rows, logits, True, scale, bias, None, None, None, None, 0))


def arm_route_through_vllm_plugin(inputs: Inputs):
    """route() as the vLLM plugin serves an eager step: the site's wrapper (the gate's decision and counting,
    then route(), allocating, as the site returns new tensors), the wrapper of the site that replaces the vLLM op
    of this shape (``fused_grouped_topk`` for sigmoid + bias, ``fused_topk`` for softmax, ``fused_topk_bias`` for
    sqrt-softplus). The forward context reads as an eager step (``execution_mode`` swapped around each call: two
    module-attribute writes of this arm's own) with the eager path and the source-rows sites on."""
    from ..dispatch import configure, settings
    from ..integrations import vllm as plugin

    shape = inputs.shape
    if shape.topk_group < shape.groups:
        return None
    configure(eager=True, source_rows=True, devices=tuple(dict.fromkeys(settings().devices + ("cuda",))))
    hidden = inputs.logits[0]  # (the wrappers pass it through to vLLM's op only)
    if shape.scoring == "sigmoid" and shape.bias:
        site = plugin._fused_grouped_topk(refused)
        bias = inputs.bias.to(inputs.logits[0].dtype)  # as GroupedTopKRouter holds it: the model's parameter

        def routed(i):
            return site(hidden, inputs.logits[i], shape.topk, True, bias, shape.groups, shape.topk_group, "sigmoid",
                        shape.scale)
    elif shape.scoring == "softmax" and not shape.bias and shape.scale == 1.0:
        site = plugin._fused_topk(refused)

        def routed(i):
            return site(hidden, inputs.logits[i], shape.topk, True, None, "softmax")[:2]
    elif shape.scoring == "sqrtsoftplus" and shape.bias:
        site = plugin._fused_topk_bias(refused)
        bias = inputs.bias.float()

        def routed(i):
            return site(hidden, inputs.logits[i], "sqrtsoftplus", bias, shape.topk, True, None, None, None,
                        shape.scale)
    else:
        return None

    def call(i):
        mode = plugin.execution_mode
        plugin.execution_mode = _eager_step
        try:
            return routed(i)
        finally:
            plugin.execution_mode = mode

    return call


def _eager_step() -> str:
    return "NONE"


def refused(*args):
    """The "original" behind the plugin arm's site wrappers: reached only if the gate refused the call."""
    raise RuntimeError("the plugin's gate refused the call")


def arm_sglang_moe_fused_gate(inputs: Inputs):
    """sgl-kernel's moe_fused_gate, when importable (its limits: power-of-two experts per group, ...)."""
    from sgl_kernel import moe_fused_gate

    shape = inputs.shape
    if shape.scoring != "sigmoid" or not shape.bias:
        return None
    bias = inputs.bias.to(inputs.logits[0].dtype)
    return lambda i: moe_fused_gate(inputs.logits[i], bias, shape.groups, shape.topk_group, shape.topk, 0,
                                    shape.scale)


def arm_flashinfer_fused_topk_deepseek(inputs: Inputs):
    """FlashInfer's fused_topk_deepseek, when importable."""
    from flashinfer.fused_moe import fused_topk_deepseek

    shape = inputs.shape
    if shape.scoring != "sigmoid" or not shape.bias:
        return None
    weights, ids = inputs.weights, inputs.ids
    return lambda i: fused_topk_deepseek(inputs.logits[i], inputs.bias, shape.groups, shape.topk_group, shape.topk,
                                         shape.scale, weights, ids)


def arm_aiter_biased_grouped_topk(inputs: Inputs):
    """AITER's biased_grouped_topk (ROCm), when importable."""
    import aiter

    shape = inputs.shape
    if shape.scoring != "sigmoid" or not shape.bias:
        return None
    weights, ids = inputs.weights, inputs.ids
    bias = inputs.bias.to(inputs.logits[0].dtype)
    return lambda i: aiter.biased_grouped_topk(inputs.logits[i], bias, weights, ids, shape.groups, shape.topk_group,
                                               True, shape.scale)


# engine -> a directory holding its source tree (``moe-routing bench --engine-source vllm=DIR``): engine arms whose
# kernels are plain source files load them from there when the engine is not installed
ENGINE_SOURCES: dict[str, str] = {}

_DSV4_PATH = "vllm/model_executor/layers/fused_moe/router/dsv4_topk.py"


_source_modules: dict = {}  # path -> module, loaded once a run (every shape's arm asks again)


def _vllm_dsv4_module():
    """vLLM's ``dsv4_topk`` module: the installed vLLM's, else the file from ``ENGINE_SOURCES["vllm"]`` (a vLLM
    source tree or site-packages folder, read at run time), run with the two vLLM helpers it imports supplied
    here (the platform, for CUDA and PDL support; Triton itself)."""
    try:
        from vllm.model_executor.layers.fused_moe.router import dsv4_topk

        return dsv4_topk
    except ImportError:
        if "vllm" not in ENGINE_SOURCES:
            raise
    from pathlib import Path

    path = Path(ENGINE_SOURCES["vllm"]) / _DSV4_PATH
    if path not in _source_modules:
        _source_modules[path] = _load_with_vllm_helpers(path)
    return _source_modules[path]


def _load_with_vllm_helpers(path):
    """Execute a vLLM source file with stand-ins for ``vllm.platforms`` and ``vllm.triton_utils``, removed after."""
    import importlib.util
    import sys
    import types

    if not path.is_file():
        raise FileNotFoundError(f"{path} (--engine-source vllm=DIR: DIR must hold vllm/...)")
    platform = types.SimpleNamespace(is_cuda=lambda: torch.version.hip is None and torch.cuda.is_available(),
                                     is_arch_support_pdl=lambda: torch.version.hip is None
                                     and torch.cuda.get_device_capability() >= (9, 0))
    helpers = {"vllm": types.ModuleType("vllm"), "vllm.platforms": types.ModuleType("vllm.platforms"),
               "vllm.triton_utils": types.ModuleType("vllm.triton_utils")}
    helpers["vllm.platforms"].current_platform = platform
    helpers["vllm.triton_utils"].tl, helpers["vllm.triton_utils"].triton = tl, triton
    saved = {name: sys.modules.get(name) for name in helpers}
    sys.modules.update(helpers)
    try:
        spec = importlib.util.spec_from_file_location("vllm_source_dsv4_topk", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous
    return module


def arm_vllm_dsv4_topk(inputs: Inputs):
    """vLLM's Triton ``dsv4_topk`` (DeepSeek-V4: sqrt-softplus + bias, top-6 of 256 or 384, float32 logits,
    renormalised), from the installed vLLM or its source (``--engine-source vllm=DIR``)."""
    dsv4 = _vllm_dsv4_module()
    shape = inputs.shape
    if (shape.scoring != "sqrtsoftplus" or not shape.bias or shape.topk_group < shape.groups
            or not dsv4.can_use_dsv4_topk(inputs.logits[0], inputs.bias.float(), shape.topk, True, torch.int32)):
        return None
    bias = inputs.bias.float()
    return lambda i: dsv4.dsv4_topk(inputs.logits[i], bias, torch.int32, shape.scale)


OURS = {
    "moe_routing.route(out=)": arm_route,
    "moe_routing.route": arm_route_allocating,
    "moe_routing.route(out=) via Python": arm_route_python_launch,
    "moe_routing.route(out=) without PDL": arm_route_without_pdl,
    "moe_routing via the vLLM plugin": arm_route_through_vllm_plugin,
}
BASELINES = {
    "reference (eager)": arm_reference,
    "reference (torch.compile)": arm_reference_compiled,
    "empty kernel": arm_empty_kernel,
    "torch.max(dim=-1)": arm_torch_max,
}
PEERS = {
    "straightforward Triton": arm_straightforward_triton,
}
ENGINES = {
    "vLLM grouped_topk": arm_vllm_grouped_topk,
    "vLLM topk_sigmoid": arm_vllm_topk_sigmoid,
    "vLLM topk_softmax": arm_vllm_topk_softmax,
    "vLLM topk_softplus_sqrt": arm_vllm_topk_softplus_sqrt,
    "sgl-kernel moe_fused_gate": arm_sglang_moe_fused_gate,
    "FlashInfer fused_topk_deepseek": arm_flashinfer_fused_topk_deepseek,
    "AITER biased_grouped_topk": arm_aiter_biased_grouped_topk,
    "vLLM dsv4_topk": arm_vllm_dsv4_topk,
}


def checked_engine_arm(name: str, factory: Callable, inputs: Inputs, bias_cast: bool = True
                       ) -> tuple[Callable | None, str]:
    """Build an engine (or peer) arm and check it against the float64 semantics on set 0; (call, note)."""
    try:
        call = factory(inputs)
    except Exception as error:  # an engine that is absent or whose API moved is skipped, not fatal
        return None, f"not importable or incompatible: {type(error).__name__}: {error}"[:160]
    if call is None:
        return None, "does not support this shape"
    shape = inputs.shape
    try:
        result = call(0)
        torch.cuda.synchronize()
    except Exception as error:
        return None, f"failed on this shape: {type(error).__name__}: {error}"[:160]
    weights, ids = (result if isinstance(result, tuple) else (inputs.weights, inputs.ids))[:2]
    bias = inputs.bias
    if bias is not None and bias_cast:  # engine ops round the bias to the logits' dtype
        bias = bias.to(inputs.logits[0].dtype)
    verdict = verify(weights.float(), ids.to(torch.int32), inputs.logits[0], shape.topk, **shape.kwargs(bias),
                     weight_tol=1e-3)
    if verdict.mismatched_rows or verdict.malformed_rows:
        return None, f"disagrees with the reference on {verdict.mismatched_rows + verdict.malformed_rows} rows"
    return call, "checked against the reference"

