"""The dispatch plan: from a routing result's ids, what the expert GEMMs consume (docs/semantics.md, rule 9).

* :func:`align`: the *blocks* layout of the fused-MoE Triton kernels (vLLM's and SGLang's), with vLLM's
  ``moe_align_block_size`` signature, capacities and returns, so an engine can call it in its place; within an
  expert the slots come in ascending order (vLLM leaves that order open).
* :func:`group`: the *grouped* layout of grouped GEMMs (``torch.nn.functional.grouped_mm``'s ``offs``, CUTLASS):
  a permutation of the slots sorted by expert and each expert's cumulative end.
* :func:`route_plan`: :func:`moe_routing.route` and the plan of its ids in one call.

On GPU tensors the Triton kernel (kernels/_plan.py) runs, with no host sync; on CPU tensors the same kernel in
Triton's interpreter where Triton was imported for it (CI), else the reference (``moe_routing.reference``).
Under ``torch.compile`` the launches go through the custom ops ``torch.ops.moe_routing.align_into`` and
``group_into`` (fakes registered), which write into their buffers.
"""

from __future__ import annotations

import torch

from . import reference
from .call import check_call
from .op import _kernel_module, _outputs, kernel_inputs, route
from .plan_call import (MAP_BINS, PlanCall, RoutePlan, check_buffer, check_plan_call,
                        check_scatter_request, may_take_one_launch)

__all__ = ["RoutePlan", "align", "group", "route_plan"]


def align(
    topk_ids: torch.Tensor,
    block_size: int,
    num_experts: int,
    expert_map: torch.Tensor | None = None,
    pad_sorted_ids: bool = False,
    ignore_invalid_experts: bool = False,
    *,
    return_scatter_idx: bool = False,
    out: tuple | None = None,
) -> tuple:
    """Each expert's slots, padded to a multiple of ``block_size``: vLLM's ``moe_align_block_size``.

    Parameters
    ----------
    topk_ids : int32/int64 Tensor [T, K]
        A routing result's ids; ids outside [0, E) (padded rows' -1) are dropped.
    block_size : int
        The GEMM's block of rows (``BLOCK_SIZE_M``).
    num_experts : int
        E, the global expert count.
    expert_map : int32/int64 Tensor [E], optional
        Expert parallelism: each global expert's local index, -1 where another rank holds it.
    pad_sorted_ids : bool
        Round the capacity of ``sorted_token_ids`` up to a multiple of ``block_size``.
    ignore_invalid_experts : bool
        With a map: drop the slots of other ranks' experts and give local ids in ``expert_ids`` (True), or place
        every valid slot by its global expert and mark other ranks' blocks -1 in ``expert_ids`` (False).
    return_scatter_idx : bool
        Also return ``scatter_idx`` (int32 [T * K, 1]: a slot's index where it is placed, -1 where dropped).
    out : tuple of Tensors, optional
        Buffers for the returns (int32; ``sorted_token_ids`` and ``expert_ids`` of at least the capacities below),
        needed inside CUDA graphs.

    Returns
    -------
    (sorted_token_ids, expert_ids, num_tokens_post_padded[, scatter_idx])
        int32 [T*K + E*(block_size-1)] (vLLM's capacity: rounded up with ``pad_sorted_ids``, at most
        ``T*K*block_size`` when T*K < E), each expert's slots in ascending order then the sentinel ``T*K`` up to a
        multiple of ``block_size``, experts ascending, the sentinel past the used entries; int32 [capacity /
        block_size], each block's expert, -1 past the used blocks; int32 [1], the used entries.

    Examples
    --------
    >>> weights, ids = moe_routing.route(logits, 8, correction_bias=bias, num_expert_group=8, topk_group=4)
    >>> sorted_token_ids, expert_ids, num_tokens_post_padded = moe_routing.align(ids, 16, 256)
    """
    call = check_plan_call(topk_ids, num_experts, block_size, expert_map, pad_sorted_ids, ignore_invalid_experts)
    check_scatter_request(call, return_scatter_idx)
    device = topk_ids.device
    if out is None:
        out = _blocks_buffers(call, device)
        if return_scatter_idx:
            out += (torch.empty((call.slots, 1), dtype=torch.int32, device=device),)
    else:
        _check_align_out(out, call, device, return_scatter_idx)
    sorted_ids, expert_ids, post_padded = out[0], out[1], out[2]
    scatter = out[3] if return_scatter_idx else None
    ids = _contiguous(topk_ids)
    expert_map = None if expert_map is None else _contiguous(expert_map)
    if torch.compiler.is_compiling():
        torch.ops.moe_routing.align_into(ids, expert_map, sorted_ids, expert_ids, post_padded, scatter, block_size,
                                         num_experts, pad_sorted_ids, ignore_invalid_experts)
    else:
        _run_align(call, ids, expert_map, sorted_ids, expert_ids, post_padded, scatter)
    return (sorted_ids, expert_ids, post_padded, scatter) if return_scatter_idx else (sorted_ids, expert_ids,
                                                                                        post_padded)


def group(
    topk_ids: torch.Tensor,
    num_experts: int,
    *,
    expert_map: torch.Tensor | None = None,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The slots sorted by expert, for grouped GEMMs: ``(permutation, offsets)``.

    Parameters
    ----------
    topk_ids : int32/int64 Tensor [T, K]
        A routing result's ids; ids outside [0, E) are dropped (placed last).
    num_experts : int
        E, the global expert count.
    expert_map : int32/int64 Tensor [E], optional
        Each global expert's local index, -1 where another rank holds it (those slots are dropped).
    out : (permutation, offsets), optional
        int32 buffers of T*K and E_local entries.

    Returns
    -------
    permutation : int32 [T * K]
        Slot indices stably sorted by local expert (ascending within an expert), the dropped slots last.
        ``hidden[permutation // K]`` are the GEMM's rows.
    offsets : int32 [E_local]
        Each local expert's cumulative end (``grouped_mm``'s ``offs``); E_local is E, or the map's largest entry + 1.

    Examples
    --------
    >>> permutation, offsets = moe_routing.group(ids, 128)
    >>> rows = hidden[permutation.long() // ids.shape[1]]
    """
    call = check_plan_call(topk_ids, num_experts, None, expert_map)
    device = topk_ids.device
    if out is None:
        out = _grouped_buffers(call, device)
    else:
        _check_group_out(out, call, device)
    ids = _contiguous(topk_ids)
    expert_map = None if expert_map is None else _contiguous(expert_map)
    if torch.compiler.is_compiling():
        torch.ops.moe_routing.group_into(ids, expert_map, out[0], out[1], num_experts)
    else:
        _run_group(call, ids, expert_map, out[0], out[1])
    return out[0], out[1]


def route_plan(
    gating_output: torch.Tensor,
    topk: int,
    *,
    scoring_func: str = "sigmoid",
    correction_bias: torch.Tensor | None = None,
    num_expert_group: int = 1,
    topk_group: int = 1,
    renormalize: bool = True,
    routed_scaling_factor: float = 1.0,
    is_padding: torch.Tensor | None = None,
    ids_dtype: torch.dtype = torch.int32,
    block_size: int | None = None,
    expert_map: torch.Tensor | None = None,
    pad_sorted_ids: bool = False,
    ignore_invalid_experts: bool = False,
    out: RoutePlan | None = None,
) -> RoutePlan:
    """The whole routing stage: :func:`moe_routing.route`, then the plan of its ids (:func:`align` with a
    ``block_size``, :func:`group` without).

    The routing keywords are :func:`moe_routing.route`'s; ``block_size``, ``expert_map``, ``pad_sorted_ids`` and
    ``ignore_invalid_experts`` are :func:`align`'s (:func:`group` takes the map only). ``out`` is a
    :class:`RoutePlan` of buffers: ``weights`` and ``ids`` and the layout's fields (the others None).

    Returns
    -------
    RoutePlan
        ``(weights, ids, sorted_token_ids, expert_ids, num_tokens_post_padded, permutation, offsets)``: the blocks
        fields with a ``block_size``, the grouped fields without (the other layout's None).

    Examples
    --------
    >>> plan = moe_routing.route_plan(logits, 8, correction_bias=bias, num_expert_group=8, topk_group=4,
    ...                               block_size=16)
    >>> plan.sorted_token_ids, plan.expert_ids, plan.num_tokens_post_padded
    """
    if out is not None and not isinstance(out, RoutePlan):
        raise TypeError(f"out must be a RoutePlan of buffers, got {type(out).__name__}")
    routed = None if out is None else (out.weights, out.ids)
    if (type(gating_output) is torch.Tensor and gating_output.dim() == 2
            and may_take_one_launch(gating_output.shape[0], gating_output.shape[1], expert_map is not None)
            and not torch.compiler.is_compiling()):
        plan = _route_plan_in_one_launch(gating_output, topk, scoring_func, correction_bias, num_expert_group,
                                         topk_group, renormalize, routed_scaling_factor, is_padding, ids_dtype,
                                         block_size, expert_map, pad_sorted_ids, ignore_invalid_experts, out, routed)
        if plan is not None:
            return plan
    weights, ids = route(gating_output, topk, scoring_func=scoring_func, correction_bias=correction_bias,
                         num_expert_group=num_expert_group, topk_group=topk_group, renormalize=renormalize,
                         routed_scaling_factor=routed_scaling_factor, out=routed, is_padding=is_padding,
                         ids_dtype=ids_dtype)
    num_experts = gating_output.shape[1]
    if block_size is None:
        _check_grouped_flags(pad_sorted_ids, ignore_invalid_experts)
        buffers = None if out is None else (out.permutation, out.offsets)
        permutation, offsets = group(ids, num_experts, expert_map=expert_map, out=buffers)
        return RoutePlan(weights, ids, None, None, None, permutation, offsets)
    buffers = None if out is None else (out.sorted_token_ids, out.expert_ids, out.num_tokens_post_padded)
    blocks = align(ids, block_size, num_experts, expert_map, pad_sorted_ids, ignore_invalid_experts, out=buffers)
    return RoutePlan(weights, ids, *blocks, None, None)


def _check_grouped_flags(pad_sorted_ids, ignore_invalid_experts) -> None:
    if pad_sorted_ids or ignore_invalid_experts:
        raise ValueError("pad_sorted_ids and ignore_invalid_experts belong to the blocks layout: give a block_size, "
                         "or leave them False")


def _route_plan_in_one_launch(gating_output, topk, scoring_func, correction_bias, num_expert_group, topk_group,
                              renormalize, routed_scaling_factor, is_padding, ids_dtype, block_size, expert_map,
                              pad_sorted_ids, ignore_invalid_experts, out, routed) -> RoutePlan | None:
    """route_plan of a call ``may_take_one_launch`` lets take one launch (kernels/route_plan_launch.py),
    validated as route() and align() / group() validate it; None (nothing launched) where the call takes route() and
    then the plan (the rounds kernel's calls, ids buffers that are not contiguous)."""
    if not uses_kernel(gating_output):
        return None
    call = check_call(gating_output, topk, scoring_func, correction_bias, num_expert_group, topk_group, renormalize,
                      routed_scaling_factor, routed, is_padding, ids_dtype)
    weights, ids = _outputs(call, gating_output.device, routed, ids_dtype)
    if not ids.is_contiguous():
        return None
    if block_size is None:
        _check_grouped_flags(pad_sorted_ids, ignore_invalid_experts)
    plan_call = check_plan_call(ids, gating_output.shape[1], block_size, expert_map, pad_sorted_ids,
                                ignore_invalid_experts)
    from .kernels.route_plan_launch import launch_route_plan

    device = gating_output.device
    if block_size is None:
        if out is None:
            buffers = _grouped_buffers(plan_call, device)
        else:
            buffers = (out.permutation, out.offsets)
            _check_group_out(buffers, plan_call, device)
        layout = dict(permutation=buffers[0], offsets=buffers[1])
    else:
        if out is None:
            buffers = _blocks_buffers(plan_call, device)
        else:
            buffers = (out.sorted_token_ids, out.expert_ids, out.num_tokens_post_padded)
            _check_align_out(buffers, plan_call, device, False)
        layout = dict(sorted_ids=buffers[0], expert_ids=buffers[1], post_padded=buffers[2])
    logits, bias, padding = kernel_inputs(call, gating_output, correction_bias, is_padding)
    expert_map = None if expert_map is None else _contiguous(expert_map)
    if not launch_route_plan(call, plan_call, logits, bias, weights, ids, padding, expert_map, **layout):
        return None
    if block_size is None:
        return RoutePlan(weights, ids, None, None, None, *buffers)
    return RoutePlan(weights, ids, *buffers, None, None)


def _blocks_buffers(call: PlanCall, device) -> tuple:
    """sorted_token_ids, expert_ids and num_tokens_post_padded at vLLM's capacities."""
    return (torch.empty(call.capacity, dtype=torch.int32, device=device),
            torch.empty(call.blocks, dtype=torch.int32, device=device),
            torch.empty(1, dtype=torch.int32, device=device))


def _grouped_buffers(call: PlanCall, device) -> tuple:
    """permutation and offsets."""
    return (torch.empty(call.slots, dtype=torch.int32, device=device),
            torch.empty(call.local_experts, dtype=torch.int32, device=device))


def _contiguous(tensor: torch.Tensor) -> torch.Tensor:
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def _check_align_out(out, call: PlanCall, device, scatter: bool) -> None:
    wanted = 4 if scatter else 3
    if type(out) is not tuple and type(out) is not list or len(out) != wanted:
        raise TypeError(f"out must be a tuple of {wanted} tensors (sorted_token_ids, expert_ids, "
                        f"num_tokens_post_padded{', scatter_idx' if scatter else ''})")
    check_buffer("out[0] (sorted_token_ids)", out[0], call.capacity, device)
    check_buffer("out[1] (expert_ids)", out[1], call.blocks, device)
    check_buffer("out[2] (num_tokens_post_padded)", out[2], 1, device, shape=(1,))
    if scatter:
        check_buffer("out[3] (scatter_idx)", out[3], call.slots, device, shape=(call.slots, 1))


def _check_group_out(out, call: PlanCall, device) -> None:
    if type(out) is not tuple and type(out) is not list or len(out) != 2:
        raise TypeError("out must be a (permutation, offsets) pair of tensors")
    check_buffer("out[0] (permutation)", out[0], call.slots, device, shape=(call.slots,))
    check_buffer("out[1] (offsets)", out[1], call.local_experts, device, shape=(call.local_experts,))


def uses_kernel(ids: torch.Tensor) -> bool:
    """Whether plans of these ids run the kernel: on a GPU, or on a CPU in Triton's interpreter (else the
    reference)."""
    kernels = _kernel_module()
    return ids.is_cuda or kernels.INTERPRETED


def _run_align(call: PlanCall, ids, expert_map, sorted_ids, expert_ids, post_padded, scatter) -> None:
    """A validated align call into its buffers: the kernel, or the reference on a CPU without the interpreter."""
    if uses_kernel(ids):
        from .kernels.plan_launch import launch_plan

        launch_plan(call, ids, expert_map, sorted_ids, expert_ids, post_padded, scatter)
        return
    reference.align(ids, call.block_size, call.experts, expert_map, call.pad_sorted_ids,
                    call.map_mode == MAP_BINS, return_scatter_idx=scatter is not None,
                    out=(sorted_ids, expert_ids, post_padded) + ((scatter,) if scatter is not None else ()))


def _run_group(call: PlanCall, ids, expert_map, permutation, offsets) -> None:
    if uses_kernel(ids):
        from .kernels.plan_launch import launch_plan

        launch_plan(call, ids, expert_map, permutation=permutation, offsets=offsets)
        return
    reference.group(ids, call.experts, expert_map=expert_map, out=(permutation, offsets))


@torch.library.custom_op("moe_routing::align_into",
                         mutates_args=("sorted_token_ids", "expert_ids", "num_tokens_post_padded", "scatter_idx"))
def _align_into_op(topk_ids: torch.Tensor, expert_map: torch.Tensor | None, sorted_token_ids: torch.Tensor,
                   expert_ids: torch.Tensor, num_tokens_post_padded: torch.Tensor, scatter_idx: torch.Tensor | None,
                   block_size: int, num_experts: int, pad_sorted_ids: bool, ignore_invalid_experts: bool) -> None:
    """``align()`` as a custom op writing into caller buffers, for torch.compile graphs."""
    call = check_plan_call(topk_ids, num_experts, block_size, expert_map, pad_sorted_ids, ignore_invalid_experts)
    _run_align(call, topk_ids, expert_map, sorted_token_ids, expert_ids, num_tokens_post_padded, scatter_idx)


@_align_into_op.register_fake
def _align_into_fake(topk_ids, expert_map, sorted_token_ids, expert_ids, num_tokens_post_padded, scatter_idx,
                     block_size, num_experts, pad_sorted_ids, ignore_invalid_experts) -> None:
    return None


@torch.library.custom_op("moe_routing::group_into", mutates_args=("permutation", "offsets"))
def _group_into_op(topk_ids: torch.Tensor, expert_map: torch.Tensor | None, permutation: torch.Tensor,
                   offsets: torch.Tensor, num_experts: int) -> None:
    """``group()`` as a custom op writing into caller buffers, for torch.compile graphs."""
    call = check_plan_call(topk_ids, num_experts, None, expert_map)
    _run_group(call, topk_ids, expert_map, permutation, offsets)


@_group_into_op.register_fake
def _group_into_fake(topk_ids, expert_map, permutation, offsets, num_experts) -> None:
    return None

