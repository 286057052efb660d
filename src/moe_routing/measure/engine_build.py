"""Engine routing kernels built from the engine's own source tree, for the benchmark (``--engine-source``).

vLLM's CUDA routing ops live in ``csrc/moe/`` of its source distribution. Where vLLM is not installed (the GPU
machine has no engine package), ``vllm_cuda_ops`` compiles those files from the user's directory, read at run
time, with a small host wrapper of ours (``engine_ops/vllm_routing_ops.cpp``: registers vLLM's entry points under
``torch.ops.moe_routing_vllm`` with vLLM's schemas), through ``torch.utils.cpp_extension`` (nvcc and ninja), for
the GPU present. The ops are vLLM's as its wheel builds them: the same sources, ``-O3``, the stable-ABI target
vLLM 0.33 sets (torch 2.11), ``USE_CUDA``.
"""

from __future__ import annotations

from pathlib import Path

import torch

# vLLM's CUDA routing kernels: fused_grouped_topk's, fused_topk's / fused_topk_bias's, DeepSeek-V4's, and the
# dispatch plan's moe_align_block_size (with the other ops of its file)
VLLM_SOURCES = ("csrc/moe/grouped_topk_kernels.cu", "csrc/moe/topk_softmax_kernels.cu",
                "csrc/moe/topk_softplus_sqrt_kernels.cu", "csrc/moe/moe_align_sum_kernels.cu")
WRAPPER = Path(__file__).parent / "engine_ops" / "vllm_routing_ops.cpp"
_TORCH_TARGET = "-DTORCH_TARGET_VERSION=0x020B000000000000ULL"  # as vLLM 0.33's CMakeLists sets for _moe_C

_built: dict[str, object] = {}  # source dir -> torch.ops.moe_routing_vllm


def vllm_cuda_ops(source_dir: str | Path):
    """``torch.ops.moe_routing_vllm`` with vLLM's ``grouped_topk``, ``topk_softmax``, ``topk_sigmoid``,
    ``topk_softplus_sqrt`` and ``moe_align_block_size``, compiled from ``source_dir`` (vLLM's unpacked source distribution: it holds ``csrc/``)
    once a process (ninja keeps the objects in torch's extension cache, so a later process links them only)."""
    root = Path(source_dir)
    key = str(root.resolve())
    if key in _built:
        return _built[key]
    missing = [s for s in VLLM_SOURCES + ("csrc/moe/moe_ops.h",) if not (root / s).is_file()]
    if missing:
        raise FileNotFoundError(f"{root}: no {', '.join(missing)} (--engine-source vllm=DIR: DIR is vLLM's unpacked "
                                "source distribution, vllm-0.33.0/)")
    from torch.utils.cpp_extension import load

    from ..kernels.host_launch import _ninja_on_path

    major, minor = torch.cuda.get_device_capability()
    arch = f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}"
    flags = ["-O3", "-DUSE_CUDA", _TORCH_TARGET]
    # torch's extension builds define these; vLLM's own build does not, and its kernels use the operators
    cuda_flags = [f"-U__CUDA_NO_{name}__" for name in ("HALF_OPERATORS", "HALF_CONVERSIONS", "BFLOAT16_CONVERSIONS",
                                                       "HALF2_OPERATORS")]
    with _ninja_on_path():
        load(name="moe_routing_vllm_ops", sources=[str(WRAPPER)] + [str(root / s) for s in VLLM_SOURCES],
             extra_include_paths=[str(root / "csrc")], extra_cflags=flags,
             extra_cuda_cflags=flags + cuda_flags + [arch, "--expt-relaxed-constexpr"], is_python_module=False, verbose=False)
    _built[key] = torch.ops.moe_routing_vllm
    return _built[key]
