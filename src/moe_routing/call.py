"""Argument checking shared by the op and its reference.

Every public entry point validates through :func:`check_call`, so the op and the reference accept and
refuse exactly the same calls with the same messages.  The result, :class:`RoutingCall`, is the
*normalised* call: an uneliminating grouping (``topk_group >= num_expert_group``) is rewritten to the
flat 1-of-1 grouping, because it cannot change the result (docs/semantics.md, rule 2).
"""

from __future__ import annotations

import math
import weakref
from typing import NamedTuple

import torch

SCORING_FUNCS = ("sigmoid", "softmax", "sqrtsoftplus")  # index = RoutingCall.scoring (the kernels' SCORING)
SIGMOID, SOFTMAX, SQRTSOFTPLUS = range(3)
IDS_DTYPES = (torch.int32, torch.int64)  # of the ids returned, and of token ids and hash tables given
LOGIT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
BIAS_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)

MAX_EXPERTS = 4096  # registers hold a whole row; beyond this a row no longer fits one program well
MAX_TOPK = 64  # selection is unrolled once per chosen expert
MAX_GROUPS = 64  # eliminating groups are ranked by all pairs on one-row tiles (groups x groups comparisons)


class RoutingCall(NamedTuple):
    """A validated, normalised routing call."""

    tokens: int  # T, rows of gating_output
    experts: int  # E, columns of gating_output
    topk: int  # K, experts chosen per token
    scoring: int  # SIGMOID, SOFTMAX (over the row) or SQRTSOFTPLUS: the index in SCORING_FUNCS
    num_groups: int  # G after normalisation: 1 when no group can be eliminated
    topk_group: int  # groups kept after normalisation: 1 when no group can be eliminated
    renormalize: bool  # divide the chosen weights by their sum
    scale: float  # routed_scaling_factor

    @property
    def grouped(self) -> bool:
        """Whether the group stage runs (some group can be eliminated)."""
        return self.topk_group < self.num_groups

    @property
    def group_size(self) -> int:
        return self.experts // self.num_groups

    @property
    def softmax(self) -> bool:
        return self.scoring == SOFTMAX


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int(name: str, value, minimum: int) -> int:
    if not _is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _check_tensor(name: str, value) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


_SCORING_INDEX = {name: index for index, name in enumerate(SCORING_FUNCS)}


def check_call(
    gating_output,
    topk,
    scoring_func,
    correction_bias,
    num_expert_group,
    topk_group,
    renormalize,
    routed_scaling_factor,
    out,
    is_padding=None,
    ids_dtype=torch.int32,
) -> RoutingCall:
    """Validate a routing call; raise ``TypeError``/``ValueError`` naming the argument.

    Returns the normalised :class:`RoutingCall`. Written for the hot path: every attribute is read
    once, and error messages are only built when a check fails.
    """
    if not isinstance(gating_output, torch.Tensor):
        _check_tensor("gating_output", gating_output)
    shape = gating_output.shape
    dtype = gating_output.dtype
    if len(shape) != 2:
        raise ValueError(f"gating_output must be 2-D [tokens, experts], got shape {tuple(shape)}")
    if dtype not in LOGIT_DTYPES:
        raise TypeError(f"gating_output must be float32, bfloat16 or float16, got {dtype}")
    tokens, experts = shape
    if not 1 <= experts <= MAX_EXPERTS:
        if experts < 1:
            raise ValueError("gating_output must have at least one expert (column), got 0")
        raise ValueError(f"gating_output has {experts} experts; at most {MAX_EXPERTS} are supported")

    scoring = _SCORING_INDEX.get(scoring_func) if type(scoring_func) is str else None
    if scoring is None:
        if not isinstance(scoring_func, str):
            raise TypeError(f"scoring_func must be a str, got {type(scoring_func).__name__}")
        raise ValueError(f"scoring_func must be 'sigmoid', 'softmax' or 'sqrtsoftplus', got {scoring_func!r}")
    if renormalize is not True and renormalize is not False:
        raise TypeError(f"renormalize must be a bool, got {type(renormalize).__name__}")
    scale_type = type(routed_scaling_factor)
    if scale_type is not float and scale_type is not int:
        if isinstance(routed_scaling_factor, bool) or not isinstance(routed_scaling_factor, (int, float)):
            raise TypeError(f"routed_scaling_factor must be a float, got {scale_type.__name__}")
    if not abs(routed_scaling_factor) < math.inf:  # (not math.isfinite: it does not trace symbolic floats)
        raise ValueError(f"routed_scaling_factor must be finite, got {routed_scaling_factor}")

    groups = num_expert_group if type(num_expert_group) is int and num_expert_group >= 1 else \
        _check_int("num_expert_group", num_expert_group, 1)
    kept = topk_group if type(topk_group) is int and topk_group >= 1 else _check_int("topk_group", topk_group, 1)
    if experts % groups:
        raise ValueError(f"num_expert_group={groups} does not divide the {experts} experts of gating_output")
    if kept >= groups:  # no group can be eliminated: the flat problem, exactly
        groups = kept = 1
    elif groups > MAX_GROUPS:
        raise ValueError(f"num_expert_group={groups} with eliminating groups: at most {MAX_GROUPS} are supported")
    k = topk if type(topk) is int and topk >= 1 else _check_int("topk", topk, 1)
    if k > kept * (experts // groups):
        raise ValueError(
            f"topk={k} exceeds the {kept * (experts // groups)} experts that topk_group={topk_group} of "
            f"num_expert_group={num_expert_group} groups hold"
        )
    if k > MAX_TOPK:
        raise ValueError(f"topk={k}: at most {MAX_TOPK} are supported")

    device = None
    if correction_bias is not None:
        if not isinstance(correction_bias, torch.Tensor):
            _check_tensor("correction_bias", correction_bias)
        if correction_bias.dtype not in BIAS_DTYPES:
            raise TypeError(f"correction_bias must be a floating tensor, got {correction_bias.dtype}")
        if correction_bias.shape != (experts,):
            raise ValueError(f"correction_bias must have shape ({experts},), got {tuple(correction_bias.shape)}")
        device = gating_output.device
        if correction_bias.device != device:
            raise ValueError(f"correction_bias is on {correction_bias.device}, gating_output on {device}")

    if ids_dtype is not torch.int32:
        check_ids_dtype(ids_dtype, is_padding is not None)
    if is_padding is not None:
        check_padding(is_padding, tokens, device or gating_output.device)
    if out is not None:
        _check_out(out, tokens, k, device or gating_output.device, ids_dtype)

    return RoutingCall(tokens, experts, k, scoring, groups, kept, renormalize, float(routed_scaling_factor))


def check_ids_dtype(ids_dtype, padded: bool = False) -> None:
    if ids_dtype not in IDS_DTYPES:
        if padded and isinstance(ids_dtype, torch.dtype) and not ids_dtype.is_signed:
            raise TypeError(f"ids_dtype {ids_dtype} is unsigned: padded rows get id -1, which needs int32 or int64")
        raise TypeError(f"ids_dtype must be torch.int32 or torch.int64, got {ids_dtype}")


def check_padding(is_padding, tokens: int, device: torch.device) -> None:
    """``is_padding``: a bool tensor [T] on the logits' device (True: a padded row)."""
    if not isinstance(is_padding, torch.Tensor):
        _check_tensor("is_padding", is_padding)
    if is_padding.dtype != torch.bool:
        raise TypeError(f"is_padding must be a bool tensor, got {is_padding.dtype}")
    if is_padding.shape != (tokens,):
        raise ValueError(f"is_padding must have shape ({tokens},), one entry a row, got {tuple(is_padding.shape)}")
    if is_padding.device != device:
        raise ValueError(f"is_padding is on {is_padding.device}, gating_output on {device}")


def _check_out(out, tokens: int, topk: int, device: torch.device, ids_dtype: torch.dtype = torch.int32) -> None:
    if type(out) is not tuple and type(out) is not list or len(out) != 2:
        raise TypeError("out must be a (weights, ids) pair of tensors")
    weights, ids = out
    for name, tensor, dtype in (("out[0] (weights)", weights, torch.float32), ("out[1] (ids)", ids, ids_dtype)):
        if not isinstance(tensor, torch.Tensor):
            _check_tensor(name, tensor)
        if tensor.dtype != dtype:
            raise TypeError(f"{name} must be {dtype}, got {tensor.dtype}")
        if tensor.shape != (tokens, topk):
            raise ValueError(f"{name} must have shape ({tokens}, {topk}), got {tuple(tensor.shape)}")
        if tensor.device != device:
            raise ValueError(f"{name} is on {tensor.device}, gating_output on {device}")


# hash tables whose entries were found in range: (storage address, offset, shape, strides, version, device, E) ->
# a weak reference to the tensor that owns the storage (a view's base, else the table). The key is the storage, not
# the tensor, so that a view taken afresh on every call (a layer's row of a stacked table) is checked once; the
# reference tells a live table from a freed one whose memory the allocator has handed to a new table.
_checked_tables: dict[tuple, weakref.ref] = {}


def check_hash_call(gating_output, input_ids, tid2eid, scoring_func, renormalize, routed_scaling_factor, out,
                    is_padding=None, ids_dtype=torch.int32) -> RoutingCall:
    """Validate a hash-routing call (``route_hash``); raise ``TypeError``/``ValueError`` naming the argument.

    ``tid2eid`` [V, K] maps token ids to K experts. Its entries must lie in [0, E): checked once per table
    and version (the check reads the table back, a host sync, so it is not repeated on every call; an in-place
    change of the table bumps its version and the next call checks it again). Inside a CUDA-graph capture
    the check cannot run; the kernel then treats an entry outside [0, E) as an invalid expert (weight 0).
    """
    call = check_call(gating_output, 1, scoring_func, None, 1, 1, renormalize, routed_scaling_factor, None,
                      is_padding, ids_dtype)
    if call.scoring == SOFTMAX:
        raise ValueError("scoring_func='softmax' is not a hash-routing scoring: use 'sqrtsoftplus' or 'sigmoid'")
    device = gating_output.device
    for name, tensor, dims in (("input_ids", input_ids, 1), ("tid2eid", tid2eid, 2)):
        if not isinstance(tensor, torch.Tensor):
            _check_tensor(name, tensor)
        if tensor.dtype not in IDS_DTYPES:
            raise TypeError(f"{name} must be an int32 or int64 tensor, got {tensor.dtype}")
        if tensor.dim() != dims:
            raise ValueError(f"{name} must be {dims}-D, got shape {tuple(tensor.shape)}")
        if tensor.device != device:
            raise ValueError(f"{name} is on {tensor.device}, gating_output on {device}")
    if input_ids.shape[0] != call.tokens:
        raise ValueError(f"input_ids has {input_ids.shape[0]} entries, gating_output {call.tokens} rows")
    vocabulary, topk = tid2eid.shape
    if vocabulary < 1 or topk < 1:
        raise ValueError(f"tid2eid must have at least one row and one column, got shape {tuple(tid2eid.shape)}")
    if topk > min(MAX_TOPK, call.experts):
        raise ValueError(f"tid2eid has {topk} experts a token: at most {min(MAX_TOPK, call.experts)} "
                         f"(the {call.experts} experts of gating_output, and {MAX_TOPK})")
    _check_table_entries(tid2eid, call.experts)
    if out is not None:
        _check_out(out, call.tokens, topk, device, ids_dtype)
    return call._replace(topk=topk)


def _check_table_entries(tid2eid: torch.Tensor, experts: int) -> None:
    key = (tid2eid.untyped_storage().data_ptr(), tid2eid.storage_offset(), tuple(tid2eid.shape), tid2eid.stride(),
           tid2eid._version, str(tid2eid.device), experts)
    owner = tid2eid if tid2eid._base is None else tid2eid._base
    found = _checked_tables.get(key)
    if found is not None and found() is owner:
        return
    if tid2eid.is_cuda and torch.cuda.is_current_stream_capturing():
        return  # no host read inside a capture: the kernel masks entries outside [0, E)
    low, high = (int(v) for v in torch.aminmax(tid2eid))  # one pass, one read back
    if low < 0 or high >= experts:
        raise ValueError(f"tid2eid holds expert ids in [{low}, {high}]; gating_output has {experts} experts "
                         f"(ids must lie in [0, {experts}))")
    if len(_checked_tables) >= 1024:
        _checked_tables.clear()
    _checked_tables[key] = weakref.ref(owner)
