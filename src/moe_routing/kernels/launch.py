"""The launch: a call's plan (rules.py) run on its tensors with as little host time as possible.

Triton's ``kernel[grid](...)`` re-derives the specialisation of every argument in Python on each call (tens of
µs of host time for these kernels). The first call of a plan goes through it once; afterwards the compiled
kernel's own C launcher is called directly, from a cache keyed by everything Triton specialises on (dtypes,
constexprs, 16-byte alignment of the logits and bias pointers, the row stride's divisibility), so the cached
binary is always the one Triton itself would have chosen. The same first call registers the binary with the
C++ host path (host_launch.py), which serves later eager calls of that key before any of this Python runs.
Calls take Triton's own path whenever a launch hook is installed (profilers), on ROCm, and in the interpreter.
On NVIDIA GPUs of compute capability 9.0 and later the rule's plans are launched with programmatic dependent
launch (``with_device``).
"""

from __future__ import annotations

import os

import torch
import triton

from ..call import RoutingCall
from . import host_launch
from ._common import log2
from ._hash import hash_kernel
from .rules import ON_ROCM, Plan, choose_plan, tensor_traits, token_class

# MOE_ROUTING_PDL=0 launches every kernel without programmatic dependent launch (read once, at import)
PDL_ENV_SWITCH = "MOE_ROUTING_PDL"
_PDL_ENABLED = os.environ.get(PDL_ENV_SWITCH, "1") != "0"  # ``programmatic_launch_ok``


def dense_outputs(weights: torch.Tensor, ids: torch.Tensor, topk: int) -> bool:
    """Whether both outputs are [T, K] with strides (K, 1) and 16-byte aligned, so that a bitonic plan may store them
    with the layout compiled in (``DENSE_OUT``: vector stores). What ``route()`` allocates always is; an
    ``out=`` pair usually is. Plans are keyed on it (``launcher_key``; host_launch.cpp's key likewise)."""
    return _dense(weights.stride(), ids.stride(), weights.data_ptr(), ids.data_ptr(), topk)


def _dense(weights_stride: tuple, ids_stride: tuple, weights_ptr: int, ids_ptr: int, topk: int) -> bool:
    return weights_stride == ids_stride == (topk, 1) and (weights_ptr | ids_ptr) & 15 == 0


def with_outputs(plan: Plan, dense: bool) -> Plan:
    """``plan`` for outputs that are dense (``dense_outputs``) or not. A plan with ``DENSE_OUT`` on (the rule's
    lane-per-row plans; tests force it on others) keeps it only where the outputs are dense; a plan with it off keeps
    the strided stores on any outputs."""
    if dense or not plan.constexprs.get("DENSE_OUT", False):
        return plan
    return plan._replace(constexprs={**plan.constexprs, "DENSE_OUT": False})


_pdl_by_device: dict[int, bool] = {}


def programmatic_launch_ok(index: int) -> bool:
    """Whether kernels on CUDA device ``index`` are launched with programmatic dependent launch (PDL): an NVIDIA GPU
    of compute capability 9.0 or later (``griddepcontrol`` is sm_90 PTX), unless ``MOE_ROUTING_PDL=0``."""
    ok = _pdl_by_device.get(index)
    if ok is None:
        ok = _pdl_by_device[index] = (_PDL_ENABLED and torch.version.hip is None
                                      and torch.cuda.get_device_capability(index) >= (9, 0))
    return ok


def with_device(plan: Plan, logits: torch.Tensor) -> Plan:
    """The rule's ``plan`` for the device of ``logits``: ``GRID_WAIT`` on where ``programmatic_launch_ok``.

    The kernel is then launched with the programmatic-stream-serialization attribute, so that its launch overlaps the
    end of the stream's previous kernel, and its programs execute ``griddepcontrol.wait`` before anything else: no
    input is read and no output written before that kernel has completed and its writes are visible, so results and
    stream order are what a plain launch gives (nothing is triggered early for the kernel after): 0.17-0.31 µs a call
    at 1 and 128 tokens under graph replay on the H200, 1.5-3.6% from 1024 to 32768 tokens (design log: "PDL").
    Plans a caller forces (``launch(plan=...)``: tests, the census) are launched as given."""
    if not logits.is_cuda or not programmatic_launch_ok(logits.get_device()):
        return plan
    return programmatic_plan(plan)


def programmatic_plan(plan: Plan) -> Plan:
    """``plan`` launched programmatically (``with_device`` on a GPU that can; ``moe-routing compile-check`` for
    NVIDIA targets): ``GRID_WAIT`` on."""
    return plan._replace(constexprs={**plan.constexprs, "GRID_WAIT": True})


class _DirectLaunch:
    """A compiled kernel and its C launcher, called without Triton's per-call Python binder."""

    __slots__ = ("launch", "function", "metadata", "cooperative", "pdl", "constexprs", "rows")

    def __init__(self, compiled, plan: Plan):
        runner = compiled.run  # the CudaLauncher: loads the module on first access
        self.launch = runner.launch
        self.function = compiled.function
        self.metadata = compiled.packed_metadata
        self.cooperative = runner.launch_cooperative_grid
        self.pdl = runner.launch_pdl
        self.constexprs = tuple(plan.constexprs.values())
        self.rows = plan.rows


_runtime_knobs = triton.knobs.runtime


def _hooks_installed() -> bool:
    """Whether a launch hook (e.g. a profiler's) is installed: then calls take Triton's own path."""
    enter, leave = _runtime_knobs.launch_enter_hook, _runtime_knobs.launch_exit_hook
    return bool(getattr(enter, "calls", enter)) or bool(getattr(leave, "calls", leave))


def _direct_launch_supported(compiled) -> bool:
    """True for a CUDA launcher of the Triton 3.x layout that needs no scratch memory."""
    runner = getattr(compiled, "run", None)
    return (
        torch.version.hip is None
        and all(hasattr(runner, a) for a in ("launch", "launch_cooperative_grid", "launch_pdl"))
        and not getattr(runner, "global_scratch_size", 0)
        and not getattr(runner, "profile_scratch_size", 0)
    )


_launchers: dict[tuple, _DirectLaunch | None] = {}

try:  # the current stream as a raw handle and the current device, as Triton's own launch path gets them
    _raw_stream = torch._C._cuda_getCurrentRawStream
    _current_device = torch._C._cuda_getDevice
except AttributeError:  # pragma: no cover - builds of torch without CUDA
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream

    _current_device = torch.cuda.current_device


def _int_class(value: int) -> int:
    """What Triton specialises an int argument on: == 1, divisible by 16, or neither."""
    return 1 if value == 1 else (16 if value % 16 == 0 else 0)


def launcher_key(call: RoutingCall, logits, bias, index: int, logits_ptr: int, bias_ptr: int | None,
                 stride: int, dense: bool, ids_dtype: torch.dtype = torch.int32, padded: bool = False) -> tuple:
    """The launcher cache's key: everything the rule and Triton's specialisation depend on (the
    normalised call but its token count and scale, the token class, the dtypes, the device, the
    16-byte alignment of the logits and bias, the row stride's class, whether the outputs are dense:
    ``dense_outputs``; the ids' dtype and whether rows are padded). host_launch.cpp keys the same, for the calls
    it takes (int32 ids, no padding)."""
    key = (
        call[1:7], token_class(call.tokens), logits.dtype, None if bias is None else bias.dtype, index,
        logits_ptr & 15 == 0, None if bias_ptr is None else bias_ptr & 15 == 0, _int_class(stride), dense,
    )
    return key if ids_dtype is torch.int32 and not padded else key + (ids_dtype, padded)


def launch(
    call: RoutingCall,
    logits: torch.Tensor,
    bias: torch.Tensor | None,
    weights: torch.Tensor,
    ids: torch.Tensor,
    plan: Plan | None = None,
    padding: torch.Tensor | None = None,
) -> None:
    """Route ``logits`` into ``weights`` and ``ids`` (int32 or int64) with a Triton kernel (GPU or interpreter).

    ``plan`` forces a kernel and tile (tests use it to cover every plan a rule can choose); ``padding``: uint8
    [T], nonzero on padded rows (ids -1, weights 0).
    """
    stride = logits.stride(0)
    w_stride, i_stride = weights.stride(), ids.stride()
    w_ptr, i_ptr = weights.data_ptr(), ids.data_ptr()
    dense = _dense(w_stride, i_stride, w_ptr, i_ptr, call.topk)
    key = None
    if plan is None and logits.is_cuda:
        index = logits.get_device()
        logits_ptr = logits.data_ptr()
        bias_ptr = None if bias is None else bias.data_ptr()
        key = launcher_key(call, logits, bias, index, logits_ptr, bias_ptr, stride, dense, ids.dtype,
                           padding is not None)
        direct = _launchers.get(key)
        if direct is not None and not _hooks_installed():
            if index != _current_device():  # kernels launch on the current device
                with torch.cuda.device(index):
                    return launch(call, logits, bias, weights, ids, padding=padding)
            direct.launch(
                (call.tokens + direct.rows - 1) // direct.rows, 1, 1, _raw_stream(index),
                direct.function, direct.cooperative, direct.pdl, None, None, direct.metadata, None, None, None,
                logits_ptr, bias_ptr, stride, w_ptr, i_ptr, w_stride[0], w_stride[1],
                i_stride[0], i_stride[1], call.tokens, call.scale, None if padding is None else padding.data_ptr(),
                *direct.constexprs,
            )
            return
        if index != _current_device():
            with torch.cuda.device(index):
                return launch(call, logits, bias, weights, ids, padding=padding)

    plan = with_outputs(plan, dense) if plan is not None else rule_plan(call, logits, bias, dense)
    compiled = _run_triton(plan, call, logits, bias, weights, ids, padding=padding)
    if key is not None and key not in _launchers:
        direct = _DirectLaunch(compiled, plan) if _direct_launch_supported(compiled) else None
        _launchers[key] = direct
        if (direct is not None and padding is None and ids.dtype == torch.int32  # (what the C++ side takes)
                and host_launch.enabled_by_environment() and host_launch.load() is not None):
            host_launch.register(call, logits, bias, weights, ids, compiled, plan.rows)


def rule_plan(call: RoutingCall, logits, bias, dense: bool, rocm: bool = ON_ROCM) -> Plan:
    """The plan ``launch`` runs for a call on these tensors: the rule's, for the logits' device (``with_device``) and
    for outputs that are ``dense`` or not (``with_outputs``); ``rocm``: the rule's plan for an AMD GPU."""
    return with_outputs(with_device(choose_plan(call, rocm=rocm, **tensor_traits(logits, bias)), logits), dense)


def triton_arguments(plan: Plan, call: RoutingCall, logits, bias, weights, ids, padding=None) -> tuple[tuple, dict]:
    """The arguments and options a plan is run with (``_run_triton``); kernels/targets.py binds the same ones for a
    named GPU, so what it compiles or keys is what a launch here would."""
    options = {} if plan.maxnreg is None else {"maxnreg": plan.maxnreg}  # ROCm's Triton refuses the option
    if plan.constexprs.get("GRID_WAIT"):
        options["launch_pdl"] = True
    args = (logits, bias, logits.stride(0), weights, ids, weights.stride(0), weights.stride(1), ids.stride(0),
            ids.stride(1), call.tokens, call.scale, padding)
    return args, dict(num_warps=plan.num_warps, **options, **plan.constexprs)


def _run_triton(plan: Plan, call: RoutingCall, logits, bias, weights, ids, warmup: bool = False, padding=None):
    """The plan through Triton's own binder: compiled (or found in its caches) and, unless ``warmup``, launched."""
    args, kwargs = triton_arguments(plan, call, logits, bias, weights, ids, padding)
    return plan.kernel.run(*args, grid=(triton.cdiv(call.tokens, plan.rows),), warmup=warmup, **kwargs)


_HASH_ROWS = 4  # rows a program of the hash kernel (one warp: 32 threads over 4 rows of up to 8 slots)


def launch_hash(call: RoutingCall, logits: torch.Tensor, input_ids: torch.Tensor, table: torch.Tensor,
                weights: torch.Tensor, ids: torch.Tensor, padding: torch.Tensor | None = None) -> None:
    """Hash routing (``route_hash``) into ``weights`` and ``ids``: the table's experts, their weights."""
    block_k = triton.next_power_of_2(call.topk)
    hash_kernel[(triton.cdiv(call.tokens, _HASH_ROWS),)](
        logits, logits.stride(0), input_ids, table, table.shape[0], weights, ids, weights.stride(0),
        weights.stride(1), ids.stride(0), ids.stride(1), call.tokens, call.scale, padding,
        TOPK=call.topk, SCORING=call.scoring, RENORMALIZE=call.renormalize, NUM_EXPERTS=call.experts,
        ROWS=_HASH_ROWS, BLOCK_K=block_k, LOG2_BLOCK_K=log2(block_k), num_warps=1,
    )


def forget_launchers() -> None:
    """Drop every cached launcher, Python and C++, the dispatch plan's and route_plan's one launch included (tests;
    the next call of each plan goes through Triton)."""
    from .plan_launch import forget_plan_launchers
    from .route_plan_launch import forget_route_plan_launchers

    forget_plan_launchers()
    forget_route_plan_launchers()
    _launchers.clear()
    if host_launch.loaded() is not None:
        host_launch.loaded().clear()
