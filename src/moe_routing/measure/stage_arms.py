"""The routing stage's arms (``moe-routing bench --preset plan``): the top-k and the dispatch plan the expert GEMMs
consume, ours against vLLM's (its top-k op, then its ``moe_align_block_size``), side by side in one run.

Every arm builds the blocks layout of vLLM's fused-MoE Triton kernels at the block size vLLM's default config picks
for the token count (``vllm_block_size``), with the shape's expert map where it has one (this rank holding
``local_experts`` contiguous experts; vLLM then drops the other ranks' slots: ``ignore_invalid_experts=True``, as
its ``fused_experts`` calls it). vLLM's align is checked against the reference before it is timed: the same
``expert_ids`` and ``num_tokens_post_padded``, and the same slots in every block (vLLM leaves their order within an
expert open).
"""

from __future__ import annotations

from typing import Callable

import torch

from .. import reference
from ..op import route
from ..plan import align, route_plan
from ..plan_call import RoutePlan, check_plan_call
from .bench import Inputs

SPARSITY_FACTOR = 4  # vLLM aligns unless T * K * 4 <= E (and no expert map): its per-pair blocks below


def vllm_block_size(tokens: int) -> int:
    """``BLOCK_SIZE_M`` of vLLM 0.33's default fused-MoE config for bf16 weights (``get_default_config``)."""
    return 16 if tokens <= 32 else 32 if tokens <= 96 else 64 if tokens <= 512 else 128


def vllm_aligns(tokens: int, topk: int, experts: int, mapped: bool) -> bool:
    """Whether vLLM 0.33's fused-MoE layer calls ``moe_align_block_size`` (else its per-pair blocks, no plan)."""
    return mapped or tokens * topk * SPARSITY_FACTOR > experts


def expert_map(inputs: Inputs) -> torch.Tensor | None:
    """This rank's map: the first ``local_experts`` experts of ``experts`` held here (None without one)."""
    shape = inputs.shape
    if not shape.local_experts:
        return None
    mapping = torch.full((shape.experts,), -1, dtype=torch.int32, device=inputs.logits[0].device)
    mapping[: shape.local_experts] = torch.arange(shape.local_experts, dtype=torch.int32, device=mapping.device)
    return mapping


class _Stage:
    """Per-shape state the stage arms share: each set's ids (route()'s), the map, the block size and buffers."""

    def __init__(self, inputs: Inputs, block_size: int | None = None):
        shape = self.shape = inputs.shape
        self.inputs = inputs
        self.kwargs = shape.kwargs(inputs.bias)
        # vLLM's default config's block unless the caller read another config (a tuned file: measure/moe_layer.py)
        self.block_size = vllm_block_size(shape.tokens) if block_size is None else block_size
        self.map = expert_map(inputs)
        self.ids = [route(logits, shape.topk, **self.kwargs)[1] for logits in inputs.logits]
        self.call = check_plan_call(self.ids[0], shape.experts, self.block_size, self.map,
                                    ignore_invalid_experts=self.map is not None)

    def buffers(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        device = self.ids[0].device
        return (torch.empty(self.call.capacity, dtype=torch.int32, device=device),
                torch.empty(self.call.blocks, dtype=torch.int32, device=device),
                torch.empty(1, dtype=torch.int32, device=device))

    def align(self, ids, out):
        return align(ids, self.block_size, self.shape.experts, self.map, False, self.map is not None, out=out)


def arm_align(inputs: Inputs):
    """``moe_routing.align`` alone, on route()'s ids of each set, into caller buffers."""
    stage = _Stage(inputs)
    out = stage.buffers()
    return lambda i: stage.align(stage.ids[i], out)


def arm_route_then_align(inputs: Inputs):
    """route(out=) then align(out=): the stage in two of our calls."""
    stage = _Stage(inputs)
    routed = (inputs.weights, inputs.ids)
    out = stage.buffers()

    def call(i):
        _, ids = route(inputs.logits[i], stage.shape.topk, out=routed, **stage.kwargs)
        return stage.align(ids, out)

    return call


def arm_route_plan(inputs: Inputs):
    """route_plan(out=): the whole stage in one call."""
    stage = _Stage(inputs)
    out = RoutePlan(inputs.weights, inputs.ids, *stage.buffers(), None, None)
    return lambda i: route_plan(inputs.logits[i], stage.shape.topk, block_size=stage.block_size,
                                expert_map=stage.map, ignore_invalid_experts=stage.map is not None, out=out,
                                **stage.kwargs)


def _vllm_align(stage: _Stage) -> Callable:
    """vLLM's ``moe_align_block_size`` as its Python wrapper calls it (buffers allocated per call; the map passed to
    the kernel), checked against the reference on set 0."""
    from .arms import _vllm_op

    op = _vllm_op("moe_align_block_size")
    size, experts = stage.block_size, stage.shape.experts

    def call(ids):
        sorted_ids, expert_ids, post_padded = stage.buffers()
        op(ids, experts, size, sorted_ids, expert_ids, post_padded, stage.map, None)
        return sorted_ids, expert_ids, post_padded

    _check_blocks(call(stage.ids[0]), stage)
    return call


def _check_blocks(result, stage: _Stage) -> None:
    """vLLM's blocks against the reference's: ValueError where they differ (beyond the order of the slots within an
    expert, which vLLM leaves open: each expert's slots are compared as a set)."""
    expected = reference.align(stage.ids[0], stage.block_size, stage.shape.experts, stage.map, False,
                               stage.map is not None)
    used = int(expected[2])
    blocks = used // stage.block_size
    if int(result[2]) != used or not torch.equal(result[1][:blocks], expected[1][:blocks]):
        raise ValueError("vLLM's moe_align_block_size disagrees with the reference on the blocks")

    def by_expert(sorted_ids, expert_ids):  # (expert, slot) of every used entry, in one order
        experts = expert_ids[:blocks].long().repeat_interleave(stage.block_size)
        return torch.sort(experts * (stage.call.slots + 1) + sorted_ids[:used].long()).values

    if not torch.equal(by_expert(result[0], result[1]), by_expert(expected[0], expected[1])):
        raise ValueError("vLLM's moe_align_block_size disagrees with the reference on an expert's slots")


def arm_vllm_align(inputs: Inputs):
    """vLLM's ``moe_align_block_size`` alone, on route()'s ids of each set."""
    stage = _Stage(inputs)
    align_call = _vllm_align(stage)
    return lambda i: align_call(stage.ids[i])


def arm_vllm_topk_then_align(inputs: Inputs):
    """vLLM's top-k op of this shape (the one its layer calls: grouped_topk for sigmoid with a bias, topk_softmax
    for softmax, topk_softplus_sqrt for sqrt-softplus), then its ``moe_align_block_size`` on those ids."""
    stage = _Stage(inputs)
    align_call = _vllm_align(stage)
    topk = vllm_topk(inputs)

    def call(i):
        _, ids = topk(i)
        return align_call(ids)

    return call


def vllm_topk(inputs: Inputs) -> Callable:
    """vLLM's top-k op for this shape's scoring, as its layer calls it, checked against the reference on set 0:
    ``call(i) -> (weights, ids)``; ValueError where it is absent or disagrees."""
    from . import arms

    factory = {"sigmoid": arms.arm_vllm_grouped_topk, "softmax": arms.arm_vllm_topk_softmax,
               "sqrtsoftplus": arms.arm_vllm_topk_softplus_sqrt}[inputs.shape.scoring]
    topk, note = arms.checked_engine_arm("vLLM top-k", factory, inputs)
    if topk is None:
        raise ValueError(f"vLLM's top-k op for this shape: {note}")
    return topk


OURS = {
    "moe_routing.route_plan(out=)": arm_route_plan,
    "moe_routing.route + align": arm_route_then_align,
    "moe_routing.align": arm_align,
}
ENGINES = {
    "vLLM top-k + align": arm_vllm_topk_then_align,
    "vLLM moe_align_block_size": arm_vllm_align,
}
