"""vLLM plugin: serve vLLM's routing calls with ``moe_routing.route`` where the gate allows it.

Registered through the ``vllm.general_plugins`` entry point, so vLLM calls :func:`register` in every
process (engine, workers); it is safe to call twice. It wraps the routing functions that current vLLM
routers reach — the gate (:mod:`moe_routing.dispatch`) decides per call whether ``route()`` serves it
or the original runs:

| site | reached by | contract kept |
|---|---|---|
| ``rocm_aiter_ops.biased_grouped_topk`` (ROCm) | GroupedTopKRouter (the model's grouping) and FusedTopKBiasRouter (a synthesised G-of-G grouping) | writes into the caller's ``topk_weights``/``topk_ids``; casts the bias to the logits' dtype |
| ``grouped_topk``, ``fused_grouped_topk`` (CUDA) | GroupedTopKRouter | returns new float32 weights and int32 ids |
| ``fused_topk_bias`` | FusedTopKBiasRouter, GroupedTopKRouter's fallback | returns new weights and ids of ``indices_type`` (int32 only is substituted) |
| ``fused_topk`` | FusedTopKRouter | also returns ``token_expert_indices`` (k * T + t, as vLLM's kernel writes them) |

The wrappers are installed wherever a loaded vLLM module holds the original function (routers import
these by name), and the version guard (:func:`sites`) says which sites were found in the installed
vLLM and which were not. Read the gate's counters with ``moe_routing.dispatch.report()``.
"""

from __future__ import annotations

import atexit
import importlib
import inspect
import logging
import os
import sys
from dataclasses import dataclass
from typing import Callable

import torch

from ..dispatch import RoutingRequest, decide, report
from ..op import route

logger = logging.getLogger("moe_routing.vllm")

_ROUTER = "vllm.model_executor.layers.fused_moe.router."


def execution_mode() -> str | None:
    """vLLM's CUDA-graph runtime mode of the current forward ("NONE", "PIECEWISE", "FULL"), or None."""
    context = sys.modules.get("vllm.forward_context")
    if context is None or not context.is_forward_context_available():
        return None
    return context.get_forward_context().cudagraph_runtime_mode.name


# ---- the wrappers: same parameters and defaults as vLLM 0.33's functions ---------------------------

def _aiter_biased_grouped_topk(original):
    def biased_grouped_topk(gating_output, correction_bias, topk_weights, topk_ids, num_expert_group, topk_group,
                            need_renorm, routed_scaling_factor=1.0):
        request = RoutingRequest("rocm_aiter_ops.biased_grouped_topk", gating_output, correction_bias,
                                 topk_weights.shape[-1], num_expert_group, topk_group, "sigmoid", topk_ids.dtype,
                                 topk_weights.dtype)
        if not decide(request, execution_mode)[0]:
            return original(gating_output, correction_bias, topk_weights, topk_ids, num_expert_group, topk_group,
                            need_renorm, routed_scaling_factor)
        if correction_bias.dtype != gating_output.dtype:  # as the op does
            correction_bias = correction_bias.to(gating_output.dtype)
        route(gating_output, topk_weights.shape[-1], correction_bias=correction_bias,
              num_expert_group=num_expert_group, topk_group=topk_group, renormalize=need_renorm,
              routed_scaling_factor=routed_scaling_factor, out=(topk_weights, topk_ids))
        return None

    return staticmethod(biased_grouped_topk)


def _grouped_topk(original):
    def grouped_topk(hidden_states, gating_output, topk, renormalize, num_expert_group=0, topk_group=0,
                     scoring_func="softmax", routed_scaling_factor=1.0, e_score_correction_bias=None):
        request = RoutingRequest("grouped_topk", gating_output, e_score_correction_bias, topk, num_expert_group,
                                 topk_group, scoring_func, torch.int32)
        if not decide(request, execution_mode)[0]:
            return original(hidden_states, gating_output, topk, renormalize, num_expert_group, topk_group,
                            scoring_func, routed_scaling_factor, e_score_correction_bias)
        return route(gating_output, topk, scoring_func=scoring_func, correction_bias=e_score_correction_bias,
                     num_expert_group=max(num_expert_group, 1), topk_group=max(topk_group, 1),
                     renormalize=renormalize, routed_scaling_factor=routed_scaling_factor)

    return grouped_topk


def _fused_grouped_topk(original):
    def fused_grouped_topk(hidden_states, gating_output, topk, renormalize, e_score_correction_bias,
                           num_expert_group=0, topk_group=0, scoring_func="softmax", routed_scaling_factor=1.0):
        request = RoutingRequest("fused_grouped_topk", gating_output, e_score_correction_bias, topk,
                                 num_expert_group, topk_group, scoring_func, torch.int32)
        if not decide(request, execution_mode)[0]:
            return original(hidden_states, gating_output, topk, renormalize, e_score_correction_bias,
                            num_expert_group, topk_group, scoring_func, routed_scaling_factor)
        return route(gating_output, topk, scoring_func=scoring_func, correction_bias=e_score_correction_bias,
                     num_expert_group=max(num_expert_group, 1), topk_group=max(topk_group, 1),
                     renormalize=renormalize, routed_scaling_factor=routed_scaling_factor)

    return fused_grouped_topk


def _fused_topk_bias(original):
    def fused_topk_bias(hidden_states, gating_output, scoring_func, e_score_correction_bias, topk, renormalize,
                        indices_type=None, input_tokens=None, hash_indices_table=None, routed_scaling_factor=1.0,
                        bias_vl=None, image_sentinel_lo=0):
        plain = hash_indices_table is None and bias_vl is None  # hash and vision routing: not ours
        request = RoutingRequest("fused_topk_bias", gating_output, e_score_correction_bias, topk, 1, 1,
                                 scoring_func if plain else "hash/vision", indices_type or torch.int32)
        if not decide(request, execution_mode)[0]:
            return original(hidden_states, gating_output, scoring_func, e_score_correction_bias, topk, renormalize,
                            indices_type, input_tokens, hash_indices_table, routed_scaling_factor, bias_vl,
                            image_sentinel_lo)
        return route(gating_output, topk, scoring_func=scoring_func, correction_bias=e_score_correction_bias,
                     renormalize=renormalize, routed_scaling_factor=routed_scaling_factor)

    return fused_topk_bias


def _fused_topk(original):
    def fused_topk(hidden_states, gating_output, topk, renormalize, indices_type=None, scoring_func="softmax"):
        request = RoutingRequest("fused_topk", gating_output, None, topk, 1, 1, scoring_func,
                                 indices_type or torch.int32)
        if not decide(request, execution_mode)[0]:
            return original(hidden_states, gating_output, topk, renormalize, indices_type, scoring_func)
        weights, ids = route(gating_output, topk, scoring_func=scoring_func, renormalize=renormalize)
        tokens = gating_output.shape[0]
        slots = torch.arange(topk, dtype=torch.int32, device=gating_output.device)
        rows = torch.arange(tokens, dtype=torch.int32, device=gating_output.device)
        return weights, ids, slots[None, :] * tokens + rows[:, None]

    return fused_topk


@dataclass(frozen=True)
class Site:
    """One vLLM function to wrap: where it lives, its parameters, and the wrapper factory."""

    name: str
    module: str
    attribute: str  # "function" or "Class.method"
    parameters: tuple[str, ...]
    wrap: Callable


SITES = (
    Site("rocm_aiter_ops.biased_grouped_topk", "vllm._aiter_ops", "rocm_aiter_ops.biased_grouped_topk",
         ("gating_output", "correction_bias", "topk_weights", "topk_ids", "num_expert_group", "topk_group",
          "need_renorm", "routed_scaling_factor"), _aiter_biased_grouped_topk),
    Site("grouped_topk", _ROUTER + "grouped_topk_router", "grouped_topk",
         ("hidden_states", "gating_output", "topk", "renormalize", "num_expert_group", "topk_group",
          "scoring_func", "routed_scaling_factor", "e_score_correction_bias"), _grouped_topk),
    Site("fused_grouped_topk", _ROUTER + "grouped_topk_router", "fused_grouped_topk",
         ("hidden_states", "gating_output", "topk", "renormalize", "e_score_correction_bias", "num_expert_group",
          "topk_group", "scoring_func", "routed_scaling_factor"), _fused_grouped_topk),
    Site("fused_topk_bias", _ROUTER + "fused_topk_bias_router", "fused_topk_bias",
         ("hidden_states", "gating_output", "scoring_func", "e_score_correction_bias", "topk", "renormalize",
          "indices_type", "input_tokens", "hash_indices_table", "routed_scaling_factor", "bias_vl",
          "image_sentinel_lo"), _fused_topk_bias),
    Site("fused_topk", _ROUTER + "fused_topk_router", "fused_topk",
         ("hidden_states", "gating_output", "topk", "renormalize", "indices_type", "scoring_func"), _fused_topk),
)

_ORIGINAL = "__moe_routing_original__"
_status: dict[str, str] = {}  # site -> "patched ..." or why not


def _resolve(site: Site):
    """(owner, attribute name, current function) of a site, or raise LookupError saying why not."""
    try:
        module = importlib.import_module(site.module)
    except Exception as error:  # noqa: BLE001 - any import failure means "not in this vLLM"
        raise LookupError(f"module {site.module} not importable ({type(error).__name__}: {error})") from None
    owner, name = module, site.attribute
    if "." in site.attribute:
        class_name, name = site.attribute.split(".")
        owner = getattr(module, class_name, None)
        if owner is None:
            raise LookupError(f"{site.module}.{class_name} not found")
    function = inspect.getattr_static(owner, name, None)
    if function is None:
        raise LookupError(f"{site.module}.{site.attribute} not found")
    return owner, name, function


def _function_of(candidate):
    return candidate.__func__ if isinstance(candidate, staticmethod) else candidate


def register() -> dict[str, str]:
    """Install the wrappers (idempotent); returns the version guard's finding per site."""
    for site in SITES:
        try:
            owner, name, current = _resolve(site)
        except LookupError as error:
            _status[site.name] = f"missing: {error}"
            continue
        function = _function_of(current)
        if hasattr(function, _ORIGINAL):  # already ours: a second register() call
            _status[site.name] = _status.get(site.name, f"patched ({site.module})")
            continue
        found = tuple(inspect.signature(function).parameters)
        if found != site.parameters:
            _status[site.name] = f"missing: signature changed to ({', '.join(found)})"
            continue
        wrapper = site.wrap(function)
        _function_of(wrapper).__dict__[_ORIGINAL] = function
        if "." in site.attribute:
            setattr(owner, name, wrapper)
            places = 1
        else:  # every loaded vLLM module that imported the function by name
            places = 0
            for module in list(sys.modules.values()):
                if getattr(module, "__name__", "").startswith("vllm") and getattr(module, name, None) is function:
                    setattr(module, name, wrapper)
                    places += 1
        _status[site.name] = f"patched ({site.module}, {places} module(s))"
    for site_name, status in _status.items():
        logger.info("moe-routing vLLM plugin: %s: %s", site_name, status)
    if os.environ.get("MOE_ROUTING_REPORT") == "1" and not _status.get("_report"):
        _status["_report"] = "at exit"
        atexit.register(lambda: logger.warning("moe-routing vLLM plugin, pid %d: %s", os.getpid(), report()))
    return {k: v for k, v in _status.items() if not k.startswith("_")}


def unregister() -> None:
    """Put every original back (tests)."""
    for module in list(sys.modules.values()):
        if not getattr(module, "__name__", "").startswith("vllm"):
            continue
        for site in SITES:
            if "." in site.attribute:
                class_name, name = site.attribute.split(".")
                owner = getattr(module, class_name, None) if module.__name__ == site.module else None
            else:
                owner, name = module, site.attribute
            current = inspect.getattr_static(owner, name, None) if owner is not None else None
            original = getattr(_function_of(current), _ORIGINAL, None) if current is not None else None
            if original is not None:
                setattr(owner, name, staticmethod(original) if isinstance(current, staticmethod) else original)
    _status.clear()


def sites() -> dict[str, str]:
    """The version guard: which routing sites this vLLM has and whether they are patched."""
    return {k: v for k, v in _status.items() if not k.startswith("_")}
