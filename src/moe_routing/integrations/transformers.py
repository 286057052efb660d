"""Hugging Face transformers integration: route a model's MoE routers through ``moe_routing.route``.

``patch(model, mode="replace")`` makes every supported router compute its top-k with ``route()`` (or
``route_hash()`` for hash layers): the same logits, the same outputs in the same order and dtypes, the family's
own renormalisation (its epsilon), scale and weights dtype. ``patch(model, mode="shadow")`` leaves the model's
routing untouched and, on the identical logits, runs ``route()`` into scratch and compares: a
:class:`ShadowRecorder` counts calls, calls whose ids all match, differing rows, the largest weight difference,
and for every differing row the float64 decision margins and which side agrees with the float64 semantics, so a
near tie is told apart from a real disagreement. ``unpatch(model)`` restores the model exactly.

``patch`` also switches the model's experts, in the same mode, to the ``"moe_routing"`` experts implementation of
transformers' experts registry (``transformers_experts``: grouped_mm's layer with ``moe_routing.group``'s plan);
``PatchResult.experts`` says what it did, or why it left them alone, and ``unpatch`` restores them.

Routers are recognised by class (``FAMILIES``; transformers 5.17), in four patterns and DeepSeek-V4's two:
P1 sigmoid + correction bias with groups by top-2 sums (DeepSeek-V3 and the many configs that copy it), P2 softmax
then top-k, P3 top-k of the logits then softmax over the k, P4 sigmoid + bias without groups, DeepSeek-V4's
sqrt-softplus top-k and its hash layers. A module that looks like a router (its class name ends in Router, Gate
or Gating) but is none of these is left alone and named in ``PatchResult.skipped``. docs/integrations.md has the
table: which classes, what each keeps.
"""

from __future__ import annotations

import re
import types
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

from ..call import check_call
from ..op import route, route_hash
from ..reference import evaluate
from ..verify import MARGIN, decision_margins
from .transformers_experts import (ExpertsShadowRecorder, ExpertsSwitch, experts_switched,  # registers on import
                                   restore_experts, switch_experts)


@dataclass(frozen=True)
class RouterFamily:
    """How one family of transformers routers computes its logits, asks for its top-k and returns it.

    ``call(module, *args)`` gives ``(logits [T, E], route() keyword arguments)`` for the patched method's own
    arguments (``tid2eid`` and ``input_ids`` among them: a hash layer); ``route()`` runs without renormalising or
    scaling unless ``call`` asks for it, and ``finish(module, logits, weights, ids, *args)`` builds what the
    method returns, with the family's own renormalisation, scale and dtypes. ``model_result`` takes
    ``(weights, ids)`` [T, K] out of what the original method returns (shadow mode).
    """

    pattern: str
    classes: tuple[str, ...]
    call: Callable
    finish: Callable
    keeps: str  # what the replacement keeps of the family (docs/integrations.md's table)
    method: str = "forward"
    model_result: Callable = lambda result: (result[1], result[2])
    supports: Callable = lambda module: True  # a router of the class that this family can serve


def _flat(hidden: torch.Tensor, dim: int) -> torch.Tensor:
    return hidden.reshape(-1, dim)


def _renormalised(weights: torch.Tensor, epsilon: float) -> torch.Tensor:
    return weights / (weights.sum(dim=-1, keepdim=True) + epsilon)


def _grouped_sigmoid_call(m, hidden):  # P1: DeepseekV3TopkRouter and its copies
    logits = F.linear(hidden.view(-1, m.hidden_dim).type(torch.float32), m.weight.type(torch.float32))
    return logits, dict(topk=m.top_k, scoring_func="sigmoid", correction_bias=m.e_score_correction_bias,
                        num_expert_group=m.num_group, topk_group=m.topk_group)


def _grouped_sigmoid_finish(m, logits, weights, ids, hidden):
    if m.norm_topk_prob:
        weights = _renormalised(weights, 1e-20)
    return logits, weights * m.routed_scaling_factor, ids


def _softmax_call(renormalize: Callable):  # P2: Qwen-MoE-style routers with a ``weight`` parameter
    def call(m, hidden):
        logits = F.linear(_flat(hidden, m.hidden_dim), m.weight)
        return logits, dict(topk=m.top_k, scoring_func="softmax", renormalize=renormalize(m))
    return call


def _in_logits_dtype(m, logits, weights, ids, *args):
    return logits, weights.to(logits.dtype), ids


def _float32_weights(m, logits, weights, ids, *args):
    return logits, weights, ids


def _hunyuan_call(m, hidden):
    hidden = hidden.reshape(-1, hidden.shape[-1])
    logits = m.wg(hidden.float() if m.wg.weight.dtype == torch.float32 else hidden)
    return logits, dict(topk=m.top_k, scoring_func="softmax", renormalize=True)


def _top_logits_softmax(m, logits, topk):  # P3: softmax over the k best logits = softmax renormalised over them
    return logits, dict(topk=topk, scoring_func="softmax", renormalize=True)


def _gpt_oss_call(m, hidden):
    return _top_logits_softmax(m, F.linear(hidden, m.weight, m.bias), m.top_k)


def _granite_call(m, hidden):
    return _top_logits_softmax(m, F.linear(hidden, m.weight).float(), m.top_k)


def _granite_finish(m, logits, weights, ids, hidden):
    return ids, weights.type_as(hidden), logits


def _jetmoe_call(m, hidden):
    return _top_logits_softmax(m, m.layer(hidden).float(), m.top_k)


def _jetmoe_finish(m, logits, weights, ids, hidden):
    """JetMoeTopKGating's outputs from the top-k: the (token, slot) entries sorted by expert."""
    gates = weights.type_as(hidden)
    expert_size = torch.zeros(m.num_experts, dtype=torch.long, device=ids.device)
    expert_size.scatter_add_(0, ids.flatten(), torch.ones_like(ids.flatten()))
    _, index_sorted_experts = ids.flatten().sort(0)
    batch_index = index_sorted_experts.div(m.top_k, rounding_mode="trunc")
    return index_sorted_experts, batch_index, gates.flatten()[index_sorted_experts], expert_size.tolist(), logits


def _jetmoe_result(result):
    """(weights, ids) [T, K] back from JetMoeTopKGating's sorted outputs."""
    index_sorted_experts, _, batch_gates, expert_size, logits = result
    experts = torch.repeat_interleave(torch.arange(len(expert_size), device=batch_gates.device),
                                      torch.tensor(expert_size, device=batch_gates.device))
    flat_ids = torch.empty_like(index_sorted_experts)
    flat_ids[index_sorted_experts] = experts
    flat_gates = torch.empty_like(batch_gates)
    flat_gates[index_sorted_experts] = batch_gates
    tokens = logits.shape[0]
    return flat_gates.view(tokens, -1), flat_ids.view(tokens, -1)


def _jamba_call(m, hidden, router_logits):  # JambaSparseMoeBlock.route_tokens_to_experts
    return router_logits, dict(topk=m.top_k, scoring_func="softmax")


def _jamba_finish(m, logits, weights, ids, hidden, router_logits):
    return ids, weights.to(hidden.dtype)


def _aria_call(m, router_logits):  # AriaExperts.route_tokens_to_experts
    return _top_logits_softmax(m, router_logits, m.config.moe_topk)


def _aria_finish(m, logits, weights, ids, router_logits):
    return ids, weights.to(logits.dtype)


def _sigmoid_bias_call(bias_of: Callable, logits_of: Callable):  # P4
    def call(m, hidden, *bias):
        logits = logits_of(m, hidden)
        return logits, dict(topk=m.top_k, scoring_func="sigmoid", correction_bias=bias_of(m, *bias), renormalize=True)
    return call


def _minimax_logits(m, hidden):
    return F.linear(_flat(hidden, m.hidden_dim).to(m.weight.dtype), m.weight)


def _laguna_logits(m, hidden):
    logits = F.linear(_flat(hidden, m.hidden_dim), m.weight).float()
    if m.router_logit_softcapping > 0.0:
        logits = torch.tanh(logits / m.router_logit_softcapping) * m.router_logit_softcapping
    return logits


def _laguna_finish(m, logits, weights, ids, hidden):
    return logits, weights.to(hidden.dtype), ids


def _epsilon_call(logits_of: Callable):  # P4 routers renormalising with + 1e-20
    def call(m, hidden, bias):
        return logits_of(m, hidden), dict(topk=m.top_k, scoring_func="sigmoid", correction_bias=bias)
    return call


def _epsilon_finish(scale_of: Callable):
    def finish(m, logits, weights, ids, hidden, bias):
        return logits, _renormalised(weights, 1e-20) * scale_of(m), ids
    return finish


def _lfm2_call(m, hidden, expert_bias=None):
    logits = F.linear(hidden, m.weight)
    return logits, dict(topk=m.top_k, scoring_func="sigmoid",
                        correction_bias=expert_bias if m.use_expert_bias else None)


def _lfm2_finish(m, logits, weights, ids, hidden, expert_bias=None):
    weights = weights.to(logits.dtype)
    if m.norm_topk_prob:
        weights = _renormalised(weights, 1e-6)
    return logits, weights * m.routed_scaling_factor, ids


_V4_SCORINGS = {"SqrtSoftplusActivation": "sqrtsoftplus", "SigmoidActivation": "sigmoid", "Sigmoid": "sigmoid"}


def _v4_scoring(m) -> str | None:
    return _V4_SCORINGS.get(type(getattr(m, "score_fn", None)).__name__)


def _v4_call(m, hidden):
    logits = F.linear(_flat(hidden, m.hidden_dim), m.weight)
    return logits, dict(topk=m.top_k, scoring_func=_v4_scoring(m), correction_bias=m.e_score_correction_bias)


def _v4_hash_call(m, hidden, input_ids):
    logits = F.linear(_flat(hidden, m.hidden_dim), m.weight)
    return logits, dict(topk=m.top_k, scoring_func=_v4_scoring(m), input_ids=input_ids.reshape(-1),
                        tid2eid=m.tid2eid)


def _v4_finish(m, logits, weights, ids, *args):
    return logits, (_renormalised(weights, 1e-20) * m.routed_scaling_factor).to(logits.dtype), ids


_P1_CLASSES = ("DeepseekV3TopkRouter", "DeepseekV32TopkRouter", "KimiLinearTopkRouter", "Glm4MoeTopkRouter",
               "Glm4MoeLiteTopkRouter", "Glm4vMoeTextTopkRouter", "Glm5NextTextTopkRouter", "GlmMoeDsaTopkRouter",
               "HYV4TopkRouter", "ExaoneMoeTopkRouter", "MiMoV2FlashTopkRouter", "SolarOpenTopkRouter",
               "NemotronHTopkRouter", "AXK1TopkRouter", "Dots1TopkRouter")

FAMILIES = (
    RouterFamily("P1", _P1_CLASSES, _grouped_sigmoid_call, _grouped_sigmoid_finish,
                 "groups by top-2 sums; `+1e-20` renormalisation when `norm_topk_prob`; scale on the weights; float32"),
    RouterFamily("P2", ("Qwen2MoeTopKRouter", "Qwen3MoeTopKRouter", "Qwen3NextTopKRouter", "OlmoeTopKRouter",
                        "FlexOlmoTopKRouter", "MellumTopKRouter"),
                 _softmax_call(lambda m: bool(m.norm_topk_prob)), _in_logits_dtype,
                 "renormalised (no epsilon) when `norm_topk_prob`; weights in the logits' dtype"),
    RouterFamily("P2", ("Qwen3_5MoeTopKRouter", "Qwen3VLMoeTextTopKRouter"), _softmax_call(lambda m: True),
                 _in_logits_dtype, "always renormalised (no epsilon); weights in the logits' dtype"),
    RouterFamily("P2", ("MixtralTopKRouter", "MiniMaxTopKRouter"), _softmax_call(lambda m: True),
                 _float32_weights, "always renormalised (no epsilon); float32 weights"),
    RouterFamily("P2", ("HunYuanMoEV1Gate",), _hunyuan_call, _in_logits_dtype,
                 "float32 logits where the gate is float32; renormalised; weights in the logits' dtype"),
    RouterFamily("P2", ("JambaSparseMoeBlock",), _jamba_call, _jamba_finish,
                 "not renormalised; weights in the hidden states' dtype (the block's `route_tokens_to_experts`)",
                 method="route_tokens_to_experts", model_result=lambda result: (result[1], result[0])),
    RouterFamily("P3", ("GptOssTopKRouter",), _gpt_oss_call, _in_logits_dtype,
                 "logits with the router's bias; weights in the logits' dtype"),
    RouterFamily("P3", ("GraniteMoeTopKRouter", "GraniteMoeSharedTopKRouter", "GraniteMoeHybridTopKRouter"),
                 _granite_call, _granite_finish, "outputs `(ids, weights, logits)`; weights in the hidden states' dtype",
                 model_result=lambda result: (result[1], result[0])),
    RouterFamily("P3", ("JetMoeTopKGating",), _jetmoe_call, _jetmoe_finish,
                 "its expert-sorted outputs (`index_sorted_experts`, `batch_index`, gates, `expert_size`, logits)",
                 model_result=_jetmoe_result),
    RouterFamily("P3", ("AriaExperts",), _aria_call, _aria_finish,
                 "the experts' `route_tokens_to_experts`; weights in the logits' dtype",
                 method="route_tokens_to_experts", model_result=lambda result: (result[1], result[0])),
    RouterFamily("P4", ("MiniMaxM2TopKRouter",), _sigmoid_bias_call(lambda m, bias: bias, _minimax_logits),
                 _float32_weights, "the bias passed by the block; renormalised (no epsilon); float32 weights"),
    RouterFamily("P4", ("MiniMaxM3VLTopKRouter", "Step3p7TopKRouter"),
                 _sigmoid_bias_call(lambda m: m.e_score_correction_bias, _minimax_logits), _float32_weights,
                 "renormalised (no epsilon); float32 weights"),
    RouterFamily("P4", ("LagunaTopKRouter",), _sigmoid_bias_call(lambda m: m.e_score_correction_bias, _laguna_logits),
                 _laguna_finish, "the logits' tanh soft cap; renormalised (no epsilon); weights in the hidden dtype"),
    RouterFamily("P4", ("HYV3TopKRouter",), _epsilon_call(lambda m, h: F.linear(_flat(h, m.hidden_dim).float(),
                                                                                  m.weight.float())),
                 _epsilon_finish(lambda m: m.router_scaling_factor),
                 "the bias passed by the block; `+1e-20` renormalisation; `router_scaling_factor`; float32"),
    RouterFamily("P4", ("AfmoeTokenChoiceRouter",),
                 _epsilon_call(lambda m, h: m.gate(h.view(-1, h.shape[-1])).to(torch.float32)),
                 _epsilon_finish(lambda m: m.route_scale),
                 "the expert bias passed by the block; `+1e-20` renormalisation; `route_scale`; float32"),
    RouterFamily("P4", ("Lfm2MoeTopKRouter",), _lfm2_call, _lfm2_finish,
                 "the expert bias when `use_expert_bias`; `+1e-6` renormalisation when `norm_topk_prob`; scale; "
                 "weights in the logits' dtype"),
    RouterFamily("DeepSeek-V4", ("DeepseekV4TopKRouter",), _v4_call, _v4_finish,
                 "sqrt-softplus scores; `+1e-20` renormalisation; scale; weights in the logits' dtype",
                 supports=lambda m: _v4_scoring(m) is not None),
    RouterFamily("DeepSeek-V4 hash", ("DeepseekV4HashRouter",), _v4_hash_call, _v4_finish,
                 "experts from `tid2eid[input_ids]`; `+1e-20` renormalisation; scale; weights in the logits' dtype",
                 supports=lambda m: _v4_scoring(m) is not None),
)
_BY_CLASS = {name: family for family in FAMILIES for name in family.classes}
_ROUTER_LIKE = re.compile(r"(Router|Gate|Gating)$")  # class names of modules patch() reports when it skips them


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
    experts: "ExpertsShadowRecorder | None" = None  # the experts' shadow counts, where patch() switched them

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
            **({} if self.experts is None else {
                "experts calls": self.experts.calls, "experts calls bitwise equal": self.experts.calls_bitwise_equal,
                "experts max |Δoutput|": self.experts.max_abs_difference}),
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
        if "tid2eid" in arguments:  # hash routing: the table decides, nothing is close
            table_ids = torch.sort(arguments["tid2eid"][arguments["input_ids"]].long(), dim=-1).values
            for row in differing:
                ours, theirs = bool((ids[row] == table_ids[row]).all()), bool((model_ids[row] == table_ids[row]).all())
                agrees = "both" if ours and theirs else "route" if ours else "model" if theirs else "neither"
                self.differing.append(DifferingRow(layer, row, float("inf"), float("inf"), agrees))
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


def family_of(module: torch.nn.Module) -> RouterFamily | None:
    """The family that serves ``module``, or None (not a router patch() knows, or one it cannot serve)."""
    family = _BY_CLASS.get(type(module).__name__)
    return family if family is not None and family.supports(module) else None


def supported(module: torch.nn.Module) -> bool:
    return family_of(module) is not None


@dataclass
class PatchResult:
    """What ``patch()`` did: the routers it patched (module names), the router-like modules it left alone (module
    name -> class name: none of the known patterns), the shadow recorder (shadow mode), and what happened to the
    experts (``experts.describe()``: how many modules switched from which implementation, or why left alone)."""

    patched: list[str]
    skipped: dict[str, str]
    recorder: ShadowRecorder | None = None
    warmup: object = None  # moe_routing.precompile.WarmupReport, with patch(..., warmup=True)
    experts: ExpertsSwitch | None = None  # None with patch(..., experts=False)

    @property
    def experts_recorder(self) -> ExpertsShadowRecorder | None:
        """The experts' shadow counts (shadow mode, experts switched), else None."""
        return None if self.experts is None else self.experts.recorder


def routing_shapes(model: torch.nn.Module) -> tuple[list, list[torch.dtype]]:
    """The RoutingShapes of the model's supported routers and the dtypes of their logits, read by asking each
    router's family for its call on one zero token (hash layers, whose experts come from a table, are left out)."""
    from ..precompile import RoutingShape

    shapes, dtypes = [], []
    for _, module in model.named_modules():
        if not supported(module) or getattr(module, "weight", None) is None:
            continue
        weight = module.weight
        try:
            with torch.no_grad():
                logits, arguments = family_of(module).call(module, weight.new_zeros(1, weight.shape[-1]))
        except Exception:  # noqa: BLE001 - a router whose call needs more than hidden states: not warmed
            continue
        if "tid2eid" in arguments:
            continue
        bias = arguments.get("correction_bias")
        shape = RoutingShape(logits.shape[-1], arguments["topk"], arguments.get("scoring_func", "sigmoid"),
                             None if bias is None else bias.dtype, arguments.get("num_expert_group", 1),
                             arguments.get("topk_group", 1), arguments.get("renormalize", False))
        if shape not in shapes:
            shapes.append(shape)
        if logits.dtype not in dtypes:
            dtypes.append(logits.dtype)
    return shapes, dtypes


def skipped_routers(model: torch.nn.Module) -> dict[str, str]:
    """Modules that look like routers (class name ending in Router, Gate or Gating) but that patch() cannot serve."""
    return {name: type(m).__name__ for name, m in model.named_modules()
            if _ROUTER_LIKE.search(type(m).__name__) and not supported(m) and not _NOT_ROUTERS.search(type(m).__name__)}


# router-like names of modules that route nothing (gated norms, gated linear attention)
_NOT_ROUTERS = re.compile(r"(RMSNormGated|ForgetGate|GatedDeltaNet)$")


def router_calls(model: torch.nn.Module, tokens: int) -> list[tuple[torch.Tensor, dict]]:
    """(logits, route() keyword arguments, topk included) of every supported ``forward`` router of ``model`` for
    ``tokens`` rows of zero hidden states: the calls a forward of that many tokens makes (to compile their kernels
    ahead). Routers that take more than the hidden states are left out."""
    calls = []
    for module in model.modules():
        family = family_of(module)
        if family is None or family.method != "forward" or family.pattern in ("P4", "DeepSeek-V4 hash"):
            continue
        weight = next(module.parameters())
        hidden = torch.zeros(tokens, getattr(module, "hidden_dim", weight.shape[-1]), dtype=weight.dtype,
                             device=weight.device)
        with torch.no_grad():
            logits, arguments = family.call(module, hidden)
        arguments.setdefault("renormalize", False)
        calls.append((logits, arguments))
    return calls


def patch(model: torch.nn.Module, mode: str = "replace", recorder: ShadowRecorder | None = None,
          warmup: bool = False, experts: bool = True) -> PatchResult:
    """Patch every supported router of ``model``; returns what was patched and skipped (and the shadow recorder).
    With ``warmup``, first compile every kernel its routers' calls can launch (``moe_routing.warmup`` over their
    ``routing_shapes``, int64 ids as the replacement asks for, on the router weights' device): ``.warmup`` is the
    report. With ``experts`` (the default), also switch the model's experts in the same mode
    (``transformers_experts.switch_experts``): ``.experts`` says what happened to them; ``experts=False`` leaves
    them alone (routing alone, as a routing measurement wants).

    Raises ``ValueError`` for an unknown mode or a model without a supported router, and if the model
    is already patched (``unpatch`` first).
    """
    if mode not in ("replace", "shadow"):
        raise ValueError(f"mode must be 'replace' or 'shadow', got {mode!r}")
    routers = [(name, m) for name, m in model.named_modules() if supported(m)]
    skipped = skipped_routers(model)
    if not routers:
        found = f"; found {', '.join(sorted(set(skipped.values())))}" if skipped else ""
        raise ValueError(f"model has no supported router (supported: {', '.join(sorted(_BY_CLASS))}){found}")
    if any(hasattr(m, _PATCH_ATTRIBUTE) for _, m in routers) or experts_switched(model):
        raise ValueError("model is already patched; call unpatch(model) first")
    if not isinstance(experts, bool):
        raise TypeError(f"experts must be a bool, got {type(experts).__name__}")
    if mode == "shadow":
        recorder = recorder or ShadowRecorder()
    for name, module in routers:
        family = family_of(module)
        method = _replace(family) if mode == "replace" else _shadow(family, name, recorder)
        setattr(module, _PATCH_ATTRIBUTE, family.method)
        setattr(module, family.method, types.MethodType(method, module))  # an instance attribute shadows the class's
    try:
        experts_switch = switch_experts(model, mode) if experts else None
    except Exception:
        unpatch(model)  # the routers back as they were: patch() changes all or nothing
        raise
    report = None
    if warmup:
        from ..precompile import warmup as warm

        shapes, dtypes = routing_shapes(model)
        device = next((m.weight.device for _, m in routers if getattr(m, "weight", None) is not None), None)
        if shapes:
            report = warm(shapes, dtypes=dtypes, ids_dtypes=(torch.int64,), device=device)
    if mode == "shadow" and experts_switch is not None:
        recorder.experts = experts_switch.recorder
    return PatchResult([name for name, _ in routers], skipped, recorder if mode == "shadow" else None, report,
                       experts_switch)


def unpatch(model: torch.nn.Module) -> int:
    """Undo ``patch``: removes the instance attributes it set and puts back the experts implementation the model
    had; returns how many routers were restored."""
    restore_experts(model)
    restored = 0
    for module in model.modules():
        method = module.__dict__.get(_PATCH_ATTRIBUTE)
        if method is not None:
            delattr(module, method)
            delattr(module, _PATCH_ATTRIBUTE)
            restored += 1
    return restored


def _route(logits: torch.Tensor, arguments: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """route() (or route_hash() for a hash layer) of a family's call: int64 ids, as transformers' routers return."""
    kwargs = dict(arguments)
    kwargs.setdefault("renormalize", False)
    flat = logits.detach().reshape(-1, logits.shape[-1])
    if "tid2eid" in kwargs:
        weights, ids = route_hash(flat, kwargs.pop("input_ids"), kwargs.pop("tid2eid"), ids_dtype=torch.int64,
                                  **{k: v for k, v in kwargs.items() if k != "topk"})
    else:
        bias = kwargs.get("correction_bias")
        if bias is not None:
            kwargs["correction_bias"] = bias.detach()
        weights, ids = route(flat, kwargs.pop("topk"), ids_dtype=torch.int64, **kwargs)
    return weights, ids


def _replace(family: RouterFamily):
    def method(module, *args):
        logits, arguments = family.call(module, *args)
        weights, ids = _route(logits, arguments)
        return family.finish(module, logits, weights, ids, *args)

    return method


def _shadow(family: RouterFamily, layer: str, recorder: ShadowRecorder):
    def method(module, *args):
        result = getattr(type(module), family.method)(module, *args)
        logits, arguments = family.call(module, *args)  # the same logits, computed again for route()
        weights, ids = _route(logits, arguments)  # scratch: the model never sees them
        ours_weights, ours_ids = family.model_result(family.finish(module, logits, weights, ids, *args))
        model_weights, model_ids = family.model_result(result)
        flat = logits.detach().reshape(-1, logits.shape[-1])
        recorder.record(layer, flat, arguments, model_weights, model_ids, ours_weights, ours_ids)
        return result

    return method
