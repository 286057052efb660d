"""A launch as Triton sees it for a named GPU, without that GPU: its cache key and its compiled binary.

Triton specialises a kernel on its arguments (dtypes, 16-byte alignment of pointers, integers equal to 1 or
divisible by 16) and keys its in-memory cache on that specialisation and the options. This module binds a plan's
arguments (``launch.triton_arguments``, the ones a launch passes) with the binder Triton builds for a target's
backend, so that

* ``cache_key`` gives the key a launch on that target would look up (warm-up's tests compare the keys a sweep
  of route() calls asks for with the keys warm-up compiled), and
* ``compile_plan`` compiles the plan for that target on any machine: ``sm_90`` (H100 / H200), ``gfx942`` (MI300X)
  and ``gfx950`` (MI355X) on a CPU-only host, where ``moe-routing compile-check`` reads each binary's registers
  and spills (``nvidia_resources``, ``amd_resources``).

It uses Triton's binder and compiler entry points as Triton 3.6 lays them out (``create_function_from_signature``,
``JITFunction._pack_args``, ``compute_cache_key``), the path ``JITFunction.run`` itself takes.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile

from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.compiler import compile as triton_compile
from triton.runtime.jit import JITFunction, compute_cache_key, create_function_from_signature

# name -> target; the NVIDIA one is what the H200 reports, the AMD ones are MI300X / MI325X and MI350X / MI355X
TARGETS = {
    "sm_90": GPUTarget("cuda", 90, 32),
    "gfx942": GPUTarget("hip", "gfx942", 64),
    "gfx950": GPUTarget("hip", "gfx950", 64),
}

_jit_functions: dict[int, JITFunction] = {}  # id(kernel) -> a JITFunction of its Python function
_binders: dict[tuple, tuple] = {}  # (id(kernel), target) -> (JITFunction, backend, binder)


def _jit(kernel) -> JITFunction:
    """``kernel`` as a JITFunction: itself, or (an interpreted kernel, under TRITON_INTERPRET=1) one made from its
    Python function with the same specialisation options."""
    if isinstance(kernel, JITFunction):
        return kernel
    jit = _jit_functions.get(id(kernel))
    if jit is None:
        jit = _jit_functions[id(kernel)] = JITFunction(kernel.fn, **kernel.kwargs)
    return jit


def _binder(kernel, target: GPUTarget):
    key = (id(kernel), target)
    if key not in _binders:
        jit = _jit(kernel)
        backend = make_backend(target)
        _binders[key] = jit, backend, create_function_from_signature(jit.signature, jit.params, backend)
    return _binders[key]


def _bind(kernel, target: GPUTarget, args: tuple, kwargs: dict):
    jit, backend, binder = _binder(kernel, target)
    bound, specialization, options = binder(*args, **kwargs)
    return jit, backend, bound, specialization, options


def cache_key(kernel, target: GPUTarget, args: tuple, kwargs: dict) -> str:
    """The key of Triton's in-memory cache that running ``kernel(*args, **kwargs)`` on ``target`` looks up: two
    launches with the same key run the same binary, a new key is a compile."""
    _, _, _, specialization, options = _bind(kernel, target, args, kwargs)
    return compute_cache_key({}, specialization, options)


def compile_plan(kernel, target: GPUTarget, args: tuple, kwargs: dict):
    """Compile ``kernel`` for ``target`` as a launch with these arguments would (Triton's on-disk cache is used
    and filled as usual); returns Triton's CompiledKernel (``.asm`` holds each stage's text)."""
    jit, backend, bound, specialization, options = _bind(kernel, target, args, kwargs)
    options, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound, specialization, options)
    return triton_compile(ASTSource(jit, signature, constexprs, attrs), target=target, options=options.__dict__)


_AMD_COUNTS = {
    "vgpr_spill_count": re.compile(r"\.vgpr_spill_count:\s*(\d+)"),
    "sgpr_spill_count": re.compile(r"\.sgpr_spill_count:\s*(\d+)"),
    "scratch_bytes": re.compile(r";\s*ScratchSize:\s*(\d+)"),
    "vgprs": re.compile(r"\.vgpr_count:\s*(\d+)"),
    "sgprs": re.compile(r"\.sgpr_count:\s*(\d+)"),
}


def amd_resources(compiled) -> dict[str, int]:
    """Registers, register spills and scratch (private memory) bytes of an AMD binary, read from its amdgcn
    assembly (the largest value where the assembly names several functions)."""
    return _largest_counts(compiled.asm["amdgcn"], _AMD_COUNTS, "the amdgcn assembly (has Triton's output format "
                           "changed?)")


_PTXAS_COUNTS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
    "stack_bytes": re.compile(r"(\d+) bytes stack frame"),
}


def nvidia_resources(compiled) -> dict[str, int]:
    """Registers, spill stores and loads and the stack frame (bytes) of an NVIDIA binary: its PTX assembled again by
    the ``ptxas`` Triton used, for the architecture Triton named (its own helpers), with ``-v`` (Triton keeps the
    binary, not that report; the PTX carries the kernel's register cap). A fraction of a second a kernel."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability  # (absent from ROCm builds)

    arch = compiled.metadata.target.arch
    with tempfile.TemporaryDirectory() as folder:
        source = os.path.join(folder, "kernel.ptx")
        with open(source, "w") as f:
            f.write(compiled.asm["ptx"])
        done = subprocess.run([get_ptxas(arch).path, "-v", f"--gpu-name={sm_arch_from_capability(arch)}", source,
                               "-o", os.path.join(folder, "kernel.cubin")], capture_output=True, text=True, check=True)
    return ptxas_counts(done.stdout + done.stderr)


def ptxas_counts(text: str) -> dict[str, int]:
    """``nvidia_resources``'s read-out of ``ptxas -v`` text (the largest value where it names several functions)."""
    return _largest_counts(text, _PTXAS_COUNTS, "ptxas's report (has its output format changed?)")


def _largest_counts(text: str, patterns: dict, source: str) -> dict[str, int]:
    """Each pattern's largest number in ``text``; a ValueError naming ``source`` where one is missing."""
    found = {}
    for name, pattern in patterns.items():
        values = [int(v) for v in pattern.findall(text)]
        if not values:
            raise ValueError(f"no {name} in {source}")
        found[name] = max(values)
    return found
