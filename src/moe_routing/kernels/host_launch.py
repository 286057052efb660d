"""The C++ host path of ``route()`` (host_launch.cpp): built on first use, fed by the Python path.

Why: in eager mode the host time of every call is paid on every layer of every token, and the Python
path (validation, the launcher cache's key, Triton's C launcher) costs more than one ATen op. The
extension does the same work in one C++ call: it *accepts* a call only when ``call.check_call`` would
accept it with the same normalised call, and launches only a kernel binary that the Python path
registered for the same key (the fields of ``launch``'s launcher cache key); everything else, every
invalid call included, is *declined* and takes the Python path, which raises the documented errors.

Lifecycle: the first launch on a CUDA device builds the extension with ``torch.utils.cpp_extension``
(once per machine and source version, cached in torch's extensions folder: 15 s on the 2-core
development machine, 19 s on the H200 host; a C++ compiler is needed, and ninja, which the ``ninja``
package provides) and hands ``route`` its entry point. Each plan the Python path then launches through
its direct launcher is registered here. Set ``MOE_ROUTING_HOST_LAUNCH=0`` to keep every call
in Python. Not used on ROCm (the extension calls the CUDA driver) nor in Triton's interpreter.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import warnings
from pathlib import Path

import torch

from ..call import MAX_EXPERTS, MAX_GROUPS, MAX_TOPK, SQRTSOFTPLUS, RoutingCall

SOURCE = Path(__file__).with_name("host_launch.cpp")
ENV_SWITCH = "MOE_ROUTING_HOST_LAUNCH"

# The kernels' runtime arguments (kernels/_bitonic.py, _rounds.py), in the codes of host_launch.cpp's
# ``Param``, with the Triton signature type each must have for the C++ launch to pass it correctly.
PARAMS = {
    "logits_ptr": (0, "*"), "bias_ptr": (1, "*"), "stride_l_row": (2, "i32"), "weights_ptr": (3, "*"),
    "ids_ptr": (4, "*"), "stride_w_row": (5, "i32"), "stride_w_col": (6, "i32"), "stride_i_row": (7, "i32"),
    "stride_i_col": (8, "i32"), "num_rows": (9, "i32"), "scale": (10, "fp32"),
}

_module = None
_load_failed = False
_load_lock = threading.Lock()
_listeners = []  # called with the extension's ``route`` once it is loaded (op.use_host_route)


def on_load(listener) -> None:
    """Call ``listener(entry)`` with the C++ entry point once the extension is loaded (at once if it is)."""
    _listeners.append(listener)
    if _module is not None:
        listener(_module.route)


def loaded():
    """The extension module if it was built and loaded in this process, else None."""
    return _module


def enabled_by_environment() -> bool:
    return os.environ.get(ENV_SWITCH, "1") != "0"


def load(require_driver: bool = True):
    """The extension module, built on first use; None where it cannot be built or, with
    ``require_driver``, where libcuda cannot be opened (a warning says why, once). Thread-safe: a warmup's
    build thread (the vLLM plugin starts one at model load) and the first launches may ask at once; one builds
    while the others wait for it."""
    if _module is not None or _load_failed:
        return _module
    with _load_lock:
        return _load(require_driver)


def _load(require_driver: bool):
    global _module, _load_failed
    if _module is not None or _load_failed:
        return _module
    from .rules import TOKEN_CLASS_STARTS

    try:
        from torch.utils.cpp_extension import load as build

        with _ninja_on_path():
            module = build(name="moe_routing_host_launch", sources=[str(SOURCE)], extra_cflags=["-O2"],
                           verbose=False)
    except Exception as error:  # no compiler, no ninja, a read-only cache: the Python path stays
        _load_failed = True
        warnings.warn(f"moe_routing: the C++ host path could not be built ({error!r}); route() keeps its "
                      f"Python launch path (set {ENV_SWITCH}=0 to skip the attempt)", RuntimeWarning, stacklevel=2)
        return None
    if not module.open_driver() and require_driver:
        _load_failed = True
        return None
    import triton

    raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    current_device = getattr(torch._C, "_cuda_getDevice", None)
    module.configure(MAX_EXPERTS, MAX_TOPK, MAX_GROUPS, TOKEN_CLASS_STARTS,
                     raw_stream or _no_cuda, current_device or _no_cuda, triton.knobs.runtime)
    _module = module
    for listener in _listeners:
        listener(module.route)
    return module


@contextlib.contextmanager
def _ninja_on_path():
    """torch builds with the ``ninja`` found on PATH; where there is none (a virtualenv used without
    activating it), the one the ``ninja`` package installed (a dependency) is put first while building."""
    path = os.environ.get("PATH", "")
    if shutil.which("ninja") is None:
        try:
            import ninja

            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + path
        except ImportError:
            pass
    try:
        yield
    finally:
        os.environ["PATH"] = path


def _no_cuda(*args):  # torch without CUDA: never reached by route() (it declines CPU tensors first)
    raise RuntimeError("torch has no CUDA")


def param_codes(compiled) -> tuple[int, ...] | None:
    """The compiled kernel's runtime arguments as Param codes, in order; None if any is not one the
    C++ launch knows with the type it passes (then the kernel is not registered)."""
    signature = getattr(getattr(compiled, "src", None), "signature", None)
    if not isinstance(signature, dict):
        return None
    codes = []
    for name, kind in signature.items():
        if kind == "constexpr":
            continue
        code, expected = PARAMS.get(name, (None, None))
        if code is None or not (kind.startswith("*") if expected == "*" else kind == expected):
            return None
        codes.append(code)
    return tuple(codes)


def register(call: RoutingCall, logits, bias, weights, ids, compiled, rows: int) -> tuple | None:
    """Register a kernel the Python path just launched for this call; returns the C++ key, or None where
    the kernel or the call cannot take the C++ path."""
    module = _module
    metadata = getattr(compiled, "metadata", None)
    params = param_codes(compiled)
    if (module is None or params is None or getattr(metadata, "num_ctas", 1) != 1
            or getattr(metadata, "launch_cooperative_grid", False) or call.scoring == SQRTSOFTPLUS):
        return None  # cooperative launches stay with Triton's launcher; the C++ side knows two scorings
    scoring = "softmax" if call.softmax else "sigmoid"
    return module.register(logits, call.topk, scoring, bias, call.num_groups, call.topk_group, call.renormalize,
                           call.scale, (weights, ids), compiled.function, metadata.num_warps, metadata.shared,
                           rows, params, bool(getattr(metadata, "launch_pdl", False)))
