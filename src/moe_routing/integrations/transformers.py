"""Hugging Face transformers integration: route a model's MoE routers through ``moe_routing.route``.

``patch(model, mode="replace")`` makes every supported router compute its top-k with ``route()`` (same
logits, same output contract: ``(router_logits, weights, int64 ids)``, weights in the dtype the
family returns). ``patch(model, mode="shadow")`` leaves the model's routing untouched and, on the
identical logits, runs ``route()`` into scratch and compares: a :class:`ShadowRecorder` counts calls,
calls whose ids all match, differing rows, the largest weight difference, and for every differing row
the float64 decision margins and which side agrees with the float64 semantics, so a near tie is told
apart from a real disagreement. ``unpatch(model)`` restores the model exactly.

Supported router classes (transformers 5.x, whose routers all return ``(logits, weights, ids)``):
DeepSeek-V3 (the class Kimi-K2, Moonlight and other DeepSeek-V3-style configs load into), GLM-4.5
MoE, Qwen2-MoE, Qwen3-MoE, Mixtral and gpt-oss.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

from ..call import check_call
from ..verify import MARGIN, decision_margins
from ..op import route
from ..reference import evaluate


@dataclass(frozen=True)
class RouterFamily:
    """How one family of transformers routers computes its logits and what it asks of top-k."""

    classes: tuple[str, ...]
    logits: Callable  # (module, hidden_states) -> logits, exactly as the module computes them
    arguments: Callable  # (module) -> route() keyword arguments
    weights_dtype: Callable  # (logits) -> dtype the family returns its weights in


def _deepseek_arguments(m):
    return dict(topk=m.top_k, scoring_func="sigmoid", correction_bias=m.e_score_correction_bias,
                num_expert_group=m.num_group, topk_group=m.topk_group, renormalize=bool(m.norm_topk_prob),
                routed_scaling_factor=float(m.routed_scaling_factor))


FAMILIES = (
    RouterFamily(
        ("DeepseekV3TopkRouter", "Glm4MoeTopkRouter"),
        logits=lambda m, h: F.linear(h.reshape(-1, m.hidden_dim).to(torch.float32), m.weight.to(torch.float32)),
        arguments=_deepseek_arguments,
        weights_dtype=lambda logits: torch.float32,
    ),
    RouterFamily(
        ("Qwen3MoeTopKRouter", "Qwen2MoeTopKRouter"),
        logits=lambda m, h: F.linear(h.reshape(-1, m.hidden_dim), m.weight),
        arguments=lambda m: dict(topk=m.top_k, scoring_func="softmax", renormalize=bool(m.norm_topk_prob)),
        weights_dtype=lambda logits: logits.dtype,
    ),
    RouterFamily(
        ("MixtralTopKRouter",),
        logits=lambda m, h: F.linear(h.reshape(-1, m.hidden_dim), m.weight),
        arguments=lambda m: dict(topk=m.top_k, scoring_func="softmax", renormalize=True),
        weights_dtype=lambda logits: torch.float32,
    ),
    RouterFamily(
        ("GptOssTopKRouter",),  # softmax over the top-k logits == softmax renormalised over the top k
        logits=lambda m, h: F.linear(h.reshape(-1, m.hidden_dim), m.weight, m.bias),
        arguments=lambda m: dict(topk=m.top_k, scoring_func="softmax", renormalize=True),
        weights_dtype=lambda logits: logits.dtype,
    ),
)
_BY_CLASS = {name: family for family in FAMILIES for name in family.classes}


@dataclass
class DifferingRow:
    """One token whose chosen experts differ between the model's routing and route()."""

    layer: str
    row: int
    expert_margin: float  # float64 gap deciding the experts (order and k-th boundary); 0 = exact tie
    group_margin: float  # float64 gap at the kept-group boundary (inf without group elimination)
    agrees: str  # which side's experts equal the float64 semantics: "route", "model", "both" or "neither"

    @property
    def kind(self) -> str:
        margin = min(self.expert_margin, self.group_margin)
        return "exact tie" if margin == 0 else "near tie" if margin < MARGIN else "disagreement"


@dataclass
class ShadowRecorder:
    """Counts from shadow mode; ``rows_of(kind)`` splits the differing rows by their float64 margin."""

    calls: int = 0
    calls_all_equal: int = 0
    rows: int = 0
    max_weight_delta: float = 0.0  # over rows whose experts match
    differing: list[DifferingRow] = field(default_factory=list)

    def rows_of(self, kind: str) -> int:
        return sum(1 for d in self.differing if d.kind == kind)

    def route_wrong(self) -> int:
        """Rows where route()'s experts differ from the float64 semantics outside near ties (0 when exact)."""
        return sum(1 for d in self.differing if d.kind == "disagreement" and d.agrees not in ("route", "both"))

    def summary(self) -> dict:
        return {
            "calls": self.calls, "calls with all ids equal": self.calls_all_equal, "rows": self.rows,
            "differing rows": len(self.differing), "exact ties": self.rows_of("exact tie"),
            "near ties": self.rows_of("near tie"), "disagreements": self.rows_of("disagreement"),
            "route agrees with float64": sum(d.agrees in ("route", "both") for d in self.differing),
            "model agrees with float64": sum(d.agrees in ("model", "both") for d in self.differing),
            "max |Δweight|": self.max_weight_delta,
        }

    def record(self, layer: str, logits: torch.Tensor, arguments: dict, model_weights: torch.Tensor,
               model_ids: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> None:
        """Compare one router call (experts as sets: the models return them unsorted)."""
        model_ids, model_order = torch.sort(model_ids.long(), dim=-1)
        ids, order = torch.sort(ids.long(), dim=-1)
        same = (model_ids == ids).all(dim=-1)
        self.calls += 1
        self.rows += int(same.numel())
        if bool(same.all()):
            self.calls_all_equal += 1
        if bool(same.any()):
            delta = (model_weights.float().gather(1, model_order) - weights.float().gather(1, order)).abs()
            self.max_weight_delta = max(self.max_weight_delta, float(delta[same].max()))
        differing = (~same).nonzero().flatten().tolist()
        if not differing:
            return
        rows = logits.detach()[differing].cpu()
        bias = arguments.get("correction_bias")
        bias = bias.detach().cpu() if bias is not None else None
        kwargs = dict(arguments)
        topk = kwargs.pop("topk")
        call = check_call(rows, topk, kwargs.get("scoring_func", "sigmoid"), bias, kwargs.get("num_expert_group", 1),
                          kwargs.get("topk_group", 1), kwargs.get("renormalize", True),
                          kwargs.get("routed_scaling_factor", 1.0), None)
        grouping = (kwargs.get("num_expert_group", 1), kwargs.get("topk_group", 1))
        ev = evaluate(rows, bias, call, dtype=torch.float64, grouping=grouping if grouping[0] > 1 else None)
        margins = decision_margins(ev, topk, grouping[1])
        exact = torch.sort(ev.ids, dim=-1).values
        for i, row in enumerate(differing):
            ours, theirs = bool((ids[row].cpu() == exact[i]).all()), bool((model_ids[row].cpu() == exact[i]).all())
            agrees = "both" if ours and theirs else "route" if ours else "model" if theirs else "neither"
            expert_margin = 0.0 if bool(margins.exact_tie[i]) else float(margins.expert[i])
            self.differing.append(DifferingRow(layer, row, expert_margin, float(margins.group[i]), agrees))


_PATCH_ATTRIBUTE = "_moe_routing_patch"


def supported(module: torch.nn.Module) -> bool:
    return type(module).__name__ in _BY_CLASS


def router_calls(model: torch.nn.Module, tokens: int) -> list[tuple[torch.Tensor, dict]]:
    """(logits, route() keyword arguments, topk included) of every supported router of ``model`` for ``tokens``
    rows of zero hidden states: the calls a forward of that many tokens makes (to compile their kernels ahead)."""
    calls = []
    for module in model.modules():
        if supported(module):
            family = _BY_CLASS[type(module).__name__]
            hidden = torch.zeros(tokens, module.hidden_dim, dtype=module.weight.dtype, device=module.weight.device)
            with torch.no_grad():
                calls.append((family.logits(module, hidden), family.arguments(module)))
    return calls


def patch(model: torch.nn.Module, mode: str = "replace", recorder: ShadowRecorder | None = None) -> ShadowRecorder | None:
    """Patch every supported router of ``model``; returns the recorder in shadow mode.

    Raises ``ValueError`` for an unknown mode or a model without a supported router, and if the model
    is already patched (``unpatch`` first).
    """
    if mode not in ("replace", "shadow"):
        raise ValueError(f"mode must be 'replace' or 'shadow', got {mode!r}")
    routers = [(name, m) for name, m in model.named_modules() if supported(m)]
    if not routers:
        raise ValueError(f"model has no supported router (supported: {', '.join(sorted(_BY_CLASS))})")
    if any(hasattr(m, _PATCH_ATTRIBUTE) for _, m in routers):
        raise ValueError("model is already patched; call unpatch(model) first")
    if mode == "shadow":
        recorder = recorder or ShadowRecorder()
    for name, module in routers:
        family = _BY_CLASS[type(module).__name__]
        forward = _replace_forward(family) if mode == "replace" else _shadow_forward(family, name, recorder)
        setattr(module, _PATCH_ATTRIBUTE, mode)
        module.forward = types.MethodType(forward, module)  # an instance attribute shadows the class method
    return recorder


def unpatch(model: torch.nn.Module) -> int:
    """Undo ``patch``: removes the instance attributes it set; returns how many routers were restored."""
    restored = 0
    for module in model.modules():
        if hasattr(module, _PATCH_ATTRIBUTE):
            del module.forward
            delattr(module, _PATCH_ATTRIBUTE)
            restored += 1
    return restored


def _replace_forward(family: RouterFamily):
    def forward(module, hidden_states):
        logits = family.logits(module, hidden_states)
        arguments = family.arguments(module)
        weights, ids = route(logits, arguments.pop("topk"), **arguments)
        return logits, weights.to(family.weights_dtype(logits)), ids.long()

    return forward


def _shadow_forward(family: RouterFamily, layer: str, recorder: ShadowRecorder):
    def forward(module, hidden_states):
        logits, model_weights, model_ids = type(module).forward(module, hidden_states)
        arguments = family.arguments(module)
        kwargs = dict(arguments)
        weights, ids = route(logits.detach(), kwargs.pop("topk"), **kwargs)  # scratch: the model never sees it
        recorder.record(layer, logits, arguments, model_weights, model_ids, weights, ids)
        return logits, model_weights, model_ids

    return forward
