"""One MoE layer end to end (``moe-routing bench --preset moe-layer``): vLLM 0.33's routing stage against ours, with
the same expert GEMMs after each, so that the routing stage's saving is seen in the layer's time.

Two layer arms per shape, timed interleaved under CUDA-graph replay, and beside them their routing stages alone:

* ``vLLM layer``: vLLM's top-k op for the shape (the ``plan`` preset's, ``stage_arms.vllm_topk``), then what vLLM's
  ``fused_experts`` does with its ids (``vllm/model_executor/layers/fused_moe/fused_moe.py``,
  ``_prepare_expert_assignment``): its ``moe_align_block_size`` (with the expert map and
  ``ignore_invalid_experts=True`` under expert parallelism), or, at small token counts without a map, no plan at all:
  each (token, k) pair its own block (``sorted_token_ids`` None, ``expert_ids`` the ids, ``num_tokens_post_padded``
  a fresh ``T * K * BLOCK_SIZE_M``).
* ``moe_routing layer``: ``moe_routing.route_plan(out=)`` at the config's ``BLOCK_SIZE_M`` (always the blocks plan).

and in both the same rest of ``fused_experts_impl``: vLLM's Triton ``fused_moe_kernel`` for GEMM1 (hidden x w13 ->
[T, K, 2N]), SiLU-and-mul, ``fused_moe_kernel`` for GEMM2 with the routed weights multiplied in
(``MUL_ROUTED_WEIGHT``), then the sum over the K experts. The kernel is read from vLLM's source at run time
(``--engine-source vllm=DIR``: its ``@triton.jit`` functions are taken out of ``fused_moe.py`` with ``ast`` and run
with Triton, as the file's own module would; nothing of it is kept in this repository). SiLU-and-mul and the sum are
plain torch (vLLM uses its CUDA ``silu_and_mul`` and ``moe_sum``): the same in both arms, they move both times alike.

The kernel's config is vLLM's: its tuned JSON for the GPU where ``configs/`` has one, at the token count nearest
the row's, else its default rule (``choose_config``); each row records which.
"""

from __future__ import annotations

import ast
import builtins
import json
import math
import os
import re
import statistics
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import triton
import triton.language as tl

from .bench import Measurement, Shape, graph_time_us, make_inputs

FUSED_MOE_FILE = "vllm/model_executor/layers/fused_moe/fused_moe.py"
CONFIGS_FOLDER = "vllm/model_executor/layers/fused_moe/configs"
KERNEL_NAME = "fused_moe_kernel"

LAYER_TOKENS = (1, 4, 16, 64, 256)
# A layer graph holds at most this much estimated work (the weights its experts read, at HBM speed), at least
# LAYER_MIN_CALLS calls: DeepSeek-V3 at 256 tokens reads nearly all 22 GB of its experts per call.
LAYER_GRAPH_BUDGET_US = 20_000.0
LAYER_MIN_CALLS = 4
ASSUMED_BANDWIDTH = 3.0e12  # bytes/s, for that estimate only
# The correction bias's scale against the bench's N(0, 0.5²) (make_inputs): a trained router's bias keeps the experts'
# load near uniform, while that one sends most tokens to a few experts (and DeepSeek-V3's first group, the expert-
# parallel rank's 32 experts, almost none), which would change the GEMMs' work.
LAYER_BIAS_SCALE = 0.1

ARMS = ("vLLM layer", "moe_routing layer", "vLLM stage", "moe_routing stage")


# --- the shapes ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerShape:
    """One MoE layer to time: the model's routing and expert sizes, at one token count."""

    model: str
    experts: int  # E, global
    hidden: int  # the model's hidden size (GEMM1's K, GEMM2's N)
    intermediate: int  # N, one expert's intermediate size (w13 holds 2N rows)
    topk: int
    tokens: int
    scoring: str = "sigmoid"
    bias: bool = True
    groups: int = 1
    topk_group: int = 1
    scale: float = 1.0
    local_experts: int = 0  # expert parallelism: this rank holds the first local_experts experts (0: all)
    dtype: torch.dtype = torch.bfloat16  # activations and weights

    def __post_init__(self):
        for name in ("experts", "hidden", "intermediate", "topk", "tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not 0 <= self.local_experts <= self.experts:
            raise ValueError(f"local_experts must lie in [0, experts], got {self.local_experts}")
        if self.dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise TypeError(f"dtype must be bfloat16, float16 or float32, got {self.dtype}")

    @property
    def routing(self) -> Shape:
        """The routing stage's shape (bf16 logits, a float32 bias: the ``plan`` preset's inputs)."""
        return Shape(self.experts, self.topk, self.tokens, self.groups, self.topk_group, scoring=self.scoring,
                     bias=self.bias, dtype=torch.bfloat16, scale=self.scale, stage=True,
                     local_experts=self.local_experts)

    @property
    def weight_experts(self) -> int:
        """The experts whose weights this rank holds (E_local under expert parallelism)."""
        return self.local_experts or self.experts

    @property
    def mapped(self) -> bool:
        return bool(self.local_experts)

    @property
    def weights_key(self) -> tuple:
        return (self.model, self.weight_experts, self.hidden, self.intermediate, self.dtype)

    @property
    def label(self) -> str:
        ep = f" EP {self.local_experts} of {self.experts}" if self.local_experts else ""
        return f"{self.model} ({self.experts} / {self.topk}, H {self.hidden}, N {self.intermediate}){ep}"


LAYER_MODELS = (
    dict(model="Moonlight", experts=64, hidden=2048, intermediate=1408, topk=6, scale=2.446),
    dict(model="Qwen3-30B-A3B", experts=128, hidden=2048, intermediate=768, topk=8, scoring="softmax", bias=False),
    dict(model="DeepSeek-V3", experts=256, hidden=7168, intermediate=2048, topk=8, groups=8, topk_group=4, scale=2.5),
    dict(model="DeepSeek-V3", experts=256, hidden=7168, intermediate=2048, topk=8, groups=8, topk_group=4, scale=2.5,
         local_experts=32),
)
LAYER_SHAPES = [LayerShape(tokens=t, **model) for model in LAYER_MODELS for t in LAYER_TOKENS]


# --- vLLM's choices, read from its fused_moe.py ---------------------------------------------------------------------

def vllm_per_pair_blocks(tokens: int, topk: int, global_experts: int, mapped: bool) -> bool:
    """Whether vLLM 0.33's ``fused_experts`` skips ``moe_align_block_size`` and gives each (token, k) pair its own
    block: ``_prepare_expert_assignment`` in ``fused_moe.py`` (no expert map, weights not host-resident, ``T * K *
    4 <= global E``; the wna16 exception does not concern bf16). The rule is ``stage_arms.vllm_aligns``'s."""
    from .stage_arms import vllm_aligns

    return not vllm_aligns(tokens, topk, global_experts, mapped)


def device_file_name(device_name: str) -> str:
    """The device part of vLLM's config file names: ``get_device_name_as_file_name`` (spaces and slashes to
    ``_``), with every H200 model named ``NVIDIA_H200`` (``get_config_file_name``)."""
    name = re.sub(r"[\s/]+", "_", device_name)
    return "NVIDIA_H200" if "H200" in name.split("_") else name


def config_file_name(experts: int, intermediate: int, device_name: str, dtype: str | None = None,
                     block_shape: list[int] | None = None) -> str:
    """vLLM's tuned-config file name (``get_config_file_name``): ``E`` the experts this rank holds, ``N`` one
    expert's intermediate size (``w2``'s last dimension); ``dtype`` None for bf16/fp16 weights."""
    dtype_part = f",dtype={dtype}" if dtype else ""
    block_part = f",block_shape=[{block_shape[0]},{block_shape[1]}]" if block_shape and all(block_shape) else ""
    return f"E={experts},N={intermediate},device_name={device_file_name(device_name)}{dtype_part}{block_part}.json"


def nearest_token_count(token_counts, tokens: int) -> int:
    """The tuned token count vLLM takes for ``tokens`` (``try_get_optimal_moe_config``): the nearest, the first in
    the file's order on a tie."""
    counts = list(token_counts)
    if not counts:
        raise ValueError("a tuned config file must hold at least one token count")
    return min(counts, key=lambda count: abs(count - tokens))


def default_config(tokens: int, experts: int) -> dict:
    """vLLM 0.33's default config for bf16/fp16 weights on CUDA (``get_default_config``'s general branch; the
    batch-invariant mode off)."""
    block_m = 16 if tokens <= 32 else 32 if tokens <= 96 else 64 if tokens <= 512 else 128
    return {"BLOCK_SIZE_M": block_m, "BLOCK_SIZE_N": 64 if tokens <= 64 else 128,
            "BLOCK_SIZE_K": 128 if tokens <= 64 else 64,
            "GROUP_SIZE_M": 16 if tokens // max(experts, 1) > 128 else 1, "SPLIT_K": 1,
            "num_warps": 4 if tokens <= 128 else 8, "num_stages": 4 if tokens <= 32 else 3}


def config_folders(source_dir: str | Path) -> list[Path]:
    """Where vLLM looks for tuned configs, first found wins: ``VLLM_TUNED_CONFIG_FOLDER``, then its own
    ``configs/`` (``get_moe_configs``)."""
    folders = [Path(os.environ["VLLM_TUNED_CONFIG_FOLDER"])] if os.environ.get("VLLM_TUNED_CONFIG_FOLDER") else []
    return folders + [Path(source_dir) / CONFIGS_FOLDER]


def choose_config(tokens: int, weight_experts: int, intermediate: int, device_name: str,
                  folders: list[Path]) -> tuple[dict, str]:
    """The fused-MoE kernel config vLLM 0.33 runs a bf16 layer with (``try_get_optimal_moe_config``): the tuned
    file's entry at the nearest token count, else the default rule. Returns (config, where it came from)."""
    if not isinstance(tokens, int) or tokens < 1:
        raise ValueError(f"tokens must be a positive int, got {tokens!r}")
    name = config_file_name(weight_experts, intermediate, device_name)
    for folder in folders:
        path = Path(folder) / name
        if path.is_file():
            table = json.loads(path.read_text())
            table.pop("triton_version", None)
            configs = {int(key): value for key, value in table.items()}
            count = nearest_token_count(configs, tokens)
            return dict(configs[count]), f"{name} [{count}]"
    return default_config(tokens, weight_experts), "default"


# --- vLLM's kernel, from its source ---------------------------------------------------------------------------------

def _is_triton_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(target, ast.Attribute) and target.attr == "jit" and \
        isinstance(target.value, ast.Name) and target.value.id == "triton"


def _free_names(function: ast.FunctionDef) -> set[str]:
    """Names a function reads that it neither takes nor assigns (its globals), builtins left out."""
    arguments = function.args
    bound = {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}
    bound |= {a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None}
    loaded = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return loaded - bound - set(dir(builtins))


def extract_jit_functions(path: str | Path, name: str, module_name: str = "vllm_source_fused_moe") -> dict:
    """The ``@triton.jit`` function ``name`` of the Python file ``path`` and the jit functions it calls, executed
    with only ``triton`` and ``tl`` as their globals (the rest of the file, and its imports, are not run).

    The functions are compiled under the file's own name and line numbers, so Triton reads their source from the
    file itself. Returns {function name: Triton function}. ValueError where ``name`` is not a jit function of the
    file, or where one of them reads a global other than ``triton``, ``tl`` and the jit functions taken."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} (--engine-source vllm=DIR: DIR must hold {FUSED_MOE_FILE})")
    tree = ast.parse(path.read_text(), filename=str(path))
    jitted = {node.name: node for node in tree.body
              if isinstance(node, ast.FunctionDef) and any(_is_triton_jit(d) for d in node.decorator_list)}
    if name not in jitted:
        raise ValueError(f"{path}: no @triton.jit function {name!r} (found: {', '.join(sorted(jitted)) or 'none'})")
    taken, pending = [], [name]
    while pending:
        current = pending.pop()
        if current in taken:
            continue
        taken.append(current)
        for needed in sorted(_free_names(jitted[current]) - {"triton", "tl"}):
            if needed not in jitted:
                raise ValueError(f"{path}: {current} reads {needed!r}, which is not a @triton.jit function of the "
                                 "file (the extraction supplies only triton, tl and those)")
            pending.append(needed)
    module = ast.Module(body=[node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in taken],
                        type_ignores=[])
    namespace = {"triton": triton, "tl": tl, "__name__": module_name, "__file__": str(path)}
    exec(compile(module, str(path), "exec"), namespace)  # the file's own code, under its own name
    return {function: namespace[function] for function in taken}


_kernels: dict[str, object] = {}
_kernels_lock = threading.Lock()


def vllm_fused_moe_kernel(source_dir: str | Path | None = None):
    """vLLM's ``fused_moe_kernel``: from ``source_dir`` (default ``ENGINE_SOURCES["vllm"]``), once a process."""
    if source_dir is None:
        from .arms import ENGINE_SOURCES

        if "vllm" not in ENGINE_SOURCES:
            raise ValueError("the moe-layer arms read vLLM's fused_moe.py: give --engine-source vllm=DIR")
        source_dir = ENGINE_SOURCES["vllm"]
    path = str((Path(source_dir) / FUSED_MOE_FILE).resolve())
    with _kernels_lock:
        if path not in _kernels:
            _kernels[path] = extract_jit_functions(path, KERNEL_NAME)[KERNEL_NAME]
        return _kernels[path]


def _compute_type(dtype: torch.dtype):
    return {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}[dtype]


def launch_fused_moe(kernel, A, B, C, topk_weights, sorted_token_ids, expert_ids, num_tokens_post_padded,
                     mul_routed_weight: bool, top_k: int, config: dict, warmup: bool = False):
    """``fused_moe_kernel`` launched as vLLM 0.33's ``invoke_fused_moe_triton_kernel`` launches it for unquantized
    weights without a bias on CUDA (no swap-AB, no tensor descriptors): the same grid, arguments and meta-parameters.
    ``sorted_token_ids`` None: each (token, k) pair its own block. ``warmup``: compile only."""
    tokens = A.size(0)
    num_valid = tokens * top_k
    block_m = config["BLOCK_SIZE_M"]
    if sorted_token_ids is not None:
        em = sorted_token_ids.size(0)
        if tokens < block_m:  # vLLM's small-batch bound on the blocks that can hold entries
            em = min(em, tokens * top_k * block_m)
    else:
        em = num_valid * block_m
    meta = dict(config)
    meta["SPLIT_K"] = 1
    block_k = meta.pop("BLOCK_SIZE_K")
    grid = (triton.cdiv(em, block_m) * triton.cdiv(B.size(1), meta["BLOCK_SIZE_N"]),)
    arguments = (A, B, C, None, None, None, topk_weights, sorted_token_ids, expert_ids, num_tokens_post_padded,
                 B.size(1), B.size(2), em, num_valid,
                 A.stride(0), A.stride(1), B.stride(0), B.stride(2), B.stride(1), C.stride(1), C.stride(2),
                 0, 0, 0, 0, 0, 0, 0,  # activation / weight scale strides, bias strides: none here
                 0, 0)  # group_n, group_k: no block quantisation
    options = dict(MUL_ROUTED_WEIGHT=mul_routed_weight, top_k=top_k, compute_type=_compute_type(A.dtype),
                   use_fp8_w8a8=False, use_int8_w8a8=False, use_int8_w8a16=False, per_channel_quant=False,
                   naive_block_assignment=sorted_token_ids is None, HAS_BIAS=False, BLOCK_SIZE_K=block_k,
                   SWAP_AB=False, USE_TD=False, **meta)
    if warmup:
        return kernel.run(*arguments, grid=grid, warmup=True, **options)
    return kernel[grid](*arguments, **options)


def silu_and_mul(gate_up: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """SiLU(gate) * up of [rows, 2N] into ``out`` [rows, N], in float32 with one rounding (both arms alike)."""
    n = out.shape[-1]
    gate, up = gate_up[:, :n].float(), gate_up[:, n:].float()
    return out.copy_(torch.nn.functional.silu(gate) * up)


def run_experts(kernel, hidden, w13, w2, topk_weights, sorted_token_ids, expert_ids, num_tokens_post_padded,
                config: dict, mapped: bool, warmup: bool = False) -> torch.Tensor:
    """The rest of vLLM 0.33's ``fused_experts_impl`` for bf16 after the plan: its buffers (allocated per call, the
    GEMM1 and GEMM2 outputs sharing one), GEMM1, SiLU-and-mul, the GEMM2 output zeroed under expert parallelism,
    GEMM2 with the routed weights multiplied in, the sum over the K experts. ``warmup``: compile the two GEMMs
    only."""
    tokens, topk = topk_weights.shape
    intermediate2, hidden_size = w13.size(1), w2.size(1)
    shared = torch.empty(tokens * topk * max(intermediate2, hidden_size), device=hidden.device, dtype=hidden.dtype)
    gemm1_out = shared[: tokens * topk * intermediate2].view(tokens, topk, intermediate2)
    gemm2_out = shared[: tokens * topk * hidden_size].view(tokens, topk, hidden_size)
    activated = torch.empty(tokens * topk, intermediate2 // 2, device=hidden.device, dtype=hidden.dtype)
    out = torch.empty_like(hidden)
    launch_fused_moe(kernel, hidden, w13, gemm1_out, topk_weights, sorted_token_ids, expert_ids,
                     num_tokens_post_padded, False, topk, config, warmup)
    if not warmup:
        silu_and_mul(gemm1_out.view(-1, intermediate2), activated)
        if mapped:
            gemm2_out.zero_()
    launch_fused_moe(kernel, activated, w2, gemm2_out, topk_weights, sorted_token_ids, expert_ids,
                     num_tokens_post_padded, True, 1, config, warmup)
    if not warmup:
        torch.sum(gemm2_out, dim=1, out=out)
    return out


def reference_layer(hidden, w13, w2, weights, ids, expert_map=None) -> torch.Tensor:
    """The layer in float32, expert by expert: the yardstick both arms' outputs are measured against."""
    hidden32 = hidden.float()
    out = torch.zeros_like(hidden32)
    local = ids.long() if expert_map is None else expert_map[ids.long()].long()
    n = w13.size(1) // 2
    for expert in torch.unique(local[local >= 0]).tolist():
        rows, slots = (local == expert).nonzero(as_tuple=True)
        gate_up = hidden32[rows] @ w13[expert].float().T
        activated = torch.nn.functional.silu(gate_up[:, :n]) * gate_up[:, n:]
        out.index_add_(0, rows, (activated @ w2[expert].float().T) * weights[rows, slots, None].float())
    return out


# --- the arms -------------------------------------------------------------------------------------------------------

@dataclass
class ExpertWeights:
    """A model's expert weights as one rank holds them: w13 [E_local, 2N, H], w2 [E_local, H, N], random and
    scaled so that every activation stays of order one."""

    w13: torch.Tensor
    w2: torch.Tensor

    @staticmethod
    def random(shape: LayerShape, device: str = "cuda", seed: int = 1) -> ExpertWeights:
        gen = torch.Generator(device=device).manual_seed(seed)
        w13 = torch.randn(shape.weight_experts, 2 * shape.intermediate, shape.hidden, generator=gen, device=device,
                          dtype=shape.dtype).mul_(shape.hidden ** -0.5)
        w2 = torch.randn(shape.weight_experts, shape.hidden, shape.intermediate, generator=gen, device=device,
                         dtype=shape.dtype).mul_(shape.intermediate ** -0.5)
        return ExpertWeights(w13, w2)


@dataclass
class Layer:
    """One shape's two layer arms and their routing stages, over rotating input sets (logits and hidden states)."""

    shape: LayerShape
    weights: ExpertWeights
    kernel: object
    config: dict
    config_source: str
    calls: dict[str, Callable[[int], object]] = field(default_factory=dict)

    def __post_init__(self):
        from ..plan import route_plan
        from ..plan_call import RoutePlan
        from .stage_arms import _Stage, _vllm_align, vllm_topk

        shape = self.shape
        self.inputs = make_inputs(shape.routing)
        if self.inputs.bias is not None:  # rounded to bf16: both arms route on the values vLLM's op sees
            self.inputs.bias = (self.inputs.bias * LAYER_BIAS_SCALE).to(torch.bfloat16).float()
        sets = len(self.inputs.logits)
        gen = torch.Generator(device="cuda").manual_seed(2)
        self.hidden = [torch.randn(shape.tokens, shape.hidden, generator=gen, device="cuda", dtype=shape.dtype)
                       for _ in range(sets)]
        self.block_size = self.config["BLOCK_SIZE_M"]
        self.per_pair = vllm_per_pair_blocks(shape.tokens, shape.topk, shape.experts, shape.mapped)
        stage = self.stage = _Stage(self.inputs, self.block_size)
        topk = self.vllm_topk = vllm_topk(self.inputs)
        align = None if self.per_pair else _vllm_align(stage)
        block_size = self.block_size

        def vllm_route(i):  # fused_experts' _prepare_expert_assignment on vLLM's top-k
            weights, ids = topk(i)
            if align is None:
                return weights, None, ids.view(-1), torch.full((1,), ids.numel() * block_size, dtype=torch.int32,
                                                                device=ids.device)
            return (weights, *align(ids))

        plan_out = RoutePlan(self.inputs.weights, self.inputs.ids, *stage.buffers(), None, None)

        def our_route(i):
            plan = route_plan(self.inputs.logits[i], shape.topk, block_size=block_size, expert_map=stage.map,
                              ignore_invalid_experts=stage.map is not None, out=plan_out, **stage.kwargs)
            return plan.weights, plan.sorted_token_ids, plan.expert_ids, plan.num_tokens_post_padded

        self.vllm_route, self.our_route = vllm_route, our_route
        self.calls = {"vLLM layer": lambda i: self.experts(i, vllm_route(i)),
                      "moe_routing layer": lambda i: self.experts(i, our_route(i)),
                      "vLLM stage": vllm_route, "moe_routing stage": our_route}

    def experts(self, i: int, routed) -> torch.Tensor:
        return run_experts(self.kernel, self.hidden[i], self.weights.w13, self.weights.w2, *routed, self.config,
                           self.shape.mapped)

    def agreement(self) -> dict:
        """Both arms on set 0: whether their ids and weights are equal, whether their outputs are (bitwise), and
        each output's largest error against the float32 layer (relative to the reference's largest entry)."""
        with torch.no_grad():
            vllm_weights, vllm_ids = self.vllm_topk(0)
            vllm_out = self.experts(0, self.vllm_route(0)).clone()
            ours = self.our_route(0)
            our_out = self.experts(0, ours).clone()
            our_weights, our_ids = self.inputs.weights.clone(), self.inputs.ids.clone()
            expected = reference_layer(self.hidden[0], self.weights.w13, self.weights.w2, our_weights, our_ids,
                                       self.stage.map)
        torch.cuda.synchronize()
        scale = expected.abs().max().clamp_min(1e-30)
        local = our_ids.long() if self.stage.map is None else self.stage.map[our_ids.long()]
        ids_equal = torch.equal(vllm_ids.to(torch.int32), our_ids)
        same_sets = torch.equal(vllm_ids.to(torch.int32).sort(dim=1).values, our_ids.sort(dim=1).values)
        return {
            "ids_equal": ids_equal, "ids_same_sets": same_sets,
            "weights_equal": torch.equal(vllm_weights.float(), our_weights),
            "weights_max_diff": (vllm_weights.float() - our_weights).abs().max().item(),
            "outputs_bitwise_equal": torch.equal(vllm_out, our_out),
            "outputs_max_diff": (vllm_out.float() - our_out.float()).abs().max().item(),
            "experts_used": int(torch.unique(local[local >= 0]).numel()),
            "outputs_finite": bool(torch.isfinite(vllm_out).all() and torch.isfinite(our_out).all()),
            "vllm_rel_error": ((vllm_out.float() - expected).abs().max() / scale).item(),
            "ours_rel_error": ((our_out.float() - expected).abs().max() / scale).item(),
        }

    def calls_per_graph(self, arm: str, calls_per_graph: int) -> int:
        """The bench's calls per graph for the stage arms; for the layer arms as many as fit LAYER_GRAPH_BUDGET_US
        of estimated work (at least LAYER_MIN_CALLS)."""
        if not arm.endswith("layer"):
            return calls_per_graph
        shape = self.shape
        touched = min(shape.weight_experts, shape.tokens * shape.topk)
        seconds = touched * 3 * shape.intermediate * shape.hidden * self.weights.w2.element_size() / ASSUMED_BANDWIDTH
        return max(LAYER_MIN_CALLS, min(calls_per_graph, math.floor(LAYER_GRAPH_BUDGET_US / (seconds * 1e6))))


def gemm_warmups(shape: LayerShape, weights: ExpertWeights, kernel, config: dict) -> list[Callable[[], object]]:
    """Compile-only calls of every GEMM launch the two layer arms make for ``shape`` (the buffers of the real calls'
    shapes, dtypes and alignment), so that they compile in parallel before anything is timed."""
    from ..plan_call import check_plan_call

    tokens, topk, device = shape.tokens, shape.topk, weights.w13.device
    hidden = torch.empty(tokens, shape.hidden, device=device, dtype=shape.dtype)
    topk_weights = torch.empty(tokens, topk, device=device)
    ids = torch.zeros(tokens, topk, dtype=torch.int32, device=device)
    block_m = config["BLOCK_SIZE_M"]
    expert_map = torch.zeros(shape.experts, dtype=torch.int32, device=device) if shape.mapped else None
    plan = check_plan_call(ids, shape.experts, block_m, expert_map, ignore_invalid_experts=shape.mapped)
    aligned = (torch.empty(plan.capacity, dtype=torch.int32, device=device),
               torch.empty(plan.blocks, dtype=torch.int32, device=device),
               torch.empty(1, dtype=torch.int32, device=device))
    variants = [aligned]
    if vllm_per_pair_blocks(tokens, topk, shape.experts, shape.mapped):
        variants.append((None, ids.view(-1), torch.empty(1, dtype=torch.int32, device=device)))
    return [lambda plan=plan: run_experts(kernel, hidden, weights.w13, weights.w2, topk_weights, *plan, config,
                                          shape.mapped, warmup=True) for plan in variants]


# --- the runner -----------------------------------------------------------------------------------------------------

def _fields(shape: LayerShape) -> dict:
    """A result row's shape fields (the suite's, so its tables and plot read them, and the layer's own)."""
    return {"experts": shape.experts, "topk": shape.topk, "groups": shape.groups, "topk_group": shape.topk_group,
            "tokens": shape.tokens, "scoring": shape.scoring, "bias": shape.bias, "bias_shift": 0.0,
            "dtype": str(shape.dtype).removeprefix("torch."), "local_experts": shape.local_experts,
            "label": shape.label, "layer": True, "model": shape.model, "hidden": shape.hidden,
            "intermediate": shape.intermediate}


class LayerBench:
    """Measures the ``moe-layer`` shapes one at a time, holding one model's expert weights at a time. Made, it starts
    building vLLM's CUDA routing ops in a background thread (a ninja build the first time) and compiles every GEMM
    launch of the shapes meanwhile."""

    def __init__(self, shapes: list[LayerShape], rounds: int, calls_per_graph: int, replays: int,
                 threads: int = 16):
        from .arms import _vllm_op

        self.shapes, self.rounds, self.calls_per_graph, self.replays = shapes, rounds, calls_per_graph, replays
        self.threads = threads
        self.kernel = vllm_fused_moe_kernel()
        self.device_name = torch.cuda.get_device_name()
        from .arms import ENGINE_SOURCES

        self.folders = config_folders(ENGINE_SOURCES["vllm"])
        self.weights_key, self.weights = None, None
        self.build_error: list[BaseException] = []

        def build():
            try:
                _vllm_op("grouped_topk")
            except BaseException as error:  # reported on the first shape that needs the ops
                self.build_error.append(error)

        self.builder = threading.Thread(target=build, daemon=True)
        self.builder.start()
        self.compile_ahead()

    def config(self, shape: LayerShape) -> tuple[dict, str]:
        return choose_config(shape.tokens, shape.weight_experts, shape.intermediate, self.device_name, self.folders)

    def compile_ahead(self) -> None:
        """Compile every GEMM launch of every shape, in parallel, one model at a time (its weights allocated, not
        filled: only their shapes, strides and alignment reach the compiler)."""
        for key in dict.fromkeys(s.weights_key for s in self.shapes):
            shapes = [s for s in self.shapes if s.weights_key == key]
            first = shapes[0]
            weights = ExpertWeights(
                torch.empty(first.weight_experts, 2 * first.intermediate, first.hidden, device="cuda",
                            dtype=first.dtype),
                torch.empty(first.weight_experts, first.hidden, first.intermediate, device="cuda", dtype=first.dtype))
            warmups = [w for s in shapes for w in gemm_warmups(s, weights, self.kernel, self.config(s)[0])]
            with ThreadPoolExecutor(self.threads) as pool:
                for future in [pool.submit(w) for w in warmups]:
                    future.result()
            del weights, warmups
            torch.cuda.empty_cache()

    def _hold_weights(self, shape: LayerShape) -> None:
        """This model's weights (the previous model's freed first)."""
        if self.weights_key == shape.weights_key:
            return
        self.weights = None
        torch.cuda.empty_cache()
        self.weights = ExpertWeights.random(shape)
        self.weights_key = shape.weights_key

    def measure(self, shape: LayerShape) -> tuple[list[dict], list[str]]:
        """The shape's rows (one per arm: device time per call under graph replay over the rounds) and notes."""
        self._hold_weights(shape)
        self.builder.join()
        if self.build_error:
            raise RuntimeError(f"vLLM's CUDA routing ops: {self.build_error[0]}") from self.build_error[0]
        config, source = self.config(shape)
        layer = Layer(shape, self.weights, self.kernel, config, source)
        agreement = layer.agreement()
        sets = len(layer.inputs.logits)
        results = {name: Measurement(name, shape.routing, [], []) for name in layer.calls}
        per_graph = {name: layer.calls_per_graph(name, self.calls_per_graph) for name in layer.calls}
        for _ in range(self.rounds):
            for name, call in layer.calls.items():
                times = graph_time_us(call, sets, per_graph[name], self.replays)
                results[name].device_us.append(statistics.median(times))
        common = {**_fields(shape), "config": source, "config_values": config, "block_size_m": layer.block_size,
                  "vllm_blocks": "per-pair" if layer.per_pair else "align", **agreement}
        rows = []
        for name, m in results.items():
            summary = m.summary()["device"]
            rows.append({**common, "arm": name, "calls_per_graph": per_graph[name], "device_us": m.device_us,
                         "host_us": [], **{f"device_{stat}": value for stat, value in summary.items()}})
        notes = [] if agreement["outputs_finite"] else [f"{shape.label} T={shape.tokens}: non-finite outputs"]
        del layer
        return rows, notes


# --- the table ------------------------------------------------------------------------------------------------------

def _agreement_cell(row: dict) -> str:
    ids = "ids equal" if row["ids_equal"] else "ids: same sets, other order" if row["ids_same_sets"] else "ids differ"
    weights = "" if row["weights_equal"] else f", weights Δ {row['weights_max_diff']:.1e}"
    output = "outputs bitwise equal" if row["outputs_bitwise_equal"] else f"outputs Δ {row['outputs_max_diff']:.1e}"
    return f"{ids}{weights}; {output}"


def layer_comparison(result: dict) -> list[str]:
    """Markdown lines for the ``moe-layer`` rows: each layer arm's and stage arm's device time (µs, median ±
    drift), the savings, their ratio, the stage's share of each layer, and whether the two layers agree; empty when
    the run has none."""
    index = {(r["label"], r["tokens"], r["arm"]): r for r in result["rows"] if r.get("layer")}
    shapes = list(dict.fromkeys((label, tokens) for label, tokens, _ in index))
    if not shapes:
        return []

    def cell(row):
        return f"{row['device_median']:.2f} ±{100 * row['device_drift']:.0f}%"

    lines = ["", "One MoE layer end to end (vLLM's fused_moe_kernel GEMMs after each routing stage), device time (µs "
             "per call under graph replay, median ± drift); layer saving = vLLM layer − ours, stage saving = vLLM "
             "stage − ours, ratio = layer saving / stage saving, share = stage / layer (vLLM's, ours); experts used: "
             "the held experts with at least one slot (set 0); the layer arms capture fewer calls per graph "
             "(bench.json: calls_per_graph):", "",
             "| layer | T | config | vLLM blocks | experts used | vLLM layer | moe_routing layer | layer saving "
             "| vLLM stage | moe_routing stage | stage saving | ratio | stage share | agreement (vLLM's vs ours, set 0) "
             "| error vs float32 (vLLM, ours) |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, tokens in shapes:
        rows = [index.get((label, tokens, arm)) for arm in ARMS]
        if any(row is None for row in rows):
            continue
        vllm_layer, our_layer, vllm_stage, our_stage = rows
        layer_saving = vllm_layer["device_median"] - our_layer["device_median"]
        stage_saving = vllm_stage["device_median"] - our_stage["device_median"]
        ratio = f"{layer_saving / stage_saving:.2f}" if stage_saving else "–"
        share = (f"{100 * vllm_stage['device_median'] / vllm_layer['device_median']:.1f}% / "
                 f"{100 * our_stage['device_median'] / our_layer['device_median']:.1f}%")
        lines.append(f"| {label} | {tokens} | {vllm_layer['config']} (M {vllm_layer['block_size_m']}) | "
                     f"{vllm_layer['vllm_blocks']} | {vllm_layer['experts_used']} | {cell(vllm_layer)} | "
                     f"{cell(our_layer)} | {layer_saving:+.2f} | "
                     f"{cell(vllm_stage)} | {cell(our_stage)} | {stage_saving:+.2f} | {ratio} | {share} | "
                     f"{_agreement_cell(vllm_layer)} | {vllm_layer['vllm_rel_error']:.1e}, "
                     f"{vllm_layer['ours_rel_error']:.1e} |")
    return lines
