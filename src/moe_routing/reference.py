"""The PyTorch reference: the definition of a correct routing result.

It implements docs/semantics.md line by line, vectorised over tokens, with no attention to speed.
:func:`route` has the signature of :func:`moe_routing.route` and computes in float32, as the kernels
must.  :func:`evaluate` is the same computation at any precision with its intermediate decisions
exposed; :mod:`moe_routing.verify` runs it in float64 to judge kernel results and measure
how close each row is to a tie.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .call import SIGMOID, SOFTMAX, RoutingCall, check_call, check_hash_call
from .plan_call import MAP_BINS, MAP_VALUES, PlanCall, RoutePlan, check_plan_call, check_scatter_request

# Selection categories, best first: a valid expert of a kept group, an invalid one, a forbidden one.
_VALID, _INVALID, _FORBIDDEN = 2, 1, 0


@dataclass
class Evaluation:
    """Every decision of one routing evaluation, for a [T, E] batch."""

    weights: torch.Tensor  # [T, K] float32 (or the compute dtype, see evaluate)
    ids: torch.Tensor  # [T, K] int64, chosen experts in rank order
    valid: torch.Tensor  # [T, E] bool: logit (and bias) finite
    scores: torch.Tensor  # [T, E] s: sigmoid, softmax or sqrt-softplus of the logits, 0 where invalid
    choice: torch.Tensor  # [T, E] c = s + bias (or s), 0 where invalid
    group_scores: torch.Tensor | None  # [T, G] when the group stage ran, -inf for a group with no valid expert
    kept_groups: torch.Tensor | None  # [T, G] bool, when the group stage ran
    allowed: torch.Tensor  # [T, E] bool: expert belongs to a kept group


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
    """Route like :func:`moe_routing.route`, in plain PyTorch (float32 arithmetic).

    Returns ``(weights, ids)``: float32 and ``ids_dtype``, ``[T, topk]``.
    """
    call = check_call(
        gating_output, topk, scoring_func, correction_bias, num_expert_group, topk_group,
        renormalize, routed_scaling_factor, out, is_padding, ids_dtype,
    )
    result = evaluate(gating_output, correction_bias, call)
    return _finish(result.weights, result.ids, is_padding, ids_dtype, out)


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
    """Hash routing like :func:`moe_routing.route_hash`, in plain PyTorch (float32 arithmetic)."""
    call = check_hash_call(gating_output, input_ids, tid2eid, scoring_func, renormalize, routed_scaling_factor,
                           out, is_padding, ids_dtype)
    weights, ids, unknown = evaluate_hash(gating_output, input_ids, tid2eid, call)
    padded = unknown if is_padding is None else unknown | is_padding
    return _finish(weights, ids, padded, ids_dtype, out)


def evaluate_hash(gating_output: torch.Tensor, input_ids: torch.Tensor, tid2eid: torch.Tensor, call: RoutingCall,
                  dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hash routing (docs/semantics.md, rule 7) at precision ``dtype``: (weights, ids, rows whose token id is
    outside the table). The ids are the table's row for each token, in the table's order."""
    vocabulary = tid2eid.shape[0]
    tokens = input_ids.long()
    unknown = (tokens < 0) | (tokens >= vocabulary)
    ids = tid2eid.long()[tokens.clamp(0, vocabulary - 1)]
    inside = (ids >= 0) & (ids < gating_output.shape[1])  # (entries are checked; one outside counts as invalid)
    scores, _ = _scores(gating_output, None, call, dtype)
    weights = torch.where(inside, scores.gather(1, ids.clamp(0, gating_output.shape[1] - 1)), 0.0)
    return _finish_weights(weights, call), ids, unknown


def _finish(weights, ids, padded, ids_dtype, out):
    """float32 weights and ``ids_dtype`` ids, padded rows set to (0, -1), into ``out`` when given."""
    weights, ids = weights.to(torch.float32), ids.to(ids_dtype)
    if padded is not None:
        weights = weights.masked_fill(padded[:, None], 0.0)
        ids = ids.masked_fill(padded[:, None], -1)
    if out is None:
        return weights, ids
    out[0].copy_(weights)
    out[1].copy_(ids)
    return out[0], out[1]


def _scores(gating_output, correction_bias, call: RoutingCall, dtype):
    """Rule 1: (s [T, E], valid [T, E]) in ``dtype``; s is 0 where invalid."""
    x = gating_output.to(dtype)
    valid = torch.isfinite(x)
    if correction_bias is not None:
        valid = valid & torch.isfinite(correction_bias)
    if call.scoring == SOFTMAX:
        masked = x.masked_fill(~valid, float("-inf"))
        row_max = masked.amax(dim=-1, keepdim=True)
        row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
        exps = torch.exp(masked - row_max)  # exactly 0 where invalid
        total = exps.sum(dim=-1, keepdim=True)
        scores = exps / torch.where(total > 0, total, torch.ones_like(total))
    elif call.scoring == SIGMOID:
        scores = torch.sigmoid(x)
    else:  # sqrt(softplus(x)), softplus = x above 20, else log1p(exp(x))
        scores = torch.sqrt(F.softplus(x, threshold=20.0))
    return scores.masked_fill(~valid, 0.0), valid


def _finish_weights(weights: torch.Tensor, call: RoutingCall) -> torch.Tensor:
    """Rule 4: renormalise (1/K on a zero sum), then scale."""
    if call.renormalize:
        total = weights.sum(dim=-1, keepdim=True)
        safe_total = torch.where(total > 0, total, torch.ones_like(total))
        weights = torch.where(total > 0, weights / safe_total, torch.full_like(weights, 1.0 / call.topk))
    return weights * call.scale


def evaluate(
    gating_output: torch.Tensor,
    correction_bias: torch.Tensor | None,
    call: RoutingCall,
    dtype: torch.dtype = torch.float32,
    grouping: tuple[int, int] | None = None,
) -> Evaluation:
    """Evaluate the routing semantics at precision ``dtype``.

    ``grouping=(num_expert_group, topk_group)`` runs the group stage literally with that grouping,
    even one that eliminates nothing (rule 2 says the result must not change; tests use this to check
    the shortcut).  By default the stage runs only when the normalised call can eliminate a group.
    """
    tokens, experts = gating_output.shape
    # 1. scores and choice values, all arithmetic in `dtype`; the bias at its own precision, as float32
    bias = None if correction_bias is None else correction_bias.to(torch.float32).to(dtype)
    scores, valid = _scores(gating_output, bias, call, dtype)
    choice = scores + bias if bias is not None else scores
    choice = choice.masked_fill(~valid, 0.0)

    # 2. groups: keep the best `topk_group`; experts of other groups cannot be chosen
    group_scores = kept_groups = None
    allowed = torch.ones_like(valid)
    if grouping is None and call.grouped:
        grouping = (call.num_groups, call.topk_group)
    if grouping is not None:
        groups, kept = grouping
        group_scores = _group_scores(choice, valid, groups, has_bias=bias is not None)
        order = torch.sort(group_scores, dim=-1, descending=True, stable=True).indices
        kept_groups = torch.zeros_like(group_scores, dtype=torch.bool)
        kept_groups.scatter_(1, order[:, :kept], True)
        allowed = kept_groups.repeat_interleave(experts // groups, dim=1)

    # 3. top-k by choice value; ties to the lower index; invalid after valid; forbidden never
    category = torch.where(allowed, torch.where(valid, _VALID, _INVALID), _FORBIDDEN).to(torch.int8)
    by_choice = torch.sort(choice.masked_fill(category != _VALID, 0.0), dim=-1, descending=True, stable=True).indices
    by_category = torch.sort(category.gather(1, by_choice), dim=-1, descending=True, stable=True).indices
    ids = by_choice.gather(1, by_category)[:, : call.topk]

    # 4. weights: unbiased scores of the chosen experts, renormalised, scaled
    weights = _finish_weights(scores.gather(1, ids), call)
    return Evaluation(weights, ids, valid, scores, choice, group_scores, kept_groups, allowed)


def _group_scores(choice: torch.Tensor, valid: torch.Tensor, groups: int, has_bias: bool) -> torch.Tensor:
    """A group's score: the sum of its two largest valid c (its largest s without bias); -inf if none valid.

    An invalid expert counts for nothing: with one valid expert the score is that expert's c.
    """
    tokens, experts = choice.shape
    per_group = choice.masked_fill(~valid, float("-inf")).view(tokens, groups, experts // groups)
    if not has_bias:
        return per_group.amax(dim=-1)
    top = per_group.topk(min(2, per_group.shape[-1]), dim=-1).values
    best = top[..., 0]
    if top.shape[-1] == 1:
        return best
    second = top[..., 1]
    second = torch.where(torch.isinf(second), torch.zeros_like(second), second)
    return torch.where(torch.isinf(best), best, best + second)


# ---- dispatch plans (docs/semantics.md, rule 9) ------------------------------------------------------------------

def slot_bins(topk_ids: torch.Tensor, call: PlanCall, expert_map: torch.Tensor | None) -> torch.Tensor:
    """Each slot's bin, int64 [T * K]: its expert (its local expert where the map makes the bins), or -1 where
    the slot is dropped (an id outside [0, E), or an expert the map gives to another rank)."""
    ids = topk_ids.reshape(-1).long()
    valid = (ids >= 0) & (ids < call.experts)
    bins = ids.clamp(0, call.experts - 1)
    if call.map_mode == MAP_BINS:
        bins = expert_map.long()[bins]
        valid &= bins >= 0
    return torch.where(valid, bins, -1)


def align(topk_ids: torch.Tensor, block_size: int, num_experts: int, expert_map: torch.Tensor | None = None,
          pad_sorted_ids: bool = False, ignore_invalid_experts: bool = False, *, return_scatter_idx: bool = False,
          out: tuple | None = None) -> tuple:
    """The blocks layout like :func:`moe_routing.align`, in plain PyTorch."""
    call = check_plan_call(topk_ids, num_experts, block_size, expert_map, pad_sorted_ids, ignore_invalid_experts)
    check_scatter_request(call, return_scatter_idx)
    sorted_ids, expert_ids, post_padded = _blocks(topk_ids, call, expert_map)
    result = (sorted_ids, expert_ids, post_padded)
    if return_scatter_idx:
        bins = slot_bins(topk_ids, call, expert_map)
        result += (torch.where(bins >= 0, torch.arange(call.slots, device=bins.device), -1).to(torch.int32)[:, None],)
    if out is None:
        return result
    for buffer, value in zip(out, result):
        buffer[: value.shape[0]].copy_(value)
    out[0][result[0].shape[0]:].fill_(call.slots)
    out[1][result[1].shape[0]:].fill_(-1)
    return tuple(out[: len(result)])


def _blocks(topk_ids: torch.Tensor, call: PlanCall, expert_map: torch.Tensor | None):
    """(sorted_token_ids, expert_ids, num_tokens_post_padded) of the blocks layout at vLLM's capacities."""
    device, size = topk_ids.device, call.block_size
    bins = slot_bins(topk_ids, call, expert_map)
    kept = bins >= 0
    counts = torch.bincount(bins[kept], minlength=call.experts)
    padded = (counts + size - 1) // size * size
    ends = torch.cumsum(padded, 0)
    starts = ends - padded
    order = torch.sort(torch.where(kept, bins, call.experts), stable=True).indices[: int(kept.sum())]
    rank = torch.arange(order.numel(), device=device) - (torch.cumsum(counts, 0) - counts)[bins[order]]
    sorted_ids = torch.full((call.capacity,), call.slots, dtype=torch.int32, device=device)
    sorted_ids[starts[bins[order]] + rank] = order.to(torch.int32)
    total = int(ends[-1]) if call.experts else 0
    used = torch.arange(total // size, device=device) * size
    block_experts = torch.searchsorted(ends, used, right=True)
    if call.map_mode == MAP_VALUES:
        block_experts = expert_map.long()[block_experts]
    expert_ids = torch.full((call.blocks,), -1, dtype=torch.int32, device=device)
    expert_ids[: used.numel()] = block_experts.to(torch.int32)
    return sorted_ids, expert_ids, torch.tensor([total], dtype=torch.int32, device=device)


def group(topk_ids: torch.Tensor, num_experts: int, *, expert_map: torch.Tensor | None = None,
          out: tuple | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The grouped layout like :func:`moe_routing.group`, in plain PyTorch: (permutation, offsets)."""
    call = check_plan_call(topk_ids, num_experts, None, expert_map)
    bins = slot_bins(topk_ids, call, expert_map)
    kept = bins >= 0
    permutation = torch.sort(torch.where(kept, bins, call.local_experts), stable=True).indices.to(torch.int32)
    offsets = torch.cumsum(torch.bincount(bins[kept], minlength=call.local_experts), 0).to(torch.int32)
    if out is None:
        return permutation, offsets
    out[0].copy_(permutation)
    out[1].copy_(offsets)
    return out[0], out[1]


def route_plan(gating_output: torch.Tensor, topk: int, *, block_size: int | None = None,
               expert_map: torch.Tensor | None = None, pad_sorted_ids: bool = False,
               ignore_invalid_experts: bool = False, out: RoutePlan | None = None, **route_kwargs) -> RoutePlan:
    """:func:`route` and the plan of its ids, like :func:`moe_routing.route_plan`."""
    weights, ids = route(gating_output, topk, **route_kwargs)
    num_experts = gating_output.shape[1]
    if block_size is None:
        permutation, offsets = group(ids, num_experts, expert_map=expert_map)
        plan = RoutePlan(weights, ids, None, None, None, permutation, offsets)
    else:
        blocks = align(ids, block_size, num_experts, expert_map, pad_sorted_ids, ignore_invalid_experts)
        plan = RoutePlan(weights, ids, *blocks, None, None)
    if out is None:
        return plan
    for buffer, value in zip(out, plan):
        if value is not None:
            buffer[: value.shape[0]].copy_(value)
    return out
