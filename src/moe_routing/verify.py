"""Judge routing results against a float64 evaluation of the semantics.

A kernel computes in float32, so where two choice values are closer than float32 rounding the
float32 answer may legitimately differ from the float64 one.  Each row therefore gets a *decision
margin*: the smallest positive float64 gap that decides its answer (between consecutive chosen
experts, at the k-th boundary, and at the kept-group boundary).  Ids must equal the float64 ids on
every row whose margin is at least ``margin`` (1e-6 by default); rows below it are near ties, where
either answer is accepted and counted.  A gap of exactly 0 is not a near tie: it only arises from
identical inputs, which float32 ties exactly too, so the tie rule (lower index first) decides it and
the ids must match.  Weights are checked on every row against the float64 weights of the ids the
kernel returned, to ``weight_tol`` times ``max(1, |routed_scaling_factor|)``.

The float64 evaluation runs the group stage literally with the caller's grouping, also when it cannot
eliminate a group, so every verification also checks the flat-path shortcut (semantics rule 2).
Inputs whose float32 sigmoid underflows (logits below about -88) are outside what float64 can judge.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .call import check_call
from .reference import Evaluation, evaluate

MARGIN = 1e-6
WEIGHT_TOL = 2e-6


@dataclass
class Verdict:
    """How a batch of routing results compares with the float64 semantics."""

    rows: int
    rows_equal: int  # ids identical to float64's
    exact_tie_rows: int  # rows where the tie rule decides (some float64 gap is exactly 0)
    near_tie_rows: int  # rows with a deciding gap in (0, margin): either answer accepted
    near_tie_differing: int  # near-tie rows whose ids differ from float64's (accepted)
    mismatched_rows: int  # ids differ although the margin is clear: a defect
    malformed_rows: int  # ids out of range or repeated, or a non-finite weight: a defect
    max_weight_error: float  # max |weight - float64 weight of the same ids|
    weight_tol: float  # the bound max_weight_error must respect

    @property
    def ok(self) -> bool:
        return self.mismatched_rows == 0 and self.malformed_rows == 0 and self.max_weight_error <= self.weight_tol


@dataclass
class Margins:
    """Per-row float64 decision margins of one evaluation; ``inf`` where nothing is decided."""

    expert: torch.Tensor  # [T] smallest positive gap among the K+1 best allowed valid choice values
    group: torch.Tensor  # [T] positive gap between the last kept and the first eliminated group score
    exact_tie: torch.Tensor  # [T] bool: some deciding gap is exactly 0, so the tie rule decides

    @property
    def row(self) -> torch.Tensor:
        return torch.minimum(self.expert, self.group)


def decision_margins(ev: Evaluation, topk: int, topk_group: int) -> Margins:
    """The float64 gaps that decide each row: order of the chosen experts, the k-th boundary, the groups."""
    tokens, experts = ev.choice.shape
    inf = torch.tensor(float("inf"), dtype=ev.choice.dtype, device=ev.choice.device)
    ranked = ev.choice.masked_fill(~(ev.valid & ev.allowed), float("-inf"))
    top = ranked.topk(min(topk + 1, experts), dim=-1).values
    gaps = torch.where(torch.isfinite(top[:, 1:]), top[:, :-1] - top[:, 1:], inf)
    group_gap = torch.full((tokens,), float("inf"), dtype=gaps.dtype, device=gaps.device)
    if ev.group_scores is not None and topk_group < ev.group_scores.shape[1]:
        ordered = torch.sort(ev.group_scores, dim=-1, descending=True).values
        last_kept, first_out = ordered[:, topk_group - 1], ordered[:, topk_group]
        group_gap = torch.where(torch.isfinite(first_out), last_kept - first_out, inf)
    exact_tie = (gaps == 0).any(dim=-1) | (group_gap == 0)
    expert = torch.where(gaps > 0, gaps, inf).amin(dim=-1) if gaps.shape[1] else torch.full_like(group_gap, float("inf"))
    return Margins(expert, torch.where(group_gap > 0, group_gap, inf), exact_tie)


def float64_weights(ev: Evaluation, ids: torch.Tensor, renormalize: bool, scale: float, topk: int) -> torch.Tensor:
    """The float64 weights that the semantics give to the experts ``ids`` (whatever chose them)."""
    chosen = ev.scores.gather(1, ids.long().clamp(0, ev.scores.shape[1] - 1))
    if renormalize:
        total = chosen.sum(dim=-1, keepdim=True)
        chosen = torch.where(total > 0, chosen / torch.where(total > 0, total, 1.0), 1.0 / topk)
    return chosen * scale


def verify(
    weights: torch.Tensor,
    ids: torch.Tensor,
    gating_output: torch.Tensor,
    topk: int,
    *,
    scoring_func: str = "sigmoid",
    correction_bias: torch.Tensor | None = None,
    num_expert_group: int = 1,
    topk_group: int = 1,
    renormalize: bool = True,
    routed_scaling_factor: float = 1.0,
    margin: float = MARGIN,
    weight_tol: float = WEIGHT_TOL,
    is_padding: torch.Tensor | None = None,
) -> Verdict:
    """Compare a routing result ``(weights, ids)`` with the float64 semantics of the same call."""
    call = check_call(gating_output, topk, scoring_func, correction_bias, num_expert_group, topk_group,
                      renormalize, routed_scaling_factor, None, is_padding)
    logits = gating_output.detach().cpu()
    bias = correction_bias.detach().cpu() if correction_bias is not None else None
    weights, ids = weights.detach().cpu(), ids.detach().cpu().long()
    ev = evaluate(logits, bias, call, dtype=torch.float64, grouping=(num_expert_group, topk_group))
    tokens, experts = logits.shape

    padded = torch.zeros(tokens, dtype=torch.bool) if is_padding is None else is_padding.detach().cpu()
    in_range = ((ids >= 0) & (ids < experts)).all(dim=-1)
    distinct = (torch.sort(ids, dim=-1).values.diff(dim=-1) != 0).all(dim=-1) if topk > 1 else in_range
    finite = torch.isfinite(weights).all(dim=-1)
    well_padded = (ids == -1).all(dim=-1) & (weights == 0).all(dim=-1)
    malformed = torch.where(padded, ~well_padded, ~(in_range & distinct & finite))

    margins = decision_margins(ev, topk, topk_group)
    near_tie = (margins.row < margin) & ~padded
    equal = (ids == ev.ids).all(dim=-1) | padded

    expected = float64_weights(ev, ids, renormalize, call.scale, topk)
    error = (weights.double() - expected).abs() / (expected.abs() / max(1.0, abs(call.scale))).clamp(min=1.0)
    error = error.masked_fill(~in_range[:, None] | padded[:, None], 0.0)
    return Verdict(
        rows=tokens,
        rows_equal=int(equal.sum()),
        exact_tie_rows=int(margins.exact_tie.sum()),
        near_tie_rows=int(near_tie.sum()),
        near_tie_differing=int((near_tie & ~equal).sum()),
        mismatched_rows=int((~near_tie & ~equal).sum()),
        malformed_rows=int(malformed.sum()),
        max_weight_error=float(error.max()) if error.numel() else 0.0,
        weight_tol=weight_tol * max(1.0, abs(call.scale)),
    )
