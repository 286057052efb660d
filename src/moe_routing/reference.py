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

from .call import RoutingCall, check_call

# Selection categories, best first: a valid expert of a kept group, an invalid one, a forbidden one.
_VALID, _INVALID, _FORBIDDEN = 2, 1, 0


@dataclass
class Evaluation:
    """Every decision of one routing evaluation, for a [T, E] batch."""

    weights: torch.Tensor  # [T, K] float32 (or the compute dtype, see evaluate)
    ids: torch.Tensor  # [T, K] int64, chosen experts in rank order
    valid: torch.Tensor  # [T, E] bool: logit (and bias) finite
    scores: torch.Tensor  # [T, E] s: sigmoid or softmax of the logits, 0 where invalid
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
) -> tuple[torch.Tensor, torch.Tensor]:
    """Route like :func:`moe_routing.route`, in plain PyTorch (float32 arithmetic).

    Returns ``(weights, ids)``: float32 and int32, ``[T, topk]``.
    """
    call = check_call(
        gating_output, topk, scoring_func, correction_bias, num_expert_group, topk_group,
        renormalize, routed_scaling_factor, out,
    )
    result = evaluate(gating_output, correction_bias, call)
    weights, ids = result.weights.to(torch.float32), result.ids.to(torch.int32)
    if out is None:
        return weights, ids
    out[0].copy_(weights)
    out[1].copy_(ids)
    return out[0], out[1]


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
    x = gating_output.to(dtype)
    valid = torch.isfinite(x)
    bias = None
    if correction_bias is not None:
        bias = correction_bias.to(torch.float32).to(dtype)
        valid = valid & torch.isfinite(bias)
    if call.softmax:
        masked = x.masked_fill(~valid, float("-inf"))
        row_max = masked.amax(dim=-1, keepdim=True)
        row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
        exps = torch.exp(masked - row_max)  # exactly 0 where invalid
        total = exps.sum(dim=-1, keepdim=True)
        scores = exps / torch.where(total > 0, total, torch.ones_like(total))
    else:
        scores = torch.sigmoid(x)
    scores = scores.masked_fill(~valid, 0.0)
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
    weights = scores.gather(1, ids)
    if call.renormalize:
        total = weights.sum(dim=-1, keepdim=True)
        safe_total = torch.where(total > 0, total, torch.ones_like(total))
        weights = torch.where(total > 0, weights / safe_total, torch.full_like(weights, 1.0 / call.topk))
    weights = weights * call.scale
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
