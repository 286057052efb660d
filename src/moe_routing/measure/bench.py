"""The benchmark harness: every timing in this project comes from here.

Two measurements per arm and shape:

* **device time per call under CUDA-graph replay**: ``calls_per_graph`` calls captured in one graph,
  cycling through enough input sets that their bytes exceed the L2 twice (so the cache does not
  flatter), the graph replayed ``replays`` times and timed with CUDA events; per-call time = replay
  time / calls.
* **eager host time per call**: wall time of ``host_calls`` back-to-back calls on the host, the
  outputs allocated by the op (and, for ``route``, also into ``out=`` buffers).

Arms are measured interleaved (A B C A B C ...) ``rounds`` times; the table reports the median over
rounds and, per arm, the *drift*: the spread of that arm's own per-round medians, (max - min) /
median. A difference between arms smaller than the drift is not a difference.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch


@dataclass(frozen=True)
class Shape:
    """One routing configuration to time."""

    experts: int
    topk: int
    tokens: int
    groups: int = 1
    topk_group: int = 1
    scoring: str = "sigmoid"
    bias: bool = True
    dtype: torch.dtype = torch.bfloat16
    scale: float = 2.5
    bias_shift: float = 0.0  # added to every bias entry (trained checkpoints' biases can sit far from 0)
    stage: bool = False  # time the routing stage (top-k + dispatch plan: measure/stage_arms.py), not the top-k
    local_experts: int = 0  # with ``stage``: this rank holds the first local_experts experts (an expert map)

    @property
    def label(self) -> str:
        grouping = f"{self.topk_group} of {self.groups}"
        extra = "" if (self.scoring, self.bias) == ("sigmoid", True) else f" {self.scoring}{'+bias' if self.bias else ''}"
        dtype = "" if self.dtype == torch.bfloat16 else f" {str(self.dtype).removeprefix('torch.')}"
        shift = f" bias{self.bias_shift:+g}" if self.bias and self.bias_shift else ""
        ep = f" EP {self.local_experts} of {self.experts}" if self.local_experts else ""
        return f"{self.experts} / {self.topk} / {grouping}{extra}{dtype}{shift}{ep}"

    def kwargs(self, bias):
        return dict(scoring_func=self.scoring, correction_bias=bias, num_expert_group=self.groups,
                    topk_group=self.topk_group, renormalize=True, routed_scaling_factor=self.scale)

    def bytes_moved(self) -> int:
        """The fewest bytes a routing call must move: read the logits once, write weights and ids."""
        return self.tokens * self.experts * torch.finfo(self.dtype).bits // 8 + self.tokens * self.topk * 8


@dataclass
class Inputs:
    """Rotating input sets for one shape (logits differ per set; the bias is the model's, shared)."""

    shape: Shape
    logits: list[torch.Tensor]
    bias: torch.Tensor | None
    weights: torch.Tensor = field(init=False)
    ids: torch.Tensor = field(init=False)

    def __post_init__(self):
        device = self.logits[0].device
        self.weights = torch.empty(self.shape.tokens, self.shape.topk, device=device)
        self.ids = torch.empty(self.shape.tokens, self.shape.topk, dtype=torch.int32, device=device)


def make_inputs(shape: Shape, device: str = "cuda", l2_bytes: int | None = None, seed: int = 0) -> Inputs:
    """Enough input sets that one graph's calls touch more than twice the L2 (at least 2, at most 64)."""
    if l2_bytes is None:
        l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size if device == "cuda" else 0
    per_set = shape.tokens * shape.experts * torch.finfo(shape.dtype).bits // 8
    sets = max(2, min(64, math.ceil(2 * l2_bytes / max(per_set, 1))))
    gen = torch.Generator(device=device).manual_seed(seed)
    logits = [(torch.randn(shape.tokens, shape.experts, generator=gen, device=device) * 2).to(shape.dtype)
              for _ in range(sets)]
    bias = (torch.randn(shape.experts, generator=gen, device=device) * 0.5 + shape.bias_shift) if shape.bias else None
    return Inputs(shape, logits, bias)


# An arm: given the inputs, returns (call(i) -> None for input set i, description); None if unavailable.
ArmFactory = Callable[[Inputs], "Callable[[int], object] | None"]


def graph_time_us(call: Callable[[int], object], sets: int, calls_per_graph: int = 50, replays: int = 20) -> list[float]:
    """Per-call device time (µs) of each of ``replays`` replays of a graph of ``calls_per_graph`` calls."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(3):  # compile, load and warm outside the capture
            call(i % sets)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls_per_graph):
            call(i % sets)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / calls_per_graph)
    del graph
    return times


def host_time_us(call: Callable[[int], object], sets: int, calls: int = 2000) -> float:
    """Eager host time per call (µs): wall time of ``calls`` back-to-back calls, then one sync."""
    for i in range(20):
        call(i % sets)
    torch.cuda.synchronize()
    begin = time.perf_counter()
    for i in range(calls):
        call(i % sets)
    elapsed = time.perf_counter() - begin
    torch.cuda.synchronize()
    return elapsed * 1e6 / calls


def copy_bandwidth_bytes_per_s(nbytes: int = 4 << 30, repeats: int = 10) -> float:
    """Measured device-to-device copy bandwidth (best of ``repeats``), counting bytes read plus written."""
    src = torch.empty(nbytes // 8, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(repeats):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1e-3)
    del src, dst
    return nbytes / best


@dataclass
class Measurement:
    """All rounds of one arm on one shape."""

    arm: str
    shape: Shape
    device_us: list[float]  # per-round median device time per call
    host_us: list[float]  # per-round eager host time per call (empty if not measured)

    @staticmethod
    def _summary(values: list[float]) -> dict:
        if not values:
            return {}
        med = statistics.median(values)
        return {"min": min(values), "median": med, "max": max(values),
                "drift": (max(values) - min(values)) / med if med else 0.0}

    def summary(self) -> dict:
        return {"device": self._summary(self.device_us), "host": self._summary(self.host_us)}


def run_interleaved(shape: Shape, arms: dict[str, Callable[[int], object]], sets: int, rounds: int = 3,
                    calls_per_graph: int = 50, replays: int = 20, host_arms: set[str] = frozenset(),
                    host_calls: int = 2000) -> list[Measurement]:
    """Measure every arm ``rounds`` times, interleaved A B C A B C, on one shape."""
    results = {name: Measurement(name, shape, [], []) for name in arms}
    for _ in range(rounds):
        for name, call in arms.items():
            results[name].device_us.append(statistics.median(graph_time_us(call, sets, calls_per_graph, replays)))
            if name in host_arms:
                results[name].host_us.append(host_time_us(call, sets, host_calls))
    return list(results.values())
