"""Session 25 probe: how fast Triton 3.6's TMA tensor-descriptor loads stream a [T, E] bf16 matrix on this GPU, in the
lane-per-row tile's shape (32 rows a one-warp program, steps of SPAN experts), against the same tile's pointer loads.

Run: python benchmarks/probes/tma_stream.py [--tokens 65536] [--experts 256]
Each kernel sums every row (float32) into out[T]; all are checked against torch first, then timed under graph replay
(50 calls a graph, rotating inputs larger than twice the L2), median of 20 replays, interleaved over 3 rounds.
"""

import argparse
import statistics

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from moe_routing.measure.bench import graph_time_us


@triton.jit
def _rows_by_pointers(x_ptr, out_ptr, stride, E: tl.constexpr, ROWS: tl.constexpr, SPAN: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    acc = tl.zeros((ROWS, SPAN), tl.float32)
    for step in range(E // SPAN):
        x = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride + step * SPAN + tl.arange(0, SPAN)[None, :])
        acc += x.to(tl.float32)
    tl.store(out_ptr + rows, tl.sum(acc, axis=1))


@triton.jit
def _rows_by_tma(desc, out_ptr, E: tl.constexpr, ROWS: tl.constexpr, SPAN: tl.constexpr, STAGES: tl.constexpr):
    row0 = tl.program_id(0) * ROWS
    acc = tl.zeros((ROWS, SPAN), tl.float32)
    for step in tl.range(0, E // SPAN, num_stages=STAGES):
        acc += desc.load([row0, step * SPAN]).to(tl.float32)
    tl.store(out_ptr + row0 + tl.arange(0, ROWS), tl.sum(acc, axis=1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=65536)
    p.add_argument("--experts", type=int, default=256)
    a = p.parse_args()
    T, E = a.tokens, a.experts
    sets = max(2, 2 * torch.cuda.get_device_properties(0).L2_cache_size // (T * E * 2) + 1)
    xs = [torch.randn(T, E, device="cuda").to(torch.bfloat16) for _ in range(sets)]
    out = torch.empty(T, device="cuda")
    arms = {}
    for rows, span, warps in ((32, 32, 1), (32, 64, 1), (64, 64, 2), (128, 64, 4), (32, 128, 1)):
        arms[f"pointers R{rows} S{span} W{warps}"] = (lambda rows, span, warps: lambda i: _rows_by_pointers[
            (T // rows,)](xs[i], out, E, E=E, ROWS=rows, SPAN=span, num_warps=warps))(rows, span, warps)
        for stages in (2, 3):
            descs = [TensorDescriptor(x, [T, E], [E, 1], [rows, span]) for x in xs]
            arms[f"TMA R{rows} S{span} W{warps} stages {stages}"] = (
                lambda rows, span, warps, stages, descs: lambda i: _rows_by_tma[(T // rows,)](
                    descs[i], out, E=E, ROWS=rows, SPAN=span, STAGES=stages, num_warps=warps))(
                        rows, span, warps, stages, descs)
    for name, arm in arms.items():
        arm(0)
        assert torch.allclose(out, xs[0].float().sum(1), atol=1e-2, rtol=1e-3), name
    times = {n: [] for n in arms}
    for _ in range(3):
        for n, arm in arms.items():
            times[n].append(statistics.median(graph_time_us(arm, sets)))
    gbytes = T * E * 2 / 1e3
    for n, v in times.items():
        m = statistics.median(v)
        print(f"{n:>32}: {m:8.2f} us  {gbytes / m:6.2f} TB/s  drift {(max(v) - min(v)) / m:.1%}", flush=True)


if __name__ == "__main__":
    main()
