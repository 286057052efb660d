"""The routing op: ``route()`` and the engines' ``biased_grouped_topk()``.

It validates the call (the same checks as the reference), normalises uneliminating groupings to the
flat path, and runs the Triton kernel on GPU tensors.  On CPU tensors it runs the same kernel through
Triton's interpreter when Triton was imported with ``TRITON_INTERPRET=1`` (that is how CI tests the
kernels), and otherwise the PyTorch reference, which is exact by definition and far faster on a CPU
than an interpreted kernel.  Under ``torch.compile`` the launch goes through a registered custom op
(``torch.ops.moe_routing.route_into``) with a fake, so graphs trace it with ``fullgraph=True``.

In eager mode on a CUDA device, a call of a plan that was launched before takes the C++ host path
(kernels/host_launch.py: the same acceptance, the same binary, one C++ call); every other call, and
every invalid one, runs the Python below.

Triton itself is imported on first use, so a command-line tool can still choose the interpreter.
"""

from __future__ import annotations

import torch

from . import reference
from .call import RoutingCall, check_call, check_hash_call

_kernels = None  # moe_routing.kernels, imported on first use
_host_route = None  # the C++ host path's entry point (kernels/host_launch.py), once built


def use_host_route(entry) -> None:
    """Let eager calls try ``entry`` (the C++ host path: validation and launch in one call) before the
    Python path; None keeps every call in Python."""
    global _host_route
    _host_route = entry


def _kernel_module():
    """moe_routing.kernels, imported on first use; the C++ host path hands its entry point to
    ``use_host_route`` once it is built (the kernels never import this module)."""
    global _kernels
    if _kernels is None:
        from . import kernels

        kernels.host_launch.on_load(use_host_route)
        _kernels = kernels
    return _kernels


def route(
    gating_output: torch.Tensor,
    topk: int,
    *,
    scoring_func: str = "sigmoid",
    correction_bias: torch.Tensor | None = None,
    num_expert_group: int = 1,
    topk_group: int = 1,
    renormalize: bool = True,
    routed_scaling_factor: float = 1.0,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    is_padding: torch.Tensor | None = None,
    ids_dtype: torch.dtype = torch.int32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose ``topk`` experts per token from router logits, and their weights.

    Parameters
    ----------
    gating_output : Tensor [T, E], float32 / bfloat16 / float16
        Router logits.
    topk : int
        Experts per token, K.
    scoring_func : "sigmoid", "softmax" or "sqrtsoftplus"
        s = sigmoid(x), softmax over the row, or sqrt(softplus(x)) (DeepSeek-V4); docs/semantics.md.
    correction_bias : Tensor [E], optional
        Added to the scores for choosing only (DeepSeek-V3's ``e_score_correction_bias``); used at its
        own precision.
    num_expert_group, topk_group : int
        Experts form ``num_expert_group`` contiguous groups; only the best ``topk_group`` groups may be
        chosen from.  ``topk_group >= num_expert_group`` eliminates nothing and takes the flat path.
    renormalize : bool
        Divide the chosen weights by their sum.
    routed_scaling_factor : float
        Multiplies the final weights.
    out : (weights, ids), optional
        float32 and ``ids_dtype`` ``[T, K]`` buffers to write into (needed inside CUDA graphs).
    is_padding : bool Tensor [T], optional
        Rows marked True are padding: their ids are -1 and their weights 0.
    ids_dtype : torch.int32 or torch.int64
        The dtype of the ids returned (or of ``out[1]``).

    Returns
    -------
    (weights, ids) : float32 [T, K] and ``ids_dtype`` [T, K], ids in descending choice value.

    Examples
    --------
    >>> logits = torch.randn(4, 256)
    >>> bias = torch.zeros(256)
    >>> weights, ids = route(logits, 8, correction_bias=bias, num_expert_group=8, topk_group=4,
    ...                      routed_scaling_factor=2.5)
    >>> weights.shape, ids.dtype
    (torch.Size([4, 8]), torch.int32)
    """
    if (_host_route is not None and is_padding is None and ids_dtype is torch.int32
            and not torch.compiler.is_compiling()):
        # a call of a plan launched before: validated and launched in C++ (kernels/host_launch.py), else None
        routed = _host_route(gating_output, topk, scoring_func, correction_bias, num_expert_group, topk_group,
                             renormalize, routed_scaling_factor, out)
        if routed is not None:
            return routed
    call = check_call(
        gating_output, topk, scoring_func, correction_bias, num_expert_group, topk_group,
        renormalize, routed_scaling_factor, out, is_padding, ids_dtype,
    )
    weights, ids = _outputs(call, gating_output.device, out, ids_dtype)
    if call.tokens == 0:
        return weights, ids
    logits, bias, padding = kernel_inputs(call, gating_output, correction_bias, is_padding)
    if torch.compiler.is_compiling():
        torch.ops.moe_routing.route_into(
            logits, bias, weights, ids, call.topk, call.scoring, call.num_groups, call.topk_group,
            call.renormalize, call.scale, padding,
        )
    else:
        _run(call, logits, bias, weights, ids, padding)
    return weights, ids


def route_hash(
    gating_output: torch.Tensor,
    input_ids: torch.Tensor,
    tid2eid: torch.Tensor,
    *,
    scoring_func: str = "sqrtsoftplus",
    renormalize: bool = True,
    routed_scaling_factor: float = 1.0,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    is_padding: torch.Tensor | None = None,
    ids_dtype: torch.dtype = torch.int32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hash routing (DeepSeek-V4's first layers): each token's experts come from a fixed table,
    ``ids = tid2eid[input_ids]``; the weights are the scores of those experts, renormalised and scaled by the
    rules of :func:`route` (docs/semantics.md, rule 7).

    Parameters
    ----------
    gating_output : Tensor [T, E], float32 / bfloat16 / float16
        Router logits.
    input_ids : int32/int64 Tensor [T]
        Each row's token id. A token id outside the table's rows gives that row ids -1 and weights 0.
    tid2eid : int32/int64 Tensor [V, K]
        The table: K expert ids a token id, each in [0, E) (checked once per table and version: ValueError).
        An expert may repeat within a row; each slot then carries that expert's score.
    scoring_func : "sqrtsoftplus" or "sigmoid"
    renormalize, routed_scaling_factor, out, is_padding, ids_dtype
        As in :func:`route`.

    Returns
    -------
    (weights, ids) : float32 [T, K] and ``ids_dtype`` [T, K], ids in the table's order.
    """
    call = check_hash_call(gating_output, input_ids, tid2eid, scoring_func, renormalize, routed_scaling_factor,
                           out, is_padding, ids_dtype)
    weights, ids = _outputs(call, gating_output.device, out, ids_dtype)
    if call.tokens == 0:
        return weights, ids
    logits = gating_output if gating_output.stride(1) == 1 or call.experts == 1 else gating_output.contiguous()
    kernels = _kernels or _kernel_module()
    if logits.is_cuda or kernels.INTERPRETED:  # (the kernel reads the token ids and the table at unit strides)
        kernels.launch_hash(call, logits, input_ids.contiguous(), tid2eid.contiguous(), weights, ids,
                            None if is_padding is None else _padding_bytes(is_padding))
    else:
        result_weights, result_ids, unknown = reference.evaluate_hash(logits, input_ids, tid2eid, call)
        weights.copy_(result_weights)
        ids.copy_(result_ids)
        _mark_padded(weights, ids, unknown if is_padding is None else unknown | is_padding)
    return weights, ids


def _outputs(call: RoutingCall, device, out, ids_dtype) -> tuple[torch.Tensor, torch.Tensor]:
    if out is not None:
        return out[0], out[1]
    weights = torch.empty((call.tokens, call.topk), dtype=torch.float32, device=device)
    ids = torch.empty((call.tokens, call.topk), dtype=ids_dtype, device=device)
    return weights, ids


def kernel_inputs(call: RoutingCall, gating_output, correction_bias, is_padding) -> tuple:
    """A validated call's logits (unit column stride), bias (contiguous) and padding mask (``_padding_bytes``) as the
    kernels read them."""
    logits = gating_output if gating_output.stride(1) == 1 or call.experts == 1 else gating_output.contiguous()
    bias = correction_bias
    if bias is not None and not bias.is_contiguous():
        bias = bias.contiguous()
    return logits, bias, None if is_padding is None else _padding_bytes(is_padding)


def _padding_bytes(is_padding: torch.Tensor) -> torch.Tensor:
    """``is_padding`` as the kernels read it: one uint8 a row, unit stride (a view where it already is)."""
    return (is_padding if is_padding.is_contiguous() else is_padding.contiguous()).view(torch.uint8)


def biased_grouped_topk(
    gating_output: torch.Tensor,
    correction_bias: torch.Tensor,
    topk: int,
    renormalize: bool,
    num_expert_group: int,
    topk_group: int,
    routed_scaling_factor: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3 routing with the engines' name and argument order: sigmoid scores plus bias."""
    return route(
        gating_output, topk, scoring_func="sigmoid", correction_bias=correction_bias,
        num_expert_group=num_expert_group, topk_group=topk_group, renormalize=renormalize,
        routed_scaling_factor=routed_scaling_factor,
    )


def _run(call: RoutingCall, logits, bias, weights, ids, padding=None) -> None:
    """Run a validated call into ``weights``/``ids``: the kernels on GPU tensors; on CPU tensors the
    Triton interpreter when Triton was imported for it, else the reference. ``padding``: uint8 [T]."""
    kernels = _kernels or _kernel_module()
    if logits.is_cuda or kernels.INTERPRETED:
        kernels.launch(call, logits, bias, weights, ids, padding=padding)
    else:
        result = reference.evaluate(logits, bias, call)
        weights.copy_(result.weights)
        ids.copy_(result.ids)
        if padding is not None:
            _mark_padded(weights, ids, padding.bool())


def _mark_padded(weights: torch.Tensor, ids: torch.Tensor, padded: torch.Tensor) -> None:
    """Padded rows (``padded`` [T] bool) as the semantics give them: weights 0, ids -1."""
    weights.masked_fill_(padded[:, None], 0.0)
    ids.masked_fill_(padded[:, None], -1)


@torch.library.custom_op("moe_routing::route_into", mutates_args=("weights", "ids"))
def _route_into_op(
    gating_output: torch.Tensor,
    correction_bias: torch.Tensor | None,
    weights: torch.Tensor,
    ids: torch.Tensor,
    topk: int,
    scoring: int,
    num_groups: int,
    topk_group: int,
    renormalize: bool,
    scale: float,
    padding: torch.Tensor | None = None,
) -> None:
    """``route()`` as a custom op writing into caller buffers, for torch.compile graphs."""
    tokens, experts = gating_output.shape
    call = RoutingCall(tokens, experts, topk, scoring, num_groups, topk_group, renormalize, scale)
    if tokens:
        _run(call, gating_output, correction_bias, weights, ids, padding)


@_route_into_op.register_fake
def _route_into_fake(gating_output, correction_bias, weights, ids, topk, scoring, num_groups, topk_group,
                     renormalize, scale, padding=None) -> None:
    return None
