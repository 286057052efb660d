"""Launch the rule's kernel once per target shape, for Nsight Compute to profile (issue 3).

Run (on the GPU machine; Firecracker runtime, where ncu reads the counters):
    ncu --clock-control none --kernel-name regex:bitonic_kernel --launch-skip N --set full -o REPORT \
        python3 benchmarks/probes/ncu_targets.py [--shapes flat65536,grouped65536,...]
where N is the number of warm-up launches this script prints first (``warmup_launches=N``), so that
only the timed launch of each shape, in the order given, is profiled. Caches are flushed between
ncu's passes (its default), like the harness's rotating input sets — the instruction caches too: a kernel
of large code (the unrolled one-pass grouped tile, ~100 KB) then shows "no instruction" stalls that graph
replay, running it back to back, does not pay (NOTES.md "v13 candidates": 38.9 µs under ncu, 33.4 with
``--cache-control none``, 27.9 replayed). Profile such kernels both ways before reading their fetch stalls.
"""

import argparse

import torch

from moe_routing.call import check_call
from moe_routing.kernels import launch
from moe_routing.measure.bench import Shape, make_inputs

SHAPES = {
    "flat1": Shape(256, 8, 1),
    "flat8192": Shape(256, 8, 8192),
    "flat65536": Shape(256, 8, 65536),
    "wide65536": Shape(384, 8, 65536),
    "small65536": Shape(64, 6, 65536),
    "grouped1": Shape(256, 8, 1, 8, 4),
    "grouped65536": Shape(256, 8, 65536, 8, 4),
    "topk32_8192": Shape(1024, 32, 8192),
}
WARMUPS = 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="flat65536,grouped65536,flat1,wide65536,flat8192")
    ap.add_argument("--repeat", type=int, default=1, help="profiled launches per shape (more stall samples for "
                    "short kernels; give ncu --launch-count shapes x repeat)")
    args = ap.parse_args()
    names = args.shapes.split(",")
    runs = []
    for name in names:
        shape = SHAPES[name]
        inputs = make_inputs(shape, l2_bytes=0)  # two input sets: ncu flushes the caches itself
        call = check_call(inputs.logits[0], shape.topk, shape.scoring, inputs.bias, shape.groups, shape.topk_group,
                          True, shape.scale, None)
        runs.append((call, inputs))
    print(f"warmup_launches={WARMUPS * len(runs)}", flush=True)
    for call, inputs in runs:  # compile and warm: the launches ncu skips
        for i in range(WARMUPS):
            launch(call, inputs.logits[i % 2], inputs.bias, inputs.weights, inputs.ids)
    torch.cuda.synchronize()
    for name, (call, inputs) in zip(names, runs):
        for _ in range(args.repeat):
            launch(call, inputs.logits[1], inputs.bias, inputs.weights, inputs.ids)
            torch.cuda.synchronize()
        print(f"profiled {name}: {SHAPES[name].label} T={SHAPES[name].tokens}", flush=True)


if __name__ == "__main__":
    main()
