"""Tile configuration rules and the kernel launch.

Configurations come from deterministic rules on the shape (never from autotuning at call time: it
would break CUDA-graph capture and cost seconds on the first call).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton

from ..call import RoutingCall
from ._routing import route_kernel


class KernelConfig(NamedTuple):
    """How one launch tiles the problem."""

    rows: int  # tokens per program
    block_groups: int  # group slots per row (1 on the flat path)
    block_group_size: int  # expert slots per group (power of two >= group size)
    block_k: int  # slots for the chosen experts (power of two >= topk)
    num_warps: int


def choose_config(call: RoutingCall) -> KernelConfig:
    """The tile for a call, by rule: whole rows in registers, more rows per program for large T."""
    block_groups = triton.next_power_of_2(call.num_groups)
    block_group_size = triton.next_power_of_2(call.group_size)
    block = block_groups * block_group_size
    rows = 1
    if call.tokens >= 4096:
        rows = max(1, min(8, 1024 // block))
    num_warps = max(1, min(8, rows * block // 256))
    return KernelConfig(rows, block_groups, block_group_size, triton.next_power_of_2(call.topk), num_warps)


def launch(
    call: RoutingCall,
    logits: torch.Tensor,
    bias: torch.Tensor | None,
    weights: torch.Tensor,
    ids: torch.Tensor,
    config: KernelConfig | None = None,
) -> None:
    """Route ``logits`` into ``weights`` and ``ids`` with the Triton kernel (GPU or interpreter)."""
    cfg = config or choose_config(call)
    grid = (triton.cdiv(call.tokens, cfg.rows),)
    route_kernel[grid](
        logits, bias, logits.stride(0),
        weights, ids, weights.stride(0), weights.stride(1), ids.stride(0), ids.stride(1),
        call.tokens, call.scale,
        TOPK=call.topk, SOFTMAX=call.softmax, RENORMALIZE=call.renormalize,
        NUM_GROUPS=call.num_groups, GROUP_SIZE=call.group_size, TOPK_GROUP=call.topk_group,
        ROWS=cfg.rows, BLOCK_GROUPS=cfg.block_groups, BLOCK_GROUP_SIZE=cfg.block_group_size, BLOCK_K=cfg.block_k,
        num_warps=cfg.num_warps,
    )
