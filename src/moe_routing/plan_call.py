"""Argument checking and buffer capacities shared by the dispatch-plan ops (``plan.py``) and their reference.

A dispatch plan is built from a routing result's ids ``[T, K]``: slot ``s = t * K + k`` belongs to expert
``ids[t, k]`` when that id lies in ``[0, E)`` and, with an ``expert_map``, maps to a local index ``>= 0``
(docs/semantics.md, rule 9). Both the op and the reference validate through the functions here, so they accept
and refuse the same calls with the same messages; the capacities are vLLM's ``moe_align_block_size``'s, so that an
engine's callers can slice the buffers as they slice vLLM's.
"""

from __future__ import annotations

import weakref
from typing import NamedTuple

import torch

from .call import IDS_DTYPES, _check_int, _check_tensor

MAP_DTYPES = (torch.int32, torch.int64)
# How an expert map enters a blocks plan: not at all, as the bins (ignore_invalid_experts: slots of other ranks'
# experts dropped, local ids in expert_ids), or only as expert_ids' values (every valid slot placed by its global
# expert, the blocks of other ranks' experts marked -1).
NO_MAP, MAP_BINS, MAP_VALUES = range(3)
# route_plan calls of one token, and of several tokens from ONE_LAUNCH_FROM's count for their experts ((up to this
# many experts, from this many tokens), the first that holds; None: never) up to ONE_LAUNCH_TOKENS without an expert
# map, may route and plan in one launch (kernels/route_plan_launch.py: where an H100 measured one launch faster than
# two, benchmarks/NOTES.md); here, where the op reads them before importing the kernels
ONE_LAUNCH_TOKENS = 256
ONE_LAUNCH_FROM = ((128, None), (256, 256), (1 << 30, 64))


def one_launch_from(experts: int) -> int | None:
    """The token count from which route_plan calls of several tokens of ``experts`` experts may take one launch, or
    None (``ONE_LAUNCH_FROM``)."""
    return next(tokens for most, tokens in ONE_LAUNCH_FROM if experts <= most)


def may_take_one_launch(tokens: int, experts: int, mapped: bool) -> bool:
    """Whether a route_plan call of ``tokens`` tokens of ``experts`` experts (``mapped``: with an expert map) may
    route and plan in one launch; the kernels' rules decide the rest."""
    if tokens == 1:
        return True
    first = one_launch_from(experts)
    return not mapped and first is not None and max(first, 2) <= tokens <= ONE_LAUNCH_TOKENS


class PlanCall(NamedTuple):
    """A validated dispatch-plan call."""

    tokens: int  # T, rows of the ids
    topk: int  # K, columns of the ids
    experts: int  # E, the global expert count the ids index
    local_experts: int  # E_local: E, or the map's largest entry + 1 (the grouped layout's offsets)
    block_size: int  # the blocks layout's block (0: the grouped layout)
    map_mode: int  # NO_MAP, MAP_BINS or MAP_VALUES
    pad_sorted_ids: bool

    @property
    def slots(self) -> int:
        return self.tokens * self.topk

    @property
    def capacity(self) -> int:
        """Entries of sorted_token_ids (vLLM's ``max_num_tokens_padded``)."""
        padded = self.slots + self.experts * (self.block_size - 1)
        if self.pad_sorted_ids:
            padded = -(-padded // self.block_size) * self.block_size
        if self.slots < self.experts:
            padded = min(self.slots * self.block_size, padded)
        return padded

    @property
    def blocks(self) -> int:
        """Entries of expert_ids: one a block of the capacity."""
        return -(-self.capacity // self.block_size)


# expert maps found valid: id(map) -> (a weak reference to it, its in-place version, E, its E_local). Keyed by the
# tensor itself, not its address: the caching allocator hands a freed map's memory to the next one.
_checked_maps: dict[int, tuple] = {}


def check_ids(topk_ids, name: str = "topk_ids") -> tuple[int, int]:
    """``topk_ids``: an int32/int64 [T, K] tensor. Returns (T, K)."""
    if not isinstance(topk_ids, torch.Tensor):
        _check_tensor(name, topk_ids)
    if topk_ids.dtype not in IDS_DTYPES:
        raise TypeError(f"{name} must be an int32 or int64 tensor, got {topk_ids.dtype}")
    if topk_ids.dim() != 2:
        raise ValueError(f"{name} must be 2-D [tokens, topk], got shape {tuple(topk_ids.shape)}")
    return topk_ids.shape[0], topk_ids.shape[1]


def check_plan_call(topk_ids, num_experts, block_size=None, expert_map=None, pad_sorted_ids=False,
                    ignore_invalid_experts=False, name: str = "topk_ids") -> PlanCall:
    """Validate an ``align`` (``block_size`` given) or ``group`` (``block_size`` None) call; raise
    ``TypeError``/``ValueError`` naming the argument."""
    tokens, topk = check_ids(topk_ids, name)
    experts = _check_int("num_experts", num_experts, 1)
    if block_size is not None:
        _check_int("block_size", block_size, 1)
    for flag, value in (("pad_sorted_ids", pad_sorted_ids), ("ignore_invalid_experts", ignore_invalid_experts)):
        if value is not True and value is not False:
            raise TypeError(f"{flag} must be a bool, got {type(value).__name__}")
    local = experts
    mode = NO_MAP
    if expert_map is not None:
        local = _check_map(expert_map, experts, topk_ids.device)
        mode = MAP_BINS if block_size is None or ignore_invalid_experts else MAP_VALUES
    return PlanCall(tokens, topk, experts, local, block_size or 0, mode, pad_sorted_ids)


def _check_map(expert_map, experts: int, device) -> int:
    """An expert map: int32/int64 [E] on the ids' device, entries in [-1, E). Returns E_local (its largest entry
    + 1). The entries are read back once per map and in-place version (a host sync), as hash tables are; a map first
    seen inside a CUDA-graph capture cannot be read there and is taken as E_local = E."""
    if not isinstance(expert_map, torch.Tensor):
        _check_tensor("expert_map", expert_map)
    if expert_map.dtype not in MAP_DTYPES:
        raise TypeError(f"expert_map must be an int32 or int64 tensor, got {expert_map.dtype}")
    if expert_map.shape != (experts,):
        raise ValueError(f"expert_map must have shape ({experts},), one entry a global expert, got "
                         f"{tuple(expert_map.shape)}")
    if expert_map.device != device:
        raise ValueError(f"expert_map is on {expert_map.device}, topk_ids on {device}")
    found = _checked_maps.get(id(expert_map))
    if found is not None and found[0]() is expert_map and found[1:3] == (expert_map._version, experts):
        return found[3]
    if expert_map.is_cuda and torch.cuda.is_current_stream_capturing():
        return experts
    low, high = (int(v) for v in torch.aminmax(expert_map))
    if low < -1 or high >= experts:
        raise ValueError(f"expert_map holds entries in [{low}, {high}]; they must lie in [-1, {experts}) (a local "
                         f"index, or -1 for an expert another rank holds)")
    if len(_checked_maps) >= 1024:
        _checked_maps.clear()
    local = max(high + 1, 0)
    _checked_maps[id(expert_map)] = (weakref.ref(expert_map), expert_map._version, experts, local)
    return local


def check_scatter_request(call: PlanCall, return_scatter_idx) -> None:
    """``return_scatter_idx``: a bool, and with a map only where the map makes the bins (as vLLM refuses)."""
    if return_scatter_idx is not True and return_scatter_idx is not False:
        raise TypeError(f"return_scatter_idx must be a bool, got {type(return_scatter_idx).__name__}")
    if return_scatter_idx and call.map_mode == MAP_VALUES:
        raise ValueError("return_scatter_idx with an expert_map needs ignore_invalid_experts=True (the slots of "
                         "other ranks' experts are then dropped; vLLM refuses the other case too)")


def check_buffer(name: str, tensor, least: int, device, dtype=torch.int32, shape: tuple | None = None) -> None:
    """A caller's output buffer: ``dtype``, on ``device``, contiguous, 1-D with at least ``least`` entries (or of
    exactly ``shape``)."""
    if not isinstance(tensor, torch.Tensor):
        _check_tensor(name, tensor)
    if tensor.dtype != dtype:
        raise TypeError(f"{name} must be {dtype}, got {tensor.dtype}")
    if tensor.device != device:
        raise ValueError(f"{name} is on {tensor.device}, topk_ids on {device}")
    if shape is not None:
        if tuple(tensor.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(tensor.shape)}")
    elif tensor.dim() != 1 or tensor.shape[0] < least:
        raise ValueError(f"{name} must be 1-D with at least {least} entries, got shape {tuple(tensor.shape)}")
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous")


class RoutePlan(NamedTuple):
    """A routing result and its dispatch plan (``route_plan``): the blocks fields with a block size, the grouped
    fields without one; the other layout's fields are None."""

    weights: torch.Tensor  # float32 [T, K]
    ids: torch.Tensor  # int32/int64 [T, K]
    sorted_token_ids: torch.Tensor | None  # int32 [capacity]: each expert's slots, padded with T * K
    expert_ids: torch.Tensor | None  # int32 [blocks]: each block's expert, -1 past the used blocks
    num_tokens_post_padded: torch.Tensor | None  # int32 [1]: the used entries of sorted_token_ids
    permutation: torch.Tensor | None  # int32 [T * K]: slots stably sorted by local expert, dropped slots last
    offsets: torch.Tensor | None  # int32 [E_local]: each local expert's cumulative end
