"""``warmup()``: compile, before serving, every kernel plan ``route()`` can choose for a model's routing shapes.

A plan is compiled on its first launch (Triton: about a second on a GPU host, far more on a small CPU); the rules
(kernels/rules.py) choose plans by token class, so a server would stall the first time a batch of a new class
arrives. ``warmup`` compiles every plan the rules can choose for the given shapes, over every token class, for the
tensors a serving engine passes (contiguous, 16-byte aligned logits; dense float32 weights and ids outputs), in
parallel threads (Triton's compiler passes release the GIL), and builds the C++ host path. Afterwards a call of any
token count of those shapes compiles nothing (tests/test_warmup.py counts). Triton also writes each binary to its
on-disk cache (``TRITON_CACHE_DIR``, default ``~/.triton/cache``), so a second process's warm-up only loads them.

>>> report = moe_routing.warmup(["deepseek-v3", "kimi-k2"], dtypes=(torch.bfloat16, torch.float32))
>>> print(report)  # kernels made ready and the time taken
"""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable, NamedTuple

import torch

from .call import SCORING_FUNCS, check_call


@dataclass(frozen=True)
class RoutingShape:
    """A model's routing as the kernels are compiled for it: everything of a ``route()`` call but the token count,
    the scale and the logits' dtype (``warmup``'s ``dtypes``)."""

    experts: int
    topk: int
    scoring_func: str = "sigmoid"
    bias_dtype: torch.dtype | None = torch.float32  # the correction bias's dtype; None: no bias
    num_expert_group: int = 1
    topk_group: int = 1
    renormalize: bool = True

    def __post_init__(self):
        if self.scoring_func not in SCORING_FUNCS:
            raise ValueError(f"scoring_func must be one of {SCORING_FUNCS}, got {self.scoring_func!r}")
        if self.bias_dtype is not None and not isinstance(self.bias_dtype, torch.dtype):
            raise TypeError(f"bias_dtype must be a torch.dtype or None, got {type(self.bias_dtype).__name__}")


# models' routing, as their configurations give it (the names ``warmup`` and ``moe-routing warmup`` accept)
MODEL_SHAPES: dict[str, RoutingShape] = {
    "deepseek-v3": RoutingShape(256, 8, num_expert_group=8, topk_group=4),
    "kimi-k2": RoutingShape(384, 8),
    "moonlight": RoutingShape(64, 6),
    "glm-4.5": RoutingShape(160, 8),
    "qwen3-moe": RoutingShape(128, 8, "softmax", None),
    "gpt-oss": RoutingShape(128, 4, "softmax", None),
    "mixtral": RoutingShape(8, 2, "softmax", None),
    "deepseek-v4": RoutingShape(256, 6, "sqrtsoftplus"),
}


def resolve_shapes(shapes: Iterable[RoutingShape | str] | RoutingShape | str) -> tuple[RoutingShape, ...]:
    """Shapes and model names (``MODEL_SHAPES``) as shapes; ValueError for an unknown name."""
    if isinstance(shapes, (RoutingShape, str)):
        shapes = [shapes]
    resolved = []
    for shape in shapes:
        if isinstance(shape, str):
            if shape not in MODEL_SHAPES:
                raise ValueError(f"shapes: unknown model {shape!r} (known: {', '.join(MODEL_SHAPES)})")
            shape = MODEL_SHAPES[shape]
        elif not isinstance(shape, RoutingShape):
            raise TypeError(f"shapes must hold RoutingShape or model names, got {type(shape).__name__}")
        resolved.append(shape)
    return tuple(resolved)


class Launch(NamedTuple):
    """One kernel launch as ``route()`` would make it: the plan and tensors of the layout it is compiled for (one
    row each: a launch's token count is not specialised on, only its class chooses the plan)."""

    plan: object  # kernels.rules.Plan
    call: object  # call.RoutingCall, with the class's token count
    logits: torch.Tensor
    bias: torch.Tensor | None
    weights: torch.Tensor
    ids: torch.Tensor
    padding: torch.Tensor | None

    def arguments(self) -> tuple[tuple, dict]:
        """The arguments and options the launch passes to Triton."""
        from .kernels.launch import triton_arguments

        return triton_arguments(self.plan, self.call, self.logits, self.bias, self.weights, self.ids, self.padding)


def launch_for(call, logits: torch.Tensor, bias: torch.Tensor | None, weights: torch.Tensor, ids: torch.Tensor,
               padding: torch.Tensor | None = None) -> Launch:
    """The launch ``route()`` makes for a validated call on these tensors (the rule's plan for them)."""
    from .kernels.launch import dense_outputs, rule_plan

    return Launch(rule_plan(call, logits, bias, dense_outputs(weights, ids, call.topk)), call, logits, bias, weights,
                  ids, padding)


def class_token_counts() -> tuple[int, ...]:
    """A token count of every token class the rules tell apart (the first of each)."""
    from .kernels.rules import TOKEN_CLASS_STARTS

    return (1,) + TOKEN_CLASS_STARTS


def shape_launches(shape: RoutingShape, dtype: torch.dtype, device, *, ids_dtype: torch.dtype = torch.int32,
                   padded: bool = False, unaligned: bool = False, rocm: bool | None = None,
                   token_counts: Iterable[int] | None = None) -> list[Launch]:
    """Every launch ``route()`` makes for ``shape`` with ``dtype`` logits, one per token class (or per count of
    ``token_counts``), distinct plans only: contiguous logits (16-byte aligned, or with ``unaligned`` one element
    off), dense outputs of ``ids_dtype``, a padding mask with ``padded``; ``rocm``: the plans for an AMD GPU
    (default: this torch's build)."""
    from .kernels.launch import dense_outputs, rule_plan
    from .kernels.rules import ON_ROCM

    experts, topk = shape.experts, shape.topk
    storage = torch.empty(experts + 8, dtype=dtype, device=device)  # never read
    logits = (storage[1:experts + 1] if unaligned else storage[:experts]).view(1, experts)
    bias = None if shape.bias_dtype is None else torch.empty(experts, dtype=shape.bias_dtype, device=device)
    weights = torch.empty(1, topk, dtype=torch.float32, device=device)
    ids = torch.empty(1, topk, dtype=ids_dtype, device=device)
    padding = torch.empty(1, dtype=torch.uint8, device=device) if padded else None
    call = check_call(logits, topk, shape.scoring_func, bias, shape.num_expert_group, shape.topk_group,
                      shape.renormalize, 1.0, (weights, ids), None, ids_dtype)
    dense = dense_outputs(weights, ids, topk)
    rocm = ON_ROCM if rocm is None else rocm
    launches, seen = [], set()
    for tokens in class_token_counts() if token_counts is None else token_counts:
        at = call._replace(tokens=tokens)
        plan = rule_plan(at, logits, bias, dense, rocm)
        if repr(plan) not in seen:
            seen.add(repr(plan))
            launches.append(Launch(plan, at, logits, bias, weights, ids, padding))
    return launches


@dataclass
class WarmupReport:
    """What ``warmup`` made ready and how long it took."""

    shapes: tuple[RoutingShape, ...]
    dtypes: tuple[torch.dtype, ...]
    kernels: int  # distinct compiled kernels (plans x tensor layouts) made ready
    seconds: float  # wall time, the C++ host path's build included
    device: str
    compiled: bool  # False where nothing is compiled: CPU tensors (the reference or Triton's interpreter)

    def __str__(self) -> str:
        dtypes = ", ".join(str(d).removeprefix("torch.") for d in self.dtypes)
        if not self.compiled:
            return (f"moe-routing warm-up: nothing to compile on {self.device} ({len(self.shapes)} shapes, "
                    f"{self.kernels} plans)")
        return (f"moe-routing warm-up: {self.kernels} kernels for {len(self.shapes)} routing shapes "
                f"({dtypes} logits) ready in {self.seconds:.1f} s on {self.device}")


def compile_launches(launches: list[Launch], threads: int = 16, progress: Callable[[], None] | None = None) -> None:
    """Compile each launch's kernel (Triton keeps it in its caches) without running it, ``threads`` at once, the
    largest token classes first (their tiles compile slowest). Does nothing for CPU tensors."""
    from .kernels import INTERPRETED
    from .kernels.launch import _run_triton

    def compile_one(launch: Launch) -> None:
        if launch.logits.is_cuda:
            with torch.cuda.device(launch.logits.get_device()):
                _run_triton(*launch[:6], warmup=True, padding=launch.padding)
        elif INTERPRETED:  # compiles nothing; keeps the path the same for the tests that watch it
            _run_triton(*launch[:6], warmup=True, padding=launch.padding)
        if progress is not None:
            progress()

    ordered = sorted(launches, key=lambda launch: -launch.call.tokens)
    with ThreadPoolExecutor(max(1, threads)) as pool:
        for future in [pool.submit(compile_one, launch) for launch in ordered]:
            future.result()


def warmup(shapes: Iterable[RoutingShape | str] | RoutingShape | str, *,
           dtypes: Iterable[torch.dtype] = (torch.bfloat16,), ids_dtypes: Iterable[torch.dtype] = (torch.int32,),
           padded: bool = False, unaligned: bool = False, device=None, threads: int = 16,
           progress: Callable[[], None] | None = None, token_counts: Iterable[int] | None = None) -> WarmupReport:
    """Compile every kernel ``route()`` can launch for ``shapes`` (``RoutingShape``s or ``MODEL_SHAPES`` names),
    over every token class (or only the plans of the ``token_counts`` given: an engine's CUDA-graph batch sizes, a
    benchmark's token counts), for each logits dtype in ``dtypes`` and ids dtype in ``ids_dtypes``; with ``padded``
    also the launches with a padding mask (vLLM's ``VLLM_MOE_SKIP_PADDING``), with ``unaligned`` also those for
    logits not 16-byte aligned. ``device``: the CUDA device (default: the current one). Builds the C++ host path
    too. Returns what was made ready and the wall time; safe to call again (what is compiled is found in
    Triton's caches)."""
    from .call import IDS_DTYPES, LOGIT_DTYPES
    from .kernels import INTERPRETED, host_launch

    resolved = resolve_shapes(shapes)
    dtypes, ids_dtypes = tuple(dtypes), tuple(ids_dtypes)
    for name, values, allowed in (("dtypes", dtypes, LOGIT_DTYPES), ("ids_dtypes", ids_dtypes, IDS_DTYPES)):
        if not values or any(value not in allowed for value in values):
            raise ValueError(f"{name} must be a non-empty choice of {allowed}, got {values}")
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads must be a positive int, got {threads!r}")
    if token_counts is not None:
        token_counts = tuple(token_counts)
        if not token_counts or any(type(count) is not int or count < 1 for count in token_counts):
            raise ValueError(f"token_counts must be a non-empty collection of ints >= 1, got {token_counts}")
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    started = time.perf_counter()
    builder = None
    if device.type == "cuda" and host_launch.enabled_by_environment():
        builder = threading.Thread(target=host_launch.load, daemon=True)  # a ninja build the first time
        builder.start()
    launches, seen = [], set()
    for shape in resolved:
        for dtype in dtypes:
            for ids_dtype in ids_dtypes:
                for pad in (False, True) if padded else (False,):
                    for misaligned in (False, True) if unaligned else (False,):
                        for launch in shape_launches(shape, dtype, device, ids_dtype=ids_dtype, padded=pad,
                                                     unaligned=misaligned, token_counts=token_counts):
                            key = (repr(launch.plan), dtype, shape.bias_dtype, ids_dtype, pad, misaligned)
                            if key not in seen:
                                seen.add(key)
                                launches.append(launch)
    compile_launches(launches, threads, progress)
    if builder is not None:
        builder.join()
    return WarmupReport(resolved, dtypes, len(launches), time.perf_counter() - started, str(device),
                        device.type == "cuda" and not INTERPRETED)


@contextlib.contextmanager
def counting_compiles():
    """Count the kernels Triton compiles (or loads from its on-disk cache) inside the block: yields a list that
    receives each one's name. After ``warmup``, a block of ``route()`` calls of the warmed shapes leaves it
    empty. (Triton's ``jit_post_compile_hook``; a hook installed before is called too.)"""
    import triton

    knobs = triton.knobs.runtime
    previous = knobs.jit_post_compile_hook
    seen: list[str] = []
    lock = threading.Lock()

    def hook(*args, **kwargs):
        with lock:
            seen.append(kwargs.get("fn").name if kwargs.get("fn") is not None else "kernel")
        return previous(*args, **kwargs) if previous is not None else False

    knobs.jit_post_compile_hook = hook
    try:
        yield seen
    finally:
        knobs.jit_post_compile_hook = previous
