"""What a decode-size call (T = 1, 256 experts) costs before any selection (issue 3): a ladder of kernels.

Run: python benchmarks/probes/decode_floor.py [--tokens 1] [--experts 256]

Each rung adds one dependent stage of the routing kernel's chain, timed under CUDA-graph replay
(50 calls per graph, rotating input sets) side by side, interleaved over rounds:
  empty        launch only
  load→store   read K logits and K bias entries, write K values that depend on them (one round trip)
  +reduce      read the whole row and bias, their min/max and one row-wide max (cross-lane shuffles)
  route        the shipped kernel (the rule's plan)
The difference between `route` and `load→store` is what selection can still win; `load→store` minus
`empty` is the floor no selection strategy removes.
"""

import argparse
import statistics

import triton
import triton.language as tl

from moe_routing.call import check_call
from moe_routing.kernels import launch
from moe_routing.measure.bench import Shape, graph_time_us, make_inputs


@triton.jit
def _empty(x_ptr):
    pass


@triton.jit
def _load_store(logits_ptr, bias_ptr, weights_ptr, ids_ptr, stride, E: tl.constexpr, BLOCK: tl.constexpr,
                K: tl.constexpr, REDUCE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    slot = tl.arange(0, K)
    if REDUCE:  # the whole row, the bias window's min/max and a row-wide max
        e = tl.arange(0, BLOCK)
        x = tl.load(logits_ptr + row * stride + e, mask=e < E, other=0.0).to(tl.float32)
        b = tl.load(bias_ptr + e, mask=e < E, other=0.0)
        lo = tl.min(b, axis=0)
        hi = tl.max(b, axis=0)
        top = tl.max(x + b, axis=0)
        val = (top - lo) * hi + slot.to(tl.float32)
    else:  # K logits and K bias entries: one memory round trip, no cross-lane work
        val = tl.load(logits_ptr + row * stride + slot).to(tl.float32) + tl.load(bias_ptr + slot)
    tl.store(weights_ptr + row * K + slot, val)
    tl.store(ids_ptr + row * K + slot, val.to(tl.int32))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=1)
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    shape = Shape(args.experts, 8, args.tokens)
    inputs = make_inputs(shape)
    call = check_call(inputs.logits[0], 8, "sigmoid", inputs.bias, 1, 1, True, 2.5, None)
    sets = len(inputs.logits)
    block = triton.next_power_of_2(args.experts)
    w, i = inputs.weights, inputs.ids

    arms = {
        "empty": lambda s: _empty[(args.tokens,)](inputs.logits[s]),
        "load→store": lambda s: _load_store[(args.tokens,)](inputs.logits[s], inputs.bias, w, i, args.experts,
                                                            args.experts, block, 8, False, num_warps=1),
        "+reduce": lambda s: _load_store[(args.tokens,)](inputs.logits[s], inputs.bias, w, i, args.experts,
                                                         args.experts, block, 8, True, num_warps=1),
        "route": lambda s: launch(call, inputs.logits[s], inputs.bias, w, i),
    }
    times = {name: [] for name in arms}
    for _ in range(args.rounds):
        for name, arm in arms.items():
            times[name].append(statistics.median(graph_time_us(arm, sets, 50, 20)))
    for name, values in times.items():
        print(f"{name:12s} T={args.tokens} E={args.experts}: median {statistics.median(values):.3f} us"
              f"  rounds {' '.join(f'{v:.3f}' for v in values)}")


if __name__ == "__main__":
    main()
