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

Each layer runs in bf16 and, for DeepSeek-V3, also as vLLM runs a checkpoint shipped in fp8 w8a8 with 128 x 128
weight blocks (``weights_dtype="fp8"``): e4m3 weights with a float32 scale per block (``quantize_weight_blocks``, made
from the bf16 arm's weights), the activations quantised per token group of 128 before each GEMM by vLLM's Triton
``_per_token_group_quant_fp8`` (read from ``quantization/utils/fp8_utils.py`` as the GEMM kernel is read from
``fused_moe.py``), and ``fused_moe_kernel`` launched with ``use_fp8_w8a8`` and ``group_n = group_k = 128``. Where that
file's kernel cannot be loaded, or the GPU has no fp8 (compute capability below 8.9), the fp8 rows are skipped with a
note; the bf16 rows are not affected.
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
# The fp8 arm's activation quantisation: per_token_group_quant_fp8's Triton kernel, row-major scales (fused_experts'
# _fp8_quantize asks for no transposed scales).
FP8_UTILS_FILE = "vllm/model_executor/layers/quantization/utils/fp8_utils.py"
QUANT_KERNEL_NAME = "_per_token_group_quant_fp8"

FP8_BLOCK = (128, 128)  # (N, K) of one weight block, DeepSeek-V3's weight_block_size; K is the activation group
FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # torch.finfo(float8_e4m3fn).max, get_fp8_min_max's bound on CUDA
FP8_EPS = 1e-10  # per_token_group_quant_fp8's default floor on a group's amax
FP8_CAPABILITY = (8, 9)  # Triton's fp8e4nv dot: Ada and newer
WEIGHTS_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp8": None}

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
    dtype: torch.dtype = torch.bfloat16  # activations (and unquantised weights)
    weights_dtype: str = "bf16"  # "fp8": e4m3 with a float32 scale per 128 x 128 block, activations per 128 (w8a8)

    def __post_init__(self):
        for name in ("experts", "hidden", "intermediate", "topk", "tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not 0 <= self.local_experts <= self.experts:
            raise ValueError(f"local_experts must lie in [0, experts], got {self.local_experts}")
        if self.dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise TypeError(f"dtype must be bfloat16, float16 or float32, got {self.dtype}")
        if self.weights_dtype not in WEIGHTS_DTYPES:
            raise ValueError(f"weights_dtype must be one of {', '.join(WEIGHTS_DTYPES)}, got {self.weights_dtype!r}")
        if self.weights_dtype != "fp8" and WEIGHTS_DTYPES[self.weights_dtype] != self.dtype:
            raise ValueError(f"weights_dtype {self.weights_dtype!r} (unquantised) must match dtype {self.dtype}")
        if self.fp8:  # both GEMMs' K is quantised in whole groups of FP8_BLOCK[1]
            for name in ("hidden", "intermediate"):
                if getattr(self, name) % FP8_BLOCK[1]:
                    raise ValueError(f"{name} must be a multiple of {FP8_BLOCK[1]} for fp8 weights, got "
                                     f"{getattr(self, name)}")

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
    def fp8(self) -> bool:
        return self.weights_dtype == "fp8"

    @property
    def weights_key(self) -> tuple:
        return (self.model, self.weight_experts, self.hidden, self.intermediate, self.dtype, self.weights_dtype)

    @property
    def label(self) -> str:
        ep = f" EP {self.local_experts} of {self.experts}" if self.local_experts else ""
        quant = " fp8 w8a8" if self.fp8 else ""
        return f"{self.model}{quant} ({self.experts} / {self.topk}, H {self.hidden}, N {self.intermediate}){ep}"


LAYER_MODELS = (
    dict(model="Moonlight", experts=64, hidden=2048, intermediate=1408, topk=6, scale=2.446),
    dict(model="Qwen3-30B-A3B", experts=128, hidden=2048, intermediate=768, topk=8, scoring="softmax", bias=False),
    dict(model="DeepSeek-V3", experts=256, hidden=7168, intermediate=2048, topk=8, groups=8, topk_group=4, scale=2.5),
    dict(model="DeepSeek-V3", experts=256, hidden=7168, intermediate=2048, topk=8, groups=8, topk_group=4, scale=2.5,
         local_experts=32),
)
# fp8 w8a8 with 128 x 128 weight blocks, as DeepSeek-V3 ships: the full model and the expert-parallel rank.
LAYER_FP8_MODELS = tuple(dict(model, weights_dtype="fp8") for model in LAYER_MODELS if model["model"] == "DeepSeek-V3")
LAYER_SHAPES = [LayerShape(tokens=t, **model) for model in LAYER_MODELS + LAYER_FP8_MODELS for t in LAYER_TOKENS]


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


def default_fp8_block_config(tokens: int, block_shape: tuple[int, int] = FP8_BLOCK) -> dict:
    """vLLM 0.33's default config for fp8 w8a8 weights in ``block_shape`` (N, K) blocks on CUDA
    (``get_default_config``'s block-quantised branch): ``BLOCK_SIZE_K`` the block's K, ``BLOCK_SIZE_N`` 64 up to 8
    tokens (where the block's N is a multiple of 64), else the block's N."""
    block_n, block_k = block_shape
    if tokens <= 8 and block_n % 64 == 0:
        tile_n, stages = 64, 4 if tokens <= 4 else 3
    else:
        tile_n, stages = block_n, 3
    return {"BLOCK_SIZE_M": 16 if tokens <= 64 else 64, "BLOCK_SIZE_N": tile_n, "BLOCK_SIZE_K": block_k,
            "GROUP_SIZE_M": 1 if tokens <= 16 else 32, "SPLIT_K": 1, "num_warps": 4, "num_stages": stages}


def config_folders(source_dir: str | Path) -> list[Path]:
    """Where vLLM looks for tuned configs, first found wins: ``VLLM_TUNED_CONFIG_FOLDER``, then its own
    ``configs/`` (``get_moe_configs``)."""
    folders = [Path(os.environ["VLLM_TUNED_CONFIG_FOLDER"])] if os.environ.get("VLLM_TUNED_CONFIG_FOLDER") else []
    return folders + [Path(source_dir) / CONFIGS_FOLDER]


def choose_config(tokens: int, weight_experts: int, intermediate: int, device_name: str,
                  folders: list[Path], weights_dtype: str = "bf16") -> tuple[dict, str]:
    """The fused-MoE kernel config vLLM 0.33 runs a layer with (``try_get_optimal_moe_config``): the tuned file's
    entry at the nearest token count, else the default rule. ``weights_dtype`` "fp8" reads the files of
    ``dtype=fp8_w8a8,block_shape=[128,128]`` and falls back on the block-quantised default. Returns (config, where
    it came from)."""
    if not isinstance(tokens, int) or tokens < 1:
        raise ValueError(f"tokens must be a positive int, got {tokens!r}")
    if weights_dtype not in WEIGHTS_DTYPES:
        raise ValueError(f"weights_dtype must be one of {', '.join(WEIGHTS_DTYPES)}, got {weights_dtype!r}")
    fp8 = weights_dtype == "fp8"
    name = config_file_name(weight_experts, intermediate, device_name, *(("fp8_w8a8", list(FP8_BLOCK)) if fp8 else ()))
    for folder in folders:
        path = Path(folder) / name
        if path.is_file():
            table = json.loads(path.read_text())
            table.pop("triton_version", None)
            configs = {int(key): value for key, value in table.items()}
            count = nearest_token_count(configs, tokens)
            return dict(configs[count]), f"{name} [{count}]"
    return (default_fp8_block_config(tokens) if fp8 else default_config(tokens, weight_experts)), "default"


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
        raise FileNotFoundError(f"{path} (--engine-source vllm=DIR: DIR must hold vLLM's vllm/ tree)")
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


_kernels: dict[tuple[str, str], object] = {}
_kernels_lock = threading.Lock()


def _vllm_source_dir(source_dir: str | Path | None) -> Path:
    if source_dir is not None:
        return Path(source_dir)
    from .arms import ENGINE_SOURCES

    if "vllm" not in ENGINE_SOURCES:
        raise ValueError("the moe-layer arms read vLLM's fused_moe.py: give --engine-source vllm=DIR")
    return Path(ENGINE_SOURCES["vllm"])


def _vllm_kernel(source_dir: str | Path | None, relative: str, name: str, module_name: str):
    """The ``@triton.jit`` function ``name`` of vLLM's file ``relative``, extracted once a process."""
    path = str((_vllm_source_dir(source_dir) / relative).resolve())
    with _kernels_lock:
        if (path, name) not in _kernels:
            _kernels[path, name] = extract_jit_functions(path, name, module_name)[name]
        return _kernels[path, name]


def vllm_fused_moe_kernel(source_dir: str | Path | None = None):
    """vLLM's ``fused_moe_kernel``: from ``source_dir`` (default ``ENGINE_SOURCES["vllm"]``), once a process."""
    return _vllm_kernel(source_dir, FUSED_MOE_FILE, KERNEL_NAME, "vllm_source_fused_moe")


def vllm_fp8_quant_kernel(source_dir: str | Path | None = None):
    """vLLM's ``_per_token_group_quant_fp8`` (``fp8_utils.py``): the fp8 arm's activation quantisation."""
    return _vllm_kernel(source_dir, FP8_UTILS_FILE, QUANT_KERNEL_NAME, "vllm_source_fp8_utils")


def load_fp8_quant(source_dir: str | Path | None, capability: tuple[int, int] | None = None):
    """(vLLM's activation quantisation kernel, None), or (None, why the fp8 rows are skipped): the file or the
    kernel missing from ``source_dir``, or a GPU of ``capability`` below ``FP8_CAPABILITY``. Never raises for
    those, so that the bf16 rows run regardless."""
    if capability is not None and tuple(capability) < FP8_CAPABILITY:
        return None, (f"fp8 w8a8 rows skipped: the GPU's compute capability {capability[0]}.{capability[1]} has no "
                      f"fp8 (needs {FP8_CAPABILITY[0]}.{FP8_CAPABILITY[1]} or newer)")
    try:
        return vllm_fp8_quant_kernel(source_dir), None
    except (OSError, SyntaxError, ValueError) as error:
        return None, (f"fp8 w8a8 rows skipped: vLLM's {QUANT_KERNEL_NAME} could not be loaded from "
                      f"{FP8_UTILS_FILE} ({type(error).__name__}: {str(error)[:200]})")


def _compute_type(dtype: torch.dtype):
    return {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}[dtype]


def vllm_swap_ab(config: dict, capability: tuple[int, int]) -> bool:
    """Whether vLLM 0.33 launches ``fused_moe_kernel`` for fp8 w8a8 with A and B swapped (``enable_swap_ab``):
    on compute capability 9.0 exactly, with ``BLOCK_SIZE_M`` < 64 and ``BLOCK_SIZE_N`` >= 64."""
    return tuple(capability) == (9, 0) and config["BLOCK_SIZE_M"] < 64 and config["BLOCK_SIZE_N"] >= 64


def launch_fused_moe(kernel, A, B, C, topk_weights, sorted_token_ids, expert_ids, num_tokens_post_padded,
                     mul_routed_weight: bool, top_k: int, config: dict, warmup: bool = False,
                     A_scale: torch.Tensor | None = None, B_scale: torch.Tensor | None = None,
                     swap_ab: bool = False):
    """``fused_moe_kernel`` launched as vLLM 0.33's ``invoke_fused_moe_triton_kernel`` launches it on CUDA without a
    bias or tensor descriptors: the same grid, arguments and meta-parameters. Unquantised weights without
    ``B_scale``; with it, fp8 w8a8 in ``FP8_BLOCK`` blocks: ``A`` e4m3 with ``A_scale`` [M, K/128] (one scale per
    token group), ``B`` e4m3 [E, N, K] with ``B_scale`` [E, N/128, K/128], ``BLOCK_SIZE_K`` at most the block's K,
    ``swap_ab`` as ``vllm_swap_ab`` decides. ``sorted_token_ids`` None: each (token, k) pair its own block.
    ``warmup``: compile only."""
    quantized = B_scale is not None
    if quantized:
        if A_scale is None or A.dtype != FP8_DTYPE or B.dtype != FP8_DTYPE:
            raise TypeError(f"fp8 w8a8: A and B must be {FP8_DTYPE} and A_scale given, got A {A.dtype}, B {B.dtype}, "
                            f"A_scale {None if A_scale is None else tuple(A_scale.shape)}")
        scale_shape = (B.size(0), triton.cdiv(B.size(1), FP8_BLOCK[0]), triton.cdiv(B.size(2), FP8_BLOCK[1]))
        if tuple(B_scale.shape) != scale_shape:
            raise ValueError(f"B_scale must be {list(scale_shape)} for B {list(B.shape)}, got {list(B_scale.shape)}")
        if A_scale.dim() != 2 or tuple(A_scale.shape) != (A.size(0), triton.cdiv(A.size(1), FP8_BLOCK[1])):
            raise ValueError(f"A_scale must be [{A.size(0)}, {triton.cdiv(A.size(1), FP8_BLOCK[1])}], got "
                             f"{list(A_scale.shape)}")
    elif A_scale is not None or swap_ab:
        raise ValueError("A_scale and swap_ab belong to fp8 w8a8 launches: give B_scale too")
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
    if quantized:  # one K tile never straddles two scale groups
        block_k = min(block_k, *FP8_BLOCK)
    grid = (triton.cdiv(em, block_m) * triton.cdiv(B.size(1), meta["BLOCK_SIZE_N"]),)
    if quantized:
        scale_strides = (A_scale.stride(0), A_scale.stride(1), B_scale.stride(0), B_scale.stride(2),
                         B_scale.stride(1) if B_scale.size(1) > 1 else 0)
        groups = FP8_BLOCK  # group_n, group_k
    else:
        scale_strides, groups = (0, 0, 0, 0, 0), (0, 0)
    arguments = (A, B, C, None, A_scale, B_scale, topk_weights, sorted_token_ids, expert_ids, num_tokens_post_padded,
                 B.size(1), B.size(2), em, num_valid,
                 A.stride(0), A.stride(1), B.stride(0), B.stride(2), B.stride(1), C.stride(1), C.stride(2),
                 *scale_strides,  # stride_asm, stride_ask, stride_bse, stride_bsk, stride_bsn
                 0, 0,  # bias strides: no bias
                 *groups)
    options = dict(MUL_ROUTED_WEIGHT=mul_routed_weight, top_k=top_k, compute_type=_compute_type(C.dtype),
                   use_fp8_w8a8=quantized, use_int8_w8a8=False, use_int8_w8a16=False, per_channel_quant=False,
                   naive_block_assignment=sorted_token_ids is None, HAS_BIAS=False, BLOCK_SIZE_K=block_k,
                   SWAP_AB=swap_ab, USE_TD=False, **meta)
    if warmup:
        return kernel.run(*arguments, grid=grid, warmup=True, **options)
    return kernel[grid](*arguments, **options)


def launch_group_quant(kernel, x: torch.Tensor, warmup: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [rows, cols] to e4m3 and float32 scales [rows, cols/128], one per token group of ``FP8_BLOCK[1]``, by
    vLLM's ``_per_token_group_quant_fp8`` launched as ``per_token_group_quant_fp8``'s Triton path launches it for
    ``fused_experts`` (row-major scales, no UE8M0 rounding, eps 1e-10, its warps and stages): the path vLLM takes
    where its CUDA op ``per_token_group_fp8_quant`` (the same scheme; a scale's last bit may round otherwise) is not
    built. ``warmup``: compile only (the outputs left unwritten)."""
    group = FP8_BLOCK[1]
    if x.dim() != 2 or x.size(1) % group or x.stride(1) != 1:
        raise ValueError(f"x must be [rows, a multiple of {group}] with contiguous rows, got {list(x.shape)} "
                         f"strides {x.stride()}")
    x_q = torch.empty(x.shape, device=x.device, dtype=FP8_DTYPE)
    x_s = torch.empty(x.size(0), x.size(1) // group, device=x.device, dtype=torch.float32)
    block = triton.next_power_of_2(group)
    grid = (x.size(0) * (x.size(1) // group),)
    arguments = (x, x_q, x_s, group, x.size(1), x.stride(0), FP8_EPS)
    options = dict(fp8_min=-FP8_MAX, fp8_max=FP8_MAX, use_ue8m0=False, BLOCK=block,
                   num_warps=min(max(block // 256, 1), 8), num_stages=1)
    if warmup:
        kernel.run(*arguments, grid=grid, warmup=True, **options)
    else:
        kernel[grid](*arguments, **options)
    return x_q, x_s


def quantize_groups(x: torch.Tensor, group: int = FP8_BLOCK[1], eps: float = FP8_EPS):
    """The arithmetic of vLLM's ``_per_token_group_quant_fp8`` in PyTorch (the reference's, and the kernel's yardstick):
    ``x`` [rows, cols] per group of ``group`` columns, scale = max(amax, eps) * (1 / 448), x / scale clamped to ±448
    and rounded to e4m3. Returns (e4m3 [rows, cols], float32 scales [rows, cols / group])."""
    if x.dim() != 2 or x.size(1) % group:
        raise ValueError(f"x must be [rows, a multiple of {group}], got {list(x.shape)}")
    grouped = x.float().reshape(x.size(0), -1, group)
    scale = grouped.abs().amax(dim=-1, keepdim=True).clamp_min(eps) * (1.0 / FP8_MAX)
    quantized = (grouped / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return quantized.reshape(x.shape), scale.squeeze(-1)


def quantize_weight_blocks(weight: torch.Tensor, block: tuple[int, int] = FP8_BLOCK):
    """Weights [..., N, K] to e4m3 with one float32 scale per (N, K) ``block``: scale = the block's amax / 448 (the
    amax floored at float32's smallest normal, so that a zero block stays zero), weight / scale rounded to e4m3.
    Deterministic: the same weights give the same bytes. One leading index at a time, to bound the float32
    temporaries. ValueError unless N and K are multiples of the block's."""
    if weight.dim() < 2:
        raise ValueError(f"weight must be [..., N, K], got {list(weight.shape)}")
    rows, cols = weight.shape[-2:]
    if rows % block[0] or cols % block[1]:
        raise ValueError(f"weight's last two dimensions {rows} x {cols} must be multiples of the block {block[0]} x "
                         f"{block[1]}")
    flat = weight.reshape(-1, rows, cols)
    q = torch.empty(flat.shape, device=weight.device, dtype=FP8_DTYPE)
    scales = torch.empty(flat.size(0), rows // block[0], cols // block[1], device=weight.device, dtype=torch.float32)
    tiny = torch.finfo(torch.float32).tiny
    for i in range(flat.size(0)):
        blocks = flat[i].float().reshape(rows // block[0], block[0], cols // block[1], block[1])
        scale = blocks.abs().amax(dim=(1, 3), keepdim=True).clamp_min(tiny) / FP8_MAX
        q[i] = (blocks / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE).reshape(rows, cols)
        scales[i] = scale.reshape(rows // block[0], cols // block[1])
    return q.reshape(weight.shape), scales.reshape(*weight.shape[:-2], rows // block[0], cols // block[1])


def dequantize_weight_blocks(q: torch.Tensor, scales: torch.Tensor, block: tuple[int, int] = FP8_BLOCK):
    """Block-quantised weights [..., N, K] back to float32: each block times its scale."""
    expanded = scales.repeat_interleave(block[0], dim=-2).repeat_interleave(block[1], dim=-1)
    return q.float() * expanded[..., : q.size(-2), : q.size(-1)]


def silu_and_mul(gate_up: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """SiLU(gate) * up of [rows, 2N] into ``out`` [rows, N], in float32 with one rounding (both arms alike)."""
    n = out.shape[-1]
    gate, up = gate_up[:, :n].float(), gate_up[:, n:].float()
    return out.copy_(torch.nn.functional.silu(gate) * up)


def run_experts(kernel, hidden, w13, w2, topk_weights, sorted_token_ids, expert_ids, num_tokens_post_padded,
                config: dict, mapped: bool, warmup: bool = False, w13_scale: torch.Tensor | None = None,
                w2_scale: torch.Tensor | None = None, quantize: Callable | None = None,
                swap_ab: bool = False) -> torch.Tensor:
    """The rest of vLLM 0.33's ``fused_experts_impl`` after the plan: its buffers (allocated per call, the GEMM1 and
    GEMM2 outputs sharing one), GEMM1, SiLU-and-mul, the GEMM2 output zeroed under expert parallelism, GEMM2 with
    the routed weights multiplied in, the sum over the K experts. fp8 w8a8 (``w13_scale`` and ``w2_scale`` given,
    ``w13`` and ``w2`` e4m3): each GEMM's input quantised first by ``quantize(x, warmup)`` -> (e4m3, scales per
    token group), as its ``moe_kernel_quantize_input`` does. ``warmup``: compile the launches only."""
    quantized = w13_scale is not None
    if quantized and (w2_scale is None or quantize is None):
        raise ValueError("fp8 w8a8 needs w13_scale, w2_scale and quantize together")
    tokens, topk = topk_weights.shape
    intermediate2, hidden_size = w13.size(1), w2.size(1)
    shared = torch.empty(tokens * topk * max(intermediate2, hidden_size), device=hidden.device, dtype=hidden.dtype)
    gemm1_out = shared[: tokens * topk * intermediate2].view(tokens, topk, intermediate2)
    gemm2_out = shared[: tokens * topk * hidden_size].view(tokens, topk, hidden_size)
    activated = torch.empty(tokens * topk, intermediate2 // 2, device=hidden.device, dtype=hidden.dtype)
    out = torch.empty_like(hidden)
    fp8 = dict(swap_ab=swap_ab) if quantized else {}
    gemm1_in, gemm1_scale = quantize(hidden, warmup) if quantized else (hidden, None)
    launch_fused_moe(kernel, gemm1_in, w13, gemm1_out, topk_weights, sorted_token_ids, expert_ids,
                     num_tokens_post_padded, False, topk, config, warmup, A_scale=gemm1_scale, B_scale=w13_scale, **fp8)
    if not warmup:
        silu_and_mul(gemm1_out.view(-1, intermediate2), activated)
    gemm2_in, gemm2_scale = quantize(activated, warmup) if quantized else (activated, None)
    if mapped and not warmup:
        gemm2_out.zero_()
    launch_fused_moe(kernel, gemm2_in, w2, gemm2_out, topk_weights, sorted_token_ids, expert_ids,
                     num_tokens_post_padded, True, 1, config, warmup, A_scale=gemm2_scale, B_scale=w2_scale, **fp8)
    if not warmup:
        torch.sum(gemm2_out, dim=1, out=out)
    return out


def reference_layer(hidden, w13, w2, weights, ids, expert_map=None, w13_scale=None, w2_scale=None) -> torch.Tensor:
    """The layer in float32, expert by expert: the yardstick both arms' outputs are measured against. fp8 w8a8
    (``w13_scale`` and ``w2_scale`` given): the weights dequantised block by block and each GEMM's input quantised
    per token group and dequantised (``quantize_groups``), the rest in float32, except that GEMM1's output and the
    SiLU-and-mul output are rounded to ``hidden``'s dtype first, as the layer's buffers round them: a rounding
    there can move a value across an e4m3 step, which would count as error what is the quantisation's."""
    quantized = w13_scale is not None
    if quantized and w2_scale is None:
        raise ValueError("fp8 w8a8 needs w13_scale and w2_scale together")

    def activations(x):
        if not quantized:
            return x
        q, scale = quantize_groups(x.to(hidden.dtype))
        return q.float() * scale.repeat_interleave(FP8_BLOCK[1], dim=1)

    def weight(w, scale, expert):
        return w[expert].float() if not quantized else dequantize_weight_blocks(w[expert], scale[expert])

    hidden32 = activations(hidden.float())
    out = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device)
    local = ids.long() if expert_map is None else expert_map[ids.long()].long()
    n = w13.size(1) // 2
    for expert in torch.unique(local[local >= 0]).tolist():
        rows, slots = (local == expert).nonzero(as_tuple=True)
        gate_up = hidden32[rows] @ weight(w13, w13_scale, expert).T
        if quantized:
            gate_up = gate_up.to(hidden.dtype).float()
        activated = activations(torch.nn.functional.silu(gate_up[:, :n]) * gate_up[:, n:])
        out.index_add_(0, rows, (activated @ weight(w2, w2_scale, expert).T) * weights[rows, slots, None].float())
    return out


# --- the arms -------------------------------------------------------------------------------------------------------

@dataclass
class ExpertWeights:
    """A model's expert weights as one rank holds them: w13 [E_local, 2N, H], w2 [E_local, H, N], random and
    scaled so that every activation stays of order one; for fp8 w8a8, e4m3 with their block scales."""

    w13: torch.Tensor
    w2: torch.Tensor
    w13_scale: torch.Tensor | None = None  # fp8: float32 [E_local, 2N/128, H/128]
    w2_scale: torch.Tensor | None = None  # fp8: float32 [E_local, H/128, N/128]

    @property
    def scales(self) -> dict:
        """run_experts' and reference_layer's scale arguments (none for unquantised weights)."""
        return {} if self.w13_scale is None else {"w13_scale": self.w13_scale, "w2_scale": self.w2_scale}

    @staticmethod
    def random(shape: LayerShape, device: str = "cuda", seed: int = 1) -> ExpertWeights:
        """The shape's weights; an fp8 shape's are its unquantised twin's (the same draws), block-quantised one
        tensor at a time (each unquantised tensor freed before the next is drawn, so that the peak stays near the
        unquantised weights' size)."""
        gen = torch.Generator(device=device).manual_seed(seed)

        def draw(rows, cols):
            weight = torch.randn(shape.weight_experts, rows, cols, generator=gen, device=device, dtype=shape.dtype)
            weight.mul_(cols ** -0.5)
            return quantize_weight_blocks(weight) if shape.fp8 else (weight, None)

        w13, w13_scale = draw(2 * shape.intermediate, shape.hidden)
        w2, w2_scale = draw(shape.hidden, shape.intermediate)
        return ExpertWeights(w13, w2, w13_scale, w2_scale)

    @staticmethod
    def empty(shape: LayerShape, device: str = "cuda") -> ExpertWeights:
        """Weights of the shape's sizes, dtypes and strides, not filled: what a compile needs."""
        dtype = FP8_DTYPE if shape.fp8 else shape.dtype
        e, n, h = shape.weight_experts, shape.intermediate, shape.hidden
        weights = ExpertWeights(torch.empty(e, 2 * n, h, device=device, dtype=dtype),
                                torch.empty(e, h, n, device=device, dtype=dtype))
        if shape.fp8:
            bn, bk = FP8_BLOCK
            weights.w13_scale = torch.empty(e, 2 * n // bn, h // bk, device=device, dtype=torch.float32)
            weights.w2_scale = torch.empty(e, h // bn, n // bk, device=device, dtype=torch.float32)
        return weights


@dataclass
class Layer:
    """One shape's two layer arms and their routing stages, over rotating input sets (logits and hidden states)."""

    shape: LayerShape
    weights: ExpertWeights
    kernel: object
    config: dict
    config_source: str
    quant_kernel: object = None  # fp8: vLLM's _per_token_group_quant_fp8
    swap_ab: bool = False  # fp8: vllm_swap_ab's choice for this config and GPU
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
                           self.shape.mapped, **fp8_arguments(self.weights, self.quant_kernel, self.swap_ab))

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
                                       self.stage.map, **self.weights.scales)
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


def fp8_arguments(weights: ExpertWeights, quant_kernel, swap_ab: bool) -> dict:
    """run_experts' fp8 w8a8 arguments for ``weights`` (none for unquantised weights): the block scales, vLLM's
    activation quantisation, swap-AB."""
    if weights.w13_scale is None:
        return {}
    if quant_kernel is None:
        raise ValueError("fp8 weights need quant_kernel (vLLM's _per_token_group_quant_fp8)")
    return dict(weights.scales, swap_ab=swap_ab,
                quantize=lambda x, warmup=False: launch_group_quant(quant_kernel, x, warmup))


def gemm_warmups(shape: LayerShape, weights: ExpertWeights, kernel, config: dict, quant_kernel=None,
                 swap_ab: bool = False) -> list[Callable[[], object]]:
    """Compile-only calls of every GEMM launch the two layer arms make for ``shape`` (the buffers of the real calls'
    shapes, dtypes and alignment; for fp8, the activation quantisation's too), so that they compile in parallel
    before anything is timed."""
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
    fp8 = fp8_arguments(weights, quant_kernel, swap_ab)
    return [lambda plan=plan: run_experts(kernel, hidden, weights.w13, weights.w2, topk_weights, *plan, config,
                                          shape.mapped, warmup=True, **fp8) for plan in variants]


# --- the runner -----------------------------------------------------------------------------------------------------

def _fields(shape: LayerShape) -> dict:
    """A result row's shape fields (the suite's, so its tables and plot read them, and the layer's own)."""
    return {"experts": shape.experts, "topk": shape.topk, "groups": shape.groups, "topk_group": shape.topk_group,
            "tokens": shape.tokens, "scoring": shape.scoring, "bias": shape.bias, "bias_shift": 0.0,
            "dtype": str(shape.dtype).removeprefix("torch."), "local_experts": shape.local_experts,
            "label": shape.label, "layer": True, "model": shape.model, "hidden": shape.hidden,
            "intermediate": shape.intermediate, "weights_dtype": shape.weights_dtype,
            "block_shape": list(FP8_BLOCK) if shape.fp8 else None}


class LayerBench:
    """Measures the ``moe-layer`` shapes one at a time, holding one model's expert weights at a time. Made, it starts
    building vLLM's CUDA routing ops in a background thread (a ninja build the first time) and compiles every GEMM
    launch of the shapes meanwhile. fp8 shapes run where vLLM's activation quantisation loads (``load_fp8_quant``),
    else each gives a note and no rows."""

    def __init__(self, shapes: list[LayerShape], rounds: int, calls_per_graph: int, replays: int,
                 threads: int = 16):
        from .arms import ENGINE_SOURCES, _vllm_op

        self.shapes, self.rounds, self.calls_per_graph, self.replays = shapes, rounds, calls_per_graph, replays
        self.threads = threads
        self.kernel = vllm_fused_moe_kernel()
        self.device_name = torch.cuda.get_device_name()
        self.capability = torch.cuda.get_device_capability()
        self.folders = config_folders(ENGINE_SOURCES["vllm"])
        self.quant_kernel, self.fp8_note = None, None
        if any(shape.fp8 for shape in shapes):
            self.quant_kernel, self.fp8_note = load_fp8_quant(ENGINE_SOURCES["vllm"], self.capability)
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
        return choose_config(shape.tokens, shape.weight_experts, shape.intermediate, self.device_name, self.folders,
                             shape.weights_dtype)

    def swap_ab(self, shape: LayerShape, config: dict) -> bool:
        return shape.fp8 and vllm_swap_ab(config, self.capability)

    def skip_note(self, shape: LayerShape) -> str | None:
        """Why ``shape`` is not measured (an fp8 shape without vLLM's quantisation kernel), or None."""
        return self.fp8_note if shape.fp8 else None

    def compile_ahead(self) -> None:
        """Compile every GEMM launch of every shape, in parallel, one model at a time (its weights allocated, not
        filled: only their shapes, strides and alignment reach the compiler)."""
        measured = [s for s in self.shapes if self.skip_note(s) is None]
        for key in dict.fromkeys(s.weights_key for s in measured):
            shapes = [s for s in measured if s.weights_key == key]
            weights = ExpertWeights.empty(shapes[0])
            warmups = []
            for shape in shapes:
                config = self.config(shape)[0]
                warmups += gemm_warmups(shape, weights, self.kernel, config, self.quant_kernel,
                                        self.swap_ab(shape, config))
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
        """The shape's rows (one per arm: device time per call under graph replay over the rounds) and notes; no
        rows and the reason where the shape is skipped."""
        note = self.skip_note(shape)
        if note is not None:
            return [], [note]
        self._hold_weights(shape)
        self.builder.join()
        if self.build_error:
            raise RuntimeError(f"vLLM's CUDA routing ops: {self.build_error[0]}") from self.build_error[0]
        config, source = self.config(shape)
        swap_ab = self.swap_ab(shape, config)
        layer = Layer(shape, self.weights, self.kernel, config, source, self.quant_kernel if shape.fp8 else None,
                      swap_ab)
        agreement = layer.agreement()
        sets = len(layer.inputs.logits)
        results = {name: Measurement(name, shape.routing, [], []) for name in layer.calls}
        per_graph = {name: layer.calls_per_graph(name, self.calls_per_graph) for name in layer.calls}
        for _ in range(self.rounds):
            for name, call in layer.calls.items():
                times = graph_time_us(call, sets, per_graph[name], self.replays)
                results[name].device_us.append(statistics.median(times))
        common = {**_fields(shape), "config": source, "config_values": config, "block_size_m": layer.block_size,
                  "vllm_blocks": "per-pair" if layer.per_pair else "align", "swap_ab": swap_ab, **agreement}
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

    fp8_rows = any(row.get("weights_dtype") == "fp8" for row in index.values())

    def cell(row):
        return f"{row['device_median']:.2f} ±{100 * row['device_drift']:.0f}%"

    lines = ["", "One MoE layer end to end (vLLM's fused_moe_kernel GEMMs after each routing stage), device time (µs "
             "per call under graph replay, median ± drift); layer saving = vLLM layer − ours, stage saving = vLLM "
             "stage − ours, ratio = layer saving / stage saving, share = stage / layer (vLLM's, ours); experts used: "
             "the held experts with at least one slot (set 0); the layer arms capture fewer calls per graph "
             "(bench.json: calls_per_graph)" + (
                 "; fp8 w8a8 rows: e4m3 weights in 128 x 128 blocks, activations quantised per token group of 128 "
                 "by vLLM's Triton kernel, their error against the float32 layer on the dequantised weights and "
                 "the activations quantised as that kernel does" if fp8_rows else "") + ":", "",
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
