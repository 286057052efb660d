"""The substitution gate: may an engine's routing call be served by ``moe_routing.route``, and its dispatch-plan
call by ``moe_routing.align``?

:func:`decide` answers ``(substitute, reason)`` for a described routing call (:class:`RoutingRequest`),
:func:`decide_align` for a described ``moe_align_block_size`` call (:class:`AlignRequest`: int32/int64 ids [T, K],
a block size and E of at least 1, a map of int32/int64 [E] on the ids' device or none, not the scatter index with a
map that only relabels blocks, which vLLM refuses; then the device and the execution mode as below). Both accept
only what the kernels cover exactly and what is measured to pay:

* grouping: an uneliminating grouping always (``topk_group >= num_expert_group``: the flat path);
  an eliminating one only when the grouped path is enabled (``MOE_ROUTING_GROUPED=1``; off by default,
  because on the H200 the grouped kernel is not yet faster than the engines' op at decode sizes);
* the bias: absent, or contiguous with exactly E entries of a floating dtype;
* scoring: sigmoid, softmax or sqrt-softplus; hash tables (DeepSeek-V4's hash layers) with sqrt-softplus or
  sigmoid scoring; a per-token vision bias (``bias_vl``) never;
* dtypes: float32 / bfloat16 / float16 logits, int32 or int64 ids, float32 weights (the engine's buffers or
  requested dtypes); a padding mask (the site keeps the op's contract for padded rows);
* bounds: E, K and the number of groups within the kernels' limits;
* the device: CUDA (ROCm included) tensors; CPU only where ``MOE_ROUTING_DEVICES`` lists it (tests);
* sites that must also return ``token_expert_indices`` (vLLM's ``fused_topk``, ``topk_hash_softplus_sqrt``) only
  when enabled (``MOE_ROUTING_SOURCE_ROWS=1``; off by default: writing those k * T + t rows costs three small
  kernels, and on the H200 ``route()`` plus them took longer than vLLM's ``topk_softmax`` under CUDA graphs up to
  2048 tokens, benchmarks/RESULTS.md);
* the execution mode, read from the engine's forward context: a CUDA-graph step (PIECEWISE or FULL)
  substitutes; an eager step (NONE) only when the eager path is enabled (``MOE_ROUTING_EAGER=1``; off
  by default: measured, the plugin's eager path is not faster than vLLM's ops by more than the drift); no
  forward context at all (warm-up, profiling runs, other callers) keeps the engine's op.

Every decision is counted by (site, reason) in :data:`COUNTERS`: a plain Counter increment, no
logging, no sync. Under CUDA graphs the Python code runs at capture, so counts are captures plus eager
calls, not replays.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import torch

from ..call import BIAS_DTYPES, IDS_DTYPES, LOGIT_DTYPES, MAX_EXPERTS, MAX_GROUPS, MAX_TOPK, SCORING_FUNCS

SUBSTITUTED = "substituted"
# The align site is served up to ALIGN_SERVED_SLOTS slots (T * K) and from ALIGN_SERVED_FROM_SLOTS: where it measured
# faster than vLLM's moe_align_block_size on every shape timed (benchmarks/RESULTS.md, "The routing stage": up to 64
# tokens of top-8, and at 8192 and 65536 tokens). Between them it measured slower on some shapes (384 experts at 256
# tokens of top-8, 256-384 experts at 1024), so vLLM's op keeps them.
ALIGN_SERVED_SLOTS = 512
ALIGN_SERVED_FROM_SLOTS = 65536
ALIGN_MIDDLE_SLOTS = (f"{ALIGN_SERVED_SLOTS + 1} to {ALIGN_SERVED_FROM_SLOTS - 1} slots (not measured faster than "
                      "vLLM's op there)")

# (site, reason) -> number of calls; read with counters() or report().
COUNTERS: Counter = Counter()


@dataclass(frozen=True)
class Settings:
    """What the gate allows; read from the environment once (see ``settings()``)."""

    grouped: bool = False  # substitute eliminating groupings too
    eager: bool = False  # substitute in eager (non-graph) steps
    devices: tuple[str, ...] = ("cuda",)
    source_rows: bool = False  # serve sites that must also write token_expert_indices

    @staticmethod
    def from_environment() -> "Settings":
        return Settings(
            grouped=os.environ.get("MOE_ROUTING_GROUPED", "0") == "1",
            eager=os.environ.get("MOE_ROUTING_EAGER", "0") == "1",
            devices=tuple(d.strip() for d in os.environ.get("MOE_ROUTING_DEVICES", "cuda").split(",") if d.strip()),
            source_rows=os.environ.get("MOE_ROUTING_SOURCE_ROWS", "0") == "1",
        )


_settings: list[Settings] = []


def settings() -> Settings:
    if not _settings:
        _settings.append(Settings.from_environment())
    return _settings[0]


def configure(**changes) -> Settings:
    """Change the gate's settings in this process (tests, or a launcher script)."""
    new = Settings(**{**settings().__dict__, **changes})
    _settings[:] = [new]
    return new


@dataclass(frozen=True)
class RoutingRequest:
    """An engine routing call, described for the gate."""

    site: str  # which engine function was called
    logits: torch.Tensor
    bias: torch.Tensor | None
    topk: int
    num_expert_group: int
    topk_group: int
    scoring: str
    ids_dtype: torch.dtype  # dtype of the ids the engine expects
    weights_dtype: torch.dtype = torch.float32  # dtype of the weights buffer the engine passes, if any
    padded: bool = False  # a padding mask comes with the call
    hash_table: torch.Tensor | None = None  # hash routing: [V, K] token id -> experts
    input_ids: torch.Tensor | None = None  # the tokens' ids (hash routing)
    vision: bool = False  # a per-token vision bias (vLLM's bias_vl) is in force
    source_rows: bool = False  # the site must also write token_expert_indices (k * T + t)


# The engine's execution mode: returns "PIECEWISE", "FULL", "NONE" or None (no forward context).
ExecutionMode = Callable[[], "str | None"]


def decide(request: RoutingRequest, mode: ExecutionMode) -> tuple[bool, str]:
    """Whether to substitute ``route()`` for this call, and why (the reason is also counted)."""
    substitute, reason = _decide(request, mode, settings())
    COUNTERS[(request.site, reason)] += 1
    return substitute, reason


def _decide(r: RoutingRequest, mode: ExecutionMode, s: Settings) -> tuple[bool, str]:
    logits = r.logits
    if logits.device.type not in s.devices:
        return False, f"device {logits.device.type} not enabled"
    if logits.dim() != 2 or logits.dtype not in LOGIT_DTYPES:
        return False, "logits not 2-D float32/bfloat16/float16"
    experts = logits.shape[1]
    if not 1 <= experts <= MAX_EXPERTS:
        return False, f"experts outside 1..{MAX_EXPERTS}"
    if not 1 <= r.topk <= MAX_TOPK:
        return False, f"topk outside 1..{MAX_TOPK}"
    if r.scoring not in SCORING_FUNCS:
        return False, f"scoring {r.scoring!r} not supported"
    if r.ids_dtype not in IDS_DTYPES or r.weights_dtype != torch.float32:
        return False, "ids not int32/int64 or weights not float32"
    if r.vision:
        return False, "per-token vision bias (bias_vl) not supported"
    if r.source_rows and not s.source_rows:
        return False, "token_expert_indices asked for (source-rows sites disabled)"
    if r.hash_table is not None:
        return _decide_hash(r, mode, s)
    if r.bias is not None and (r.bias.dim() != 1 or r.bias.shape[0] != experts or not r.bias.is_contiguous()
                               or r.bias.dtype not in BIAS_DTYPES):
        return False, "bias not a contiguous float vector of E entries"
    groups = max(r.num_expert_group, 1)
    if experts % groups:
        return False, "groups do not divide the experts"
    eliminating = 0 < r.topk_group < groups
    allowed = (r.topk_group if eliminating else groups) * (experts // groups)
    if r.topk > allowed:
        return False, "topk above the experts of the kept groups"
    if eliminating and (not s.grouped or groups > MAX_GROUPS):
        return False, "eliminating groups (grouped path disabled)" if not s.grouped else "too many groups"
    return _decide_mode(mode, s)


@dataclass(frozen=True)
class AlignRequest:
    """An engine's dispatch-plan call (vLLM's ``moe_align_block_size``), described for the gate."""

    site: str
    topk_ids: torch.Tensor
    block_size: int
    num_experts: int
    expert_map: torch.Tensor | None
    scatter_with_relabelling_map: bool = False  # return_scatter_idx with a map and ignore_invalid_experts=False


def decide_align(request: AlignRequest, mode: ExecutionMode) -> tuple[bool, str]:
    """Whether to serve this dispatch-plan call with ``moe_routing.align``, and why (the reason is also counted)."""
    substitute, reason = _decide_align(request, mode, settings())
    COUNTERS[(request.site, reason)] += 1
    return substitute, reason


def _decide_align(r: AlignRequest, mode: ExecutionMode, s: Settings) -> tuple[bool, str]:
    ids, table = r.topk_ids, r.expert_map
    if not isinstance(ids, torch.Tensor) or ids.device.type not in s.devices:
        return False, "device not enabled" if isinstance(ids, torch.Tensor) else "ids not a tensor"
    if ids.dim() != 2 or ids.dtype not in IDS_DTYPES:
        return False, "ids not 2-D int32/int64"
    if type(r.block_size) is not int or type(r.num_experts) is not int or r.block_size < 1 or r.num_experts < 1:
        return False, "block_size or num_experts not an int >= 1"
    if table is not None and (not isinstance(table, torch.Tensor) or table.dtype not in IDS_DTYPES
                              or tuple(table.shape) != (r.num_experts,) or table.device != ids.device):
        return False, "expert_map not an int32/int64 [E] tensor on the ids' device"
    if r.scatter_with_relabelling_map:
        return False, "scatter index with a relabelling map (vLLM refuses it)"
    if ALIGN_SERVED_SLOTS < ids.numel() < ALIGN_SERVED_FROM_SLOTS:
        return False, ALIGN_MIDDLE_SLOTS
    return _decide_mode(mode, s)


def _decide_hash(r: RoutingRequest, mode: ExecutionMode, s: Settings) -> tuple[bool, str]:
    table, tokens = r.hash_table, r.input_ids
    if r.scoring == "softmax":
        return False, "hash table with softmax scoring"
    if tokens is None or tokens.dim() != 1 or tokens.shape[0] != r.logits.shape[0] or tokens.dtype not in IDS_DTYPES:
        return False, "hash routing without int32/int64 token ids, one a row"
    if (table.dim() != 2 or table.shape[1] != r.topk or table.dtype not in IDS_DTYPES
            or table.device != r.logits.device or tokens.device != r.logits.device):
        return False, "hash table not an int32/int64 [V, topk] tensor on the logits' device"
    return _decide_mode(mode, s)


def _decide_mode(mode: ExecutionMode, s: Settings) -> tuple[bool, str]:
    current = mode()
    if current is None:
        return False, "no forward context"
    if current in ("PIECEWISE", "FULL"):
        return True, SUBSTITUTED
    if current == "NONE":
        return (True, SUBSTITUTED) if s.eager else (False, "eager step (eager path disabled)")
    return False, f"unknown execution mode {current}"


def counters() -> dict[str, dict[str, int]]:
    """The counts by site, then reason: {'site': {'substituted': n, 'eager step ...': m}}."""
    table: dict[str, dict[str, int]] = {}
    for (site, reason), count in sorted(COUNTERS.items()):
        table.setdefault(site, {})[reason] = count
    return table


def report() -> str:
    """The counters as text, one line per site."""
    lines = []
    for site, reasons in counters().items():
        total = sum(reasons.values())
        parts = ", ".join(f"{reason}: {count}" for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1]))
        lines.append(f"{site}: {total} calls ({parts})")
    return "\n".join(lines) or "no routing calls seen"
