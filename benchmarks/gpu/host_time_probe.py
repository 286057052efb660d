"""Eager host time per call: route() (allocating and out=) vs torch.max(dim=-1) vs Triton launches.

Run: python benchmarks/gpu/host_time_probe.py
"""

import statistics

import torch
import triton

import moe_routing
from moe_routing.measure.bench import Shape, host_time_us, make_inputs


@triton.jit
def _empty10(a, b, c, d, e, f, g, h, i, j):
    pass


for shape in [Shape(256, 8, 1), Shape(256, 8, 1, 8, 4), Shape(64, 6, 1), Shape(256, 8, 128)]:
    inputs = make_inputs(shape)
    kw = shape.kwargs(inputs.bias)
    out = (inputs.weights, inputs.ids)
    x0 = inputs.logits[0]
    arms = {
        "route(out=)": lambda i: moe_routing.route(inputs.logits[i], shape.topk, out=out, **kw),
        "route": lambda i: moe_routing.route(inputs.logits[i], shape.topk, **kw),
        "torch.max(dim=-1)": lambda i: torch.max(inputs.logits[i], dim=-1),
        "triton kernel[grid] (10 args)": lambda i: _empty10[(1,)](x0, x0, x0, 1, 2, 3, 4, 5, 6, 7),
    }
    results = {name: [] for name in arms}
    for _ in range(5):  # interleaved rounds
        for name, call in arms.items():
            results[name].append(host_time_us(call, len(inputs.logits), calls=3000))
    for name, values in results.items():
        print(f"{shape.label:>24} T={shape.tokens:<4} {name:32s} median {statistics.median(values):6.2f} us "
              f"(min {min(values):.2f} max {max(values):.2f})")
