"""transformers' MoE experts served through its experts registry, with ``moe_routing.group``'s dispatch plan.

transformers 5.17 runs the experts of every class decorated with ``@use_experts_implementation`` through
``transformers.integrations.moe.ALL_EXPERTS_FUNCTIONS``, by the name in ``config._experts_implementation``. Its
default, ``grouped_mm``, builds the grouped GEMMs' plan with ``torch.sort`` + ``histc`` + ``cumsum`` in every layer.
:func:`moe_routing_experts_forward` computes the same layer from one :func:`moe_routing.group` call (the
permutation and the offsets) and transformers' own grouped-linear helper for the GEMMs, so the GEMMs, the gating, the
biases, the routing weights and the per-token sum are grouped_mm's: the outputs are equal (bit for bit on CPU).

Importing this module registers it as ``"moe_routing"`` (:data:`EXPERTS_IMPLEMENTATION`), so that
``from_pretrained(..., experts_implementation="moe_routing")`` and ``model.set_experts_implementation("moe_routing")``
select it. :func:`switch_experts` switches a loaded model (``"replace"``), or runs the model's own implementation
and this one side by side on the same inputs (``"shadow"``, counted in an :class:`ExpertsShadowRecorder`);
:func:`restore_experts` puts back exactly what the model ran before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..plan import group

EXPERTS_IMPLEMENTATION = "moe_routing"
# the registry name of shadow mode: the model's previous implementation, with this one compared beside it
SHADOW_EXPERTS_IMPLEMENTATION = "moe_routing_shadow"

_SWITCH_ATTRIBUTE = "_moe_routing_experts_switch"  # on the model: how to restore its experts
_SHADOW_ATTRIBUTE = "_moe_routing_experts_shadow"  # on each shadowed experts module: its baseline and recorder
_MODES = ("replace", "shadow")


def moe_routing_experts_forward(self: torch.nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                                top_k_weights: torch.Tensor) -> torch.Tensor:
    """The experts of one MoE layer, transformers' experts signature: ``hidden_states`` [T, H], ``top_k_index`` and
    ``top_k_weights`` [T, K] -> [T, H] in the hidden states' dtype.

    grouped_mm's computation with its plan from ``moe_routing.group``: the slots sorted by expert (stably), each
    expert's cumulative end as the grouped GEMMs' offsets. Slots whose id is outside ``[0, num_experts)`` (expert
    parallelism's sentinel ``num_experts`` among them) are dropped by the plan: their rows are zeroed before and
    after each GEMM, so they add nothing to their token.
    """
    from transformers.integrations.moe import _grouped_linear

    num_top_k = top_k_index.size(-1)
    num_tokens = hidden_states.size(0)
    hidden_dim = hidden_states.size(-1)

    permutation, offsets = group(top_k_index, self.num_experts)
    permutation = permutation.long()  # slot indices, sorted by expert, the dropped slots last
    slot_positions = torch.arange(permutation.numel(), device=permutation.device)
    dropped = (slot_positions >= offsets[-1]).unsqueeze(-1)  # the plan's tail: slots of no expert here

    grouped_hidden = hidden_states[permutation // num_top_k]
    grouped_weights = top_k_weights.reshape(-1)[permutation]
    # each grouped row's expert, kept in range for the bias gathers (a dropped row's bias lands in a zeroed row)
    grouped_experts = top_k_index.reshape(-1)[permutation].clamp(0, self.num_experts - 1) if self.has_bias else None

    grouped_hidden.masked_fill_(dropped, 0.0)  # zero gradients for dropped rows in the backward pass
    if self.has_gate:
        first_weight, first_bias = self.gate_up_proj, getattr(self, "gate_up_proj_bias", None)
    else:
        first_weight, first_bias = self.up_proj, getattr(self, "up_proj_bias", None)
    projected = _grouped_linear(grouped_hidden, first_weight, offsets,
                                bias=first_bias[grouped_experts] if self.has_bias else None,
                                is_transposed=self.is_transposed)
    projected = projected.masked_fill(dropped, 0.0)  # the GEMM leaves rows past the last offset unwritten
    projected = self._apply_gate(projected) if self.has_gate else self.act_fn(projected)
    projected = _grouped_linear(projected, self.down_proj, offsets,
                                bias=self.down_proj_bias[grouped_experts] if self.has_bias else None,
                                is_transposed=self.is_transposed)
    projected = projected.masked_fill(dropped, 0.0)
    weighted = projected * grouped_weights.unsqueeze(-1)

    # back to slot order (token-major, K slots a token), then each token's K slots summed in order
    slot_order = torch.empty_like(permutation)
    slot_order[permutation] = slot_positions
    weighted = weighted[slot_order]
    return weighted.view(num_tokens, num_top_k, hidden_dim).sum(dim=1).to(hidden_states.dtype)


@dataclass
class ExpertsShadowRecorder:
    """Counts from shadow mode, over every experts call of the model: how often this implementation's output equals
    the model's bit for bit, and the largest absolute difference (0.0 when always equal; inf where one side has a
    NaN the other lacks)."""

    calls: int = 0
    calls_bitwise_equal: int = 0
    max_abs_difference: float = 0.0

    def record(self, model_output: torch.Tensor, ours: torch.Tensor) -> None:
        """Compare one call's outputs (same shape and dtype)."""
        self.calls += 1
        if _bitwise_equal(model_output, ours):
            self.calls_bitwise_equal += 1
            return
        theirs, mine = model_output.detach().double(), ours.detach().double()
        difference = (theirs - mine).abs()
        difference[torch.isnan(theirs) & torch.isnan(mine)] = 0.0
        difference = torch.nan_to_num(difference, nan=float("inf"))
        if difference.numel():
            self.max_abs_difference = max(self.max_abs_difference, float(difference.max()))

    def summary(self) -> dict:
        return {"calls": self.calls, "calls bitwise equal": self.calls_bitwise_equal,
                "max |Δoutput|": self.max_abs_difference}


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.detach().contiguous().view(torch.uint8), b.detach().contiguous().view(torch.uint8))


@dataclass
class _ShadowState:
    """What a shadowed experts module compares against: the implementation it ran before, and the model's recorder."""

    model_forward: object  # the registry's function for the previous name (the class's own forward for "eager")
    recorder: ExpertsShadowRecorder


def shadow_experts_forward(self: torch.nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                           top_k_weights: torch.Tensor) -> torch.Tensor:
    """Shadow mode's experts: the model's previous implementation gives the output; :func:`moe_routing_experts_forward`
    runs on the same inputs (without gradients) and the module's recorder compares the two."""
    state = self.__dict__.get(_SHADOW_ATTRIBUTE)
    if state is None:
        raise RuntimeError(f"experts implementation {SHADOW_EXPERTS_IMPLEMENTATION!r} compares against the "
                           "implementation a model ran before: select it with "
                           "moe_routing.integrations.transformers_experts.switch_experts(model, 'shadow')")
    output = state.model_forward(self, hidden_states, top_k_index, top_k_weights)
    with torch.no_grad():
        ours = moe_routing_experts_forward(self, hidden_states.detach(), top_k_index, top_k_weights.detach())
    state.recorder.record(output, ours)
    return output


def register_experts() -> bool:
    """Register :data:`EXPERTS_IMPLEMENTATION` and the shadow implementation in transformers' experts registry
    (``ExpertsInterface.register``: every instance sees them). Safe to call again. Returns False, registering
    nothing, where the installed transformers has no experts registry."""
    try:
        from transformers.integrations.moe import ExpertsInterface
    except ImportError:
        return False
    ExpertsInterface.register(EXPERTS_IMPLEMENTATION, moe_routing_experts_forward)
    ExpertsInterface.register(SHADOW_EXPERTS_IMPLEMENTATION, shadow_experts_forward)
    return True


@dataclass
class ExpertsSwitch:
    """What ``switch_experts`` did to a model's experts."""

    mode: str | None  # "replace" or "shadow"; None when the experts were left alone
    modules: list[str] = field(default_factory=list)  # the experts modules switched (module names)
    previous: dict[str, str] = field(default_factory=dict)  # module name -> the implementation it ran before
    reason: str | None = None  # why the experts were left alone
    recorder: ExpertsShadowRecorder | None = None  # shadow mode's counts

    @property
    def switched(self) -> bool:
        return bool(self.modules)

    def describe(self) -> str:
        if not self.switched:
            return f"experts left alone: {self.reason}"
        previous = ", ".join(sorted(set(self.previous.values())))
        target = EXPERTS_IMPLEMENTATION if self.mode == "replace" else f"{SHADOW_EXPERTS_IMPLEMENTATION} (shadow)"
        return f"{len(self.modules)} experts modules switched from {previous} to {target}"


def _registry_dispatch(module: torch.nn.Module):
    """``(registry, the class's own forward)`` of an experts module whose class ``@use_experts_implementation``
    decorated (its forward looks its implementation up by name), else None. Read from the decorated forward's
    closure: the decorator keeps no other record of either."""
    forward = getattr(type(module), "forward", None)
    code, closure = getattr(forward, "__code__", None), getattr(forward, "__closure__", None)
    if code is None or not closure or not {"experts_interface", "original_forward"} <= set(code.co_freevars):
        return None
    cells = dict(zip(code.co_freevars, closure))
    return cells["experts_interface"].cell_contents, cells["original_forward"].cell_contents


def experts_modules(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """The model's experts modules that take an implementation from a registry (module name -> module)."""
    return {name: m for name, m in model.named_modules()
            if _registry_dispatch(m) is not None and getattr(m, "config", None) is not None}


def why_experts_cannot_switch(model: torch.nn.Module) -> str | None:
    """Why ``switch_experts`` would leave ``model``'s experts alone, or None when it can switch them."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not register_experts():
        return "the installed transformers has no experts registry (transformers.integrations.moe.ExpertsInterface)"
    can_set = getattr(model, "_can_set_experts_implementation", None)
    if can_set is None or not hasattr(model, "set_experts_implementation"):
        return f"{type(model).__name__} is not a transformers PreTrainedModel"
    if not can_set():
        return f"{type(model).__name__} cannot set its experts implementation (no @use_experts_implementation experts)"
    if not hasattr(getattr(model, "config", None), "_experts_implementation"):
        return f"{type(model).__name__}'s config has no _experts_implementation"
    experts = experts_modules(model)
    if not experts:
        return f"{type(model).__name__} has no experts module decorated with @use_experts_implementation"
    other = sorted({type(m).__name__ for m in experts.values()
                    if EXPERTS_IMPLEMENTATION not in _registry_dispatch(m)[0]})
    if other:
        return f"experts {', '.join(other)} dispatch through a registry other than ALL_EXPERTS_FUNCTIONS " \
               "(quantized experts)"
    return None


def switch_experts(model: torch.nn.Module, mode: str = "replace") -> ExpertsSwitch:
    """Switch ``model``'s experts to :data:`EXPERTS_IMPLEMENTATION` (``mode="replace"``) or to shadow mode
    (``"shadow"``: the implementation each module ran before gives the output, this one is compared beside it on the
    same inputs, counted in the returned switch's ``recorder``). What each config held is recorded on the model, so
    that :func:`restore_experts` puts it back exactly.

    A model whose experts cannot take an implementation is left alone: the returned switch has no modules and says
    why (``reason``). Raises ``ValueError`` for an unknown mode or a model already switched.
    """
    if mode not in _MODES:
        raise ValueError(f"mode must be 'replace' or 'shadow', got {mode!r}")
    reason = why_experts_cannot_switch(model)
    if reason is not None:
        return ExpertsSwitch(None, reason=reason)
    if experts_switched(model):
        raise ValueError("the model's experts are already switched; call restore_experts(model) first")
    experts = experts_modules(model)
    configs = {id(c): c for c in [model.config, *(m.config for m in model.modules()
                                                   if hasattr(m, "set_experts_implementation")),
                                  *(m.config for m in experts.values())]}
    saved = [(c, getattr(c, "_experts_implementation_internal", None)) for c in configs.values()]
    previous = {name: m.config._experts_implementation for name, m in experts.items()}
    target = EXPERTS_IMPLEMENTATION if mode == "replace" else SHADOW_EXPERTS_IMPLEMENTATION
    recorder = ExpertsShadowRecorder() if mode == "shadow" else None
    if mode == "shadow":
        for name, module in experts.items():
            registry, own_forward = _registry_dispatch(module)
            baseline = registry.get_interface(previous[name], own_forward)
            setattr(module, _SHADOW_ATTRIBUTE, _ShadowState(baseline, recorder))
    try:
        model.set_experts_implementation(target)
        for module in experts.values():  # experts on a config set_experts_implementation does not reach
            if module.config._experts_implementation != target:
                module.config._experts_implementation_internal = target
    except Exception:
        _restore(model, saved, experts.values())
        raise
    setattr(model, _SWITCH_ATTRIBUTE, (saved, list(experts.values())))
    return ExpertsSwitch(mode, list(experts), previous, recorder=recorder)


def restore_experts(model: torch.nn.Module) -> bool:
    """Undo ``switch_experts``: every config's experts implementation as it was, shadow state removed. Returns
    whether there was anything to restore."""
    switch = model.__dict__.get(_SWITCH_ATTRIBUTE)
    if switch is None:
        return False
    saved, experts = switch
    _restore(model, saved, experts)
    delattr(model, _SWITCH_ATTRIBUTE)
    return True


def _restore(model, saved, experts) -> None:
    for config, value in saved:
        config._experts_implementation_internal = value  # the internal attribute: sub-configs keep their own values
    for module in experts:
        module.__dict__.pop(_SHADOW_ATTRIBUTE, None)


def experts_switched(model: torch.nn.Module) -> bool:
    """Whether ``switch_experts`` switched ``model``'s experts (and ``restore_experts`` has not undone it)."""
    return _SWITCH_ATTRIBUTE in model.__dict__


register_experts()
