"""Tile configuration rules and the kernel launch.

Configurations come from deterministic rules on the shape (never from autotuning at call time: it
would break CUDA-graph capture and cost seconds on the first call).

Launching: Triton's ``kernel[grid](...)`` re-derives the specialisation of every argument in Python on
each call (about 20 µs of host time for a kernel of this size). Here the first call of a
configuration goes through it once, and the compiled kernel's own C launcher is kept and called
directly afterwards, keyed by everything Triton specialises on (dtypes, constexprs, 16-byte alignment
of the logits and bias pointers, divisibility of the row stride), so the cached binary is always the
one Triton itself would have chosen.
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


def _token_class(tokens: int) -> int:
    """The token counts that choose_config treats alike (part of the launcher cache key)."""
    return 0 if tokens < 4096 else 1


def _int_class(value: int) -> int:
    """What Triton specialises an int argument on: == 1, divisible by 16, or neither."""
    return 1 if value == 1 else (16 if value % 16 == 0 else 0)


class _DirectLaunch:
    """A compiled kernel and its C launcher, called without Triton's per-call Python binder."""

    __slots__ = ("launch", "function", "metadata", "cooperative", "pdl", "constexprs", "rows")

    def __init__(self, compiled, constexprs: tuple, rows: int):
        runner = compiled.run  # the CudaLauncher: loads the module on first access
        self.launch = runner.launch
        self.function = compiled.function
        self.metadata = compiled.packed_metadata
        self.cooperative = runner.launch_cooperative_grid
        self.pdl = runner.launch_pdl
        self.constexprs = constexprs
        self.rows = rows


def _direct_launch_supported(compiled) -> bool:
    """True for a CUDA launcher that needs no scratch memory and no launch hooks (Triton 3.x layout)."""
    runner = getattr(compiled, "run", None)
    return (
        torch.version.hip is None
        and all(hasattr(runner, a) for a in ("launch", "launch_cooperative_grid", "launch_pdl"))
        and not getattr(runner, "global_scratch_size", 0)
        and not getattr(runner, "profile_scratch_size", 0)
        and triton.knobs.runtime.launch_enter_hook is None
        and triton.knobs.runtime.launch_exit_hook is None
    )


_launchers: dict[tuple, _DirectLaunch | None] = {}

try:  # the current stream as a raw handle, as Triton's own launch path gets it
    _raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover - CPU-only builds of torch
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream


def launch(
    call: RoutingCall,
    logits: torch.Tensor,
    bias: torch.Tensor | None,
    weights: torch.Tensor,
    ids: torch.Tensor,
    config: KernelConfig | None = None,
) -> None:
    """Route ``logits`` into ``weights`` and ``ids`` with the Triton kernel (GPU or interpreter).

    ``config`` forces a tile (tests use it to cover every configuration a rule can choose).
    """
    stride = logits.stride(0)
    key = None
    if config is None and logits.is_cuda:
        key = (
            call.experts, call.topk, call.softmax, call.num_groups, call.topk_group, call.renormalize,
            _token_class(call.tokens), logits.dtype, None if bias is None else bias.dtype, logits.device.index,
            logits.data_ptr() % 16 == 0, None if bias is None else bias.data_ptr() % 16 == 0, _int_class(stride),
        )
        direct = _launchers.get(key)
        if direct is not None:
            grid = (call.tokens + direct.rows - 1) // direct.rows
            stream = _raw_stream(logits.device.index)
            direct.launch(
                grid, 1, 1, stream, direct.function, direct.cooperative, direct.pdl, None, None, direct.metadata,
                None, None, None,
                logits.data_ptr(), None if bias is None else bias.data_ptr(), stride,
                weights.data_ptr(), ids.data_ptr(), weights.stride(0), weights.stride(1), ids.stride(0),
                ids.stride(1), call.tokens, call.scale, *direct.constexprs,
            )
            return

    cfg = config or choose_config(call)
    constexprs = dict(
        TOPK=call.topk, SOFTMAX=call.softmax, RENORMALIZE=call.renormalize,
        NUM_GROUPS=call.num_groups, GROUP_SIZE=call.group_size, TOPK_GROUP=call.topk_group,
        ROWS=cfg.rows, BLOCK_GROUPS=cfg.block_groups, BLOCK_GROUP_SIZE=cfg.block_group_size, BLOCK_K=cfg.block_k,
    )
    grid = (triton.cdiv(call.tokens, cfg.rows),)
    compiled = route_kernel[grid](
        logits, bias, stride,
        weights, ids, weights.stride(0), weights.stride(1), ids.stride(0), ids.stride(1),
        call.tokens, call.scale,
        num_warps=cfg.num_warps, **constexprs,
    )
    if key is not None:
        _launchers[key] = (
            _DirectLaunch(compiled, tuple(constexprs.values()), cfg.rows) if _direct_launch_supported(compiled) else None
        )
