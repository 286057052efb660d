"""vLLM plugin: serve vLLM's routing calls with ``moe_routing.route`` where the gate allows it.

Registered through the ``vllm.general_plugins`` entry point, so vLLM calls :func:`register` in every
process (engine, workers); it is safe to call twice. It wraps the routing functions that current vLLM
routers reach — the gate (:mod:`moe_routing.dispatch`) decides per call whether ``route()`` serves it
or the original runs:

| site | reached by | contract kept |
|---|---|---|
| ``rocm_aiter_ops.biased_grouped_topk`` (ROCm) | GroupedTopKRouter (the model's grouping) and FusedTopKBiasRouter (a synthesised G-of-G grouping) | writes into the caller's ``topk_weights``/``topk_ids``; casts the bias to the logits' dtype |
| ``grouped_topk``, ``fused_grouped_topk`` (CUDA) | GroupedTopKRouter | returns new float32 weights and int32 ids |
| ``fused_topk_bias`` | FusedTopKBiasRouter (DeepSeek-V4 included: sqrt-softplus, hash tables), GroupedTopKRouter's fallback | returns new weights and ids of ``indices_type``; padded rows (vLLM's ``is_padding``) get id -1, with weights 0 for sqrt-softplus (``dsv4_topk``, ``topk_softplus_sqrt``) and as computed otherwise (``topk_softmax``/``topk_sigmoid``) |
| ``fused_topk`` | FusedTopKRouter | also returns ``token_expert_indices`` (k * T + t, as vLLM's kernel writes them); padded rows get id -1, weights kept |
| ``dsv4_topk`` | ``fused_topk_bias``'s float32 DeepSeek-V4 path (top-6 of 256/384) | returns new weights and ids of ``indices_dtype``; padded rows (0, -1) |
| ``_custom_ops.topk_hash_softplus_sqrt`` | ``fused_topk_bias``'s other sqrt-softplus calls, hash layers included | writes into the caller's buffers (and ``token_expert_indices``); padded rows (0, -1) |
| ``moe_align_block_size`` (served by ``moe_routing.align``) | the fused-MoE experts (Triton, Marlin, ...) wherever vLLM aligns, expert parallelism included | returns new buffers of vLLM's capacities; ``expert_map`` with ``ignore_invalid_experts`` on (slots of other ranks dropped) and off (blocks relabelled, -1 for other ranks; in the map's dtype), ``pad_sorted_ids``, ``return_scatter_idx``, int32/int64 ids, -1 ids dropped; vLLM's own choice of per-pair blocks at small token counts is made before this call and kept |

It also wraps ``router_factory.create_fused_moe_router`` (not a routing site): each router vLLM builds at model load
starts a background ``moe_routing.warmup`` of the shape the gate would serve (``warm_router``;
``MOE_ROUTING_WARMUP=0`` turns it off), so no serving step compiles a kernel.

Calls with a per-token vision bias (``bias_vl`` with a nonzero ``image_sentinel_lo``) stay with vLLM
(docs/integrations.md says why).

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
import threading
from dataclasses import dataclass
from typing import Callable

import torch

from ..dispatch import AlignRequest, RoutingRequest, decide, decide_align, report
from ..op import route, route_hash
from ..plan import align

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


def _padding_mask(module: str, tokens: int) -> torch.Tensor | None:
    """The padding mask vLLM's own op would receive here (``VLLM_MOE_SKIP_PADDING`` and the forward context's
    ``is_padding``), read through the router module's own helper; None where it has none."""
    helper = getattr(sys.modules.get(module), "_get_padding_mask", None)
    return helper(tokens) if helper is not None else None


def _mark_padded(ids: torch.Tensor, padding: torch.Tensor | None) -> None:
    """The ``topk_softmax``/``topk_sigmoid`` contract for padded rows: id -1, the weights as computed."""
    if padding is not None:
        ids.masked_fill_(padding[:, None], -1)


def _is_vision(bias_vl, image_sentinel_lo) -> bool:
    return bias_vl is not None and image_sentinel_lo > 0  # (vLLM: a sentinel of 0 turns bias_vl off)


def _fused_topk_bias(original):
    def fused_topk_bias(hidden_states, gating_output, scoring_func, e_score_correction_bias, topk, renormalize,
                        indices_type=None, input_tokens=None, hash_indices_table=None, routed_scaling_factor=1.0,
                        bias_vl=None, image_sentinel_lo=0):
        ids_dtype = indices_type or torch.int32
        hashed = hash_indices_table is not None
        padding = _padding_mask(_ROUTER + "fused_topk_bias_router", gating_output.shape[0])
        request = RoutingRequest("fused_topk_bias", gating_output, None if hashed else e_score_correction_bias,
                                 topk, 1, 1, scoring_func, ids_dtype, padded=padding is not None,
                                 hash_table=hash_indices_table, input_ids=input_tokens,
                                 vision=_is_vision(bias_vl, image_sentinel_lo))
        if not decide(request, execution_mode)[0]:
            return original(hidden_states, gating_output, scoring_func, e_score_correction_bias, topk, renormalize,
                            indices_type, input_tokens, hash_indices_table, routed_scaling_factor, bias_vl,
                            image_sentinel_lo)
        if hashed:  # (the gate passes only sqrt-softplus tables: vLLM's op for them zeroes padded weights)
            return route_hash(gating_output, input_tokens, hash_indices_table, scoring_func=scoring_func,
                              renormalize=renormalize, routed_scaling_factor=routed_scaling_factor,
                              is_padding=padding, ids_dtype=ids_dtype)
        if scoring_func == "sqrtsoftplus":  # dsv4_topk and topk_softplus_sqrt zero the weights of padded rows
            return route(gating_output, topk, scoring_func=scoring_func, correction_bias=e_score_correction_bias,
                         renormalize=renormalize, routed_scaling_factor=routed_scaling_factor, is_padding=padding,
                         ids_dtype=ids_dtype)
        weights, ids = route(gating_output, topk, scoring_func=scoring_func, correction_bias=e_score_correction_bias,
                             renormalize=renormalize, routed_scaling_factor=routed_scaling_factor,
                             ids_dtype=ids_dtype)
        _mark_padded(ids, padding)
        return weights, ids

    return fused_topk_bias


def _dsv4_topk(original):
    def dsv4_topk(gating_output, correction_bias, indices_dtype, routed_scaling_factor, is_padding=None,
                  input_ids=None, bias_vl=None, image_sentinel_lo=0):
        request = RoutingRequest("dsv4_topk", gating_output, correction_bias, DSV4_TOPK, 1, 1, "sqrtsoftplus",
                                 indices_dtype, padded=is_padding is not None,
                                 vision=_is_vision(bias_vl, image_sentinel_lo))
        if not decide(request, execution_mode)[0]:
            return original(gating_output, correction_bias, indices_dtype, routed_scaling_factor, is_padding,
                            input_ids, bias_vl, image_sentinel_lo)
        return route(gating_output, DSV4_TOPK, scoring_func="sqrtsoftplus", correction_bias=correction_bias,
                     routed_scaling_factor=routed_scaling_factor, is_padding=is_padding, ids_dtype=indices_dtype)

    return dsv4_topk


def _topk_hash_softplus_sqrt(original):
    def topk_hash_softplus_sqrt(topk_weights, topk_indices, token_expert_indices, gating_output, renormalize=False,
                                routed_scaling_factor=1.0, e_score_correction_bias=None, input_tokens=None,
                                hash_indices_table=None, is_padding=None, bias_vl=None, image_sentinel_lo=0):
        hashed = hash_indices_table is not None
        request = RoutingRequest("topk_hash_softplus_sqrt", gating_output,
                                 None if hashed else e_score_correction_bias, topk_indices.shape[-1], 1, 1,
                                 "sqrtsoftplus", topk_indices.dtype, topk_weights.dtype, padded=is_padding is not None,
                                 hash_table=hash_indices_table, input_ids=input_tokens,
                                 vision=_is_vision(bias_vl, image_sentinel_lo), source_rows=True)
        if not decide(request, execution_mode)[0]:
            return original(topk_weights, topk_indices, token_expert_indices, gating_output, renormalize,
                            routed_scaling_factor, e_score_correction_bias, input_tokens, hash_indices_table,
                            is_padding, bias_vl, image_sentinel_lo)
        out = (topk_weights, topk_indices)
        if hashed:
            route_hash(gating_output, input_tokens, hash_indices_table, renormalize=renormalize,
                       routed_scaling_factor=routed_scaling_factor, out=out, is_padding=is_padding,
                       ids_dtype=topk_indices.dtype)
        else:
            route(gating_output, topk_indices.shape[-1], scoring_func="sqrtsoftplus",
                  correction_bias=e_score_correction_bias, renormalize=renormalize,
                  routed_scaling_factor=routed_scaling_factor, out=out, is_padding=is_padding,
                  ids_dtype=topk_indices.dtype)
        _write_source_rows(token_expert_indices)
        return None

    return topk_hash_softplus_sqrt


def _write_source_rows(token_expert_indices: torch.Tensor) -> None:
    """vLLM's top-k ops' third output: slot k of token t holds k * T + t."""
    tokens, topk = token_expert_indices.shape
    rows = torch.arange(tokens, dtype=token_expert_indices.dtype, device=token_expert_indices.device)
    slots = torch.arange(topk, dtype=token_expert_indices.dtype, device=token_expert_indices.device)
    torch.add(rows[:, None], slots[None, :], alpha=tokens, out=token_expert_indices)


def _fused_topk(original):
    def fused_topk(hidden_states, gating_output, topk, renormalize, indices_type=None, scoring_func="softmax"):
        padding = _padding_mask(_ROUTER + "fused_topk_router", gating_output.shape[0])
        ids_dtype = indices_type or torch.int32
        request = RoutingRequest("fused_topk", gating_output, None, topk, 1, 1, scoring_func, ids_dtype,
                                 padded=padding is not None, source_rows=True)
        if not decide(request, execution_mode)[0]:
            return original(hidden_states, gating_output, topk, renormalize, indices_type, scoring_func)
        weights, ids = route(gating_output, topk, scoring_func=scoring_func, renormalize=renormalize,
                             ids_dtype=ids_dtype)
        _mark_padded(ids, padding)  # topk_softmax / topk_sigmoid keep the weights of padded rows
        source_rows = torch.empty((gating_output.shape[0], topk), dtype=torch.int32, device=gating_output.device)
        _write_source_rows(source_rows)
        return weights, ids, source_rows

    return fused_topk


def _moe_align_block_size(original):
    def moe_align_block_size(topk_ids, block_size, num_experts, expert_map=None, pad_sorted_ids=False,
                             ignore_invalid_experts=False, return_scatter_idx=False):
        request = AlignRequest("moe_align_block_size", topk_ids, block_size, num_experts, expert_map,
                               bool(return_scatter_idx) and expert_map is not None and not ignore_invalid_experts)
        if not decide_align(request, execution_mode)[0]:
            return original(topk_ids, block_size, num_experts, expert_map, pad_sorted_ids, ignore_invalid_experts,
                            return_scatter_idx)
        result = align(topk_ids, block_size, num_experts, expert_map, bool(pad_sorted_ids),
                       bool(ignore_invalid_experts), return_scatter_idx=bool(return_scatter_idx))
        if expert_map is not None and not ignore_invalid_experts and expert_map.dtype != result[1].dtype:
            # vLLM relabels the blocks by indexing the map: its expert_ids take the map's dtype
            result = (result[0], result[1].to(expert_map.dtype), *result[2:])
        return result

    return moe_align_block_size


# ---- warm-up at model load: vLLM builds each MoE layer's router through create_fused_moe_router -----------------

WARMUP_ENV_SWITCH = "MOE_ROUTING_WARMUP"  # "0": no warm-up at model load
_warmed: set = set()  # (shape, device, dtypes, padded) warmed or being warmed in this process
_warm_lock = threading.Lock()
warmups: list = []  # the warm-up threads started (tests join them)


def routing_shape_of(router):
    """The RoutingShape a vLLM router's calls reach the gate with, or None where the plugin would not serve them
    (custom routing, hash layers, an eliminating grouping with the grouped path off): read from the router the
    factory built. A router takes an uneliminating grouping as the flat path, as route() does."""
    from ..dispatch import settings
    from ..precompile import RoutingShape

    scoring = getattr(router, "scoring_func", None)
    experts, topk = getattr(router, "global_num_experts", None), getattr(router, "top_k", None)
    if scoring is None or experts is None or topk is None or getattr(router, "hash_indices_table", None) is not None:
        return None
    if type(router).__name__ == "FusedTopKRouter" and not settings().source_rows:
        return None  # its site, fused_topk, keeps vLLM's op (the gate: token_expert_indices)
    groups = getattr(router, "num_expert_group", None) or 1
    kept = getattr(router, "topk_group", None) or groups
    if kept >= groups:
        groups = kept = 1
    elif not settings().grouped:
        return None
    bias = getattr(router, "e_score_correction_bias", None)
    try:
        return RoutingShape(experts, topk, scoring, None if bias is None else bias.dtype, groups, kept,
                            bool(getattr(router, "renormalize", True)))
    except (TypeError, ValueError):
        return None


def _warm_up(shape, device, dtypes, padded) -> None:
    from ..precompile import warmup

    try:
        report = warmup([shape], dtypes=dtypes, padded=padded, device=device)
        logger.info("moe-routing vLLM plugin: %s", report)
    except Exception as error:  # noqa: BLE001 - a warm-up failure must not fail the model load; calls compile
        logger.warning("moe-routing vLLM plugin: warm-up of %s failed (%s: %s); kernels compile on first use",
                       shape, type(error).__name__, error)


def warm_router(router) -> bool:
    """Start compiling, in a background thread, every kernel the router's calls can take (``moe_routing.warmup``,
    for the model's dtype and float32 logits, with padding masks where ``VLLM_MOE_SKIP_PADDING`` is on), once per
    shape and device in a process; True if a warm-up was started. The model's weights load meanwhile."""
    if os.environ.get(WARMUP_ENV_SWITCH, "1") == "0" or not torch.cuda.is_available():
        return False
    shape = routing_shape_of(router)
    if shape is None:
        return False
    device = torch.device("cuda", torch.cuda.current_device())  # the worker's device (current device is per thread)
    from ..call import LOGIT_DTYPES

    # vLLM builds the model (and its routers) under the model's dtype; router logits may also come in float32
    dtypes = tuple(d for d in dict.fromkeys((torch.get_default_dtype(), torch.float32)) if d in LOGIT_DTYPES)
    padded = os.environ.get("VLLM_MOE_SKIP_PADDING", "0") not in ("0", "", "false", "False")
    key = (shape, device, dtypes, padded)
    with _warm_lock:
        if key in _warmed:
            return False
        _warmed.add(key)
    thread = threading.Thread(target=_warm_up, args=(shape, device, dtypes, padded), daemon=True,
                              name="moe-routing warm-up")
    warmups.append(thread)
    thread.start()
    return True


def _create_fused_moe_router(original):
    def create_fused_moe_router(*args, **kwargs):
        router = original(*args, **kwargs)
        warm_router(router)
        return router

    return create_fused_moe_router


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
    Site("dsv4_topk", _ROUTER + "dsv4_topk", "dsv4_topk",
         ("gating_output", "correction_bias", "indices_dtype", "routed_scaling_factor", "is_padding", "input_ids",
          "bias_vl", "image_sentinel_lo"), _dsv4_topk),
    Site("topk_hash_softplus_sqrt", "vllm._custom_ops", "topk_hash_softplus_sqrt",
         ("topk_weights", "topk_indices", "token_expert_indices", "gating_output", "renormalize",
          "routed_scaling_factor", "e_score_correction_bias", "input_tokens", "hash_indices_table", "is_padding",
          "bias_vl", "image_sentinel_lo"), _topk_hash_softplus_sqrt),
    Site("moe_align_block_size", "vllm.model_executor.layers.fused_moe.moe_align_block_size",
         "moe_align_block_size", ("topk_ids", "block_size", "num_experts", "expert_map", "pad_sorted_ids",
                                  "ignore_invalid_experts", "return_scatter_idx"), _moe_align_block_size),
)
WARMUP_SITE = Site("create_fused_moe_router", _ROUTER + "router_factory", "create_fused_moe_router",
                   ("top_k", "global_num_experts", "renormalize", "use_grouped_topk", "num_expert_group", "topk_group",
                    "scoring_func", "num_fused_shared_experts", "shared_expert_weight", "routed_scaling_factor",
                    "e_score_correction_bias", "custom_routing_function", "eplb_state", "zero_expert_type",
                    "num_logical_experts", "hash_indices_table", "bias_vl", "image_sentinel_lo", "skip_padding"),
                   _create_fused_moe_router)  # not a routing site: warm-up at model load (warm_router)
DSV4_TOPK = 6  # the one top-k vLLM's dsv4_topk computes

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
    for site in SITES + (WARMUP_SITE,):
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
        for site in SITES + (WARMUP_SITE,):
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
