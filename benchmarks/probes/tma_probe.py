"""Session 25 probe: the lane-per-row word tile with its steps read by the tensor memory accelerator (TMA).

Runs at commit 7c89781 only, whose kernel has the ``TMA`` constexpr and the ``logits_desc`` / ``bias_desc`` arguments
(measured slower and reverted: benchmarks/NOTES.md "Session 25").

Run: python benchmarks/probes/tma_probe.py [--out FILE] [--rounds 3] [--stages 2 3] [--shape E/K/T ...] [--warm-only]

The rule's plan of each shape (and the lane-per-row word tile, forced, for shapes the rule puts on two
lanes) against the same tile with ``TMA`` = stages (kernel constexpr: each step's [ROWS, CHUNK * GROUP] block of
logits copied into shared memory by one TMA instruction, ``stages - 1`` steps ahead through Triton's loop
pipeliner, then read by each row's thread from shared memory). Every TMA arm is first checked bit for bit against
the rule on every input set; then the arms are timed interleaved (graph replay, 50 calls a graph, rotating inputs
larger than twice the L2), median of the round medians and the arm's drift.
"""

import argparse
import json
import statistics
import sys

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from moe_routing.call import check_call
from moe_routing.kernels import choose_plan, launch
from moe_routing.kernels._bitonic import bitonic_kernel
from moe_routing.kernels.launch import bitonic_plan, tensor_traits
from moe_routing.measure.bench import Shape, graph_time_us, make_inputs


def tma_arm(inputs, call, plan, stages, bias_by_tma=False):
    """A call(i) of ``plan``'s tile with TMA = stages, through Triton's own launch (descriptors built once a set)."""
    c = dict(plan.constexprs)
    c["TMA"] = stages
    span = c["CHUNK"] * c["GROUP"]
    shape = inputs.shape
    descs = [TensorDescriptor(x, [shape.tokens, shape.experts], [x.stride(0), 1], [c["ROWS"], span])
             for x in inputs.logits]
    grid = (triton.cdiv(shape.tokens, plan.rows),)
    w, ids = inputs.weights, inputs.ids
    bias_desc = None
    if bias_by_tma and inputs.bias is not None:
        bias_desc = TensorDescriptor(inputs.bias, [shape.experts], [1], [span])

    def run(i):
        x = inputs.logits[i]
        bitonic_kernel[grid](x, inputs.bias, x.stride(0), w, ids, w.stride(0), w.stride(1), ids.stride(0),
                             ids.stride(1), shape.tokens, call.scale, num_warps=plan.num_warps, **c,
                             logits_desc=descs[i], bias_desc=bias_desc)
        return w, ids

    return run


def rule_arm(inputs, call, plan):
    shape = inputs.shape

    def run(i):
        x = inputs.logits[i]
        launch(call, x, inputs.bias, inputs.weights, inputs.ids, plan)
        return inputs.weights, inputs.ids

    return run


def same_bits(inputs, first, second) -> bool:
    for i in range(len(inputs.logits)):
        inputs.weights.fill_(float("nan"))
        inputs.ids.fill_(-7)
        w0, i0 = (t.clone() for t in first(i))
        inputs.weights.fill_(float("nan"))
        inputs.ids.fill_(-7)
        w1, i1 = (t.clone() for t in second(i))
        if not (torch.equal(i0, i1) and torch.equal(w0.view(torch.int32), w1.view(torch.int32))):
            return False
    return True


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--shape", nargs="*", default=["256/8/65536", "128/8/65536", "192/8/65536", "256/8/32768",
                                                   "128/8/32768", "384/8/65536", "512/8/65536"])
    p.add_argument("--stages", nargs="*", type=int, default=[2, 3])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out")
    p.add_argument("--no-bias", action="store_true", help="sigmoid without a correction bias")
    p.add_argument("--bias-tma", action="store_true", help="also the TMA arms with the bias read by TMA")
    p.add_argument("--warm-only", action="store_true", help="compile every arm (Triton's cache), time nothing")
    args = p.parse_args(argv)
    rows = []
    for spec in args.shape:
        e, k, t = (int(v) for v in spec.split("/"))
        shape = Shape(e, k, t, bias=not args.no_bias)
        inputs = make_inputs(shape)
        call = check_call(inputs.logits[0], k, "sigmoid", inputs.bias, 1, 1, True, shape.scale, None)
        rule = choose_plan(call, **tensor_traits(inputs.logits[0], inputs.bias))
        c = rule.constexprs
        tile = rule
        if not (c["LANES"] == 1 and c["WORDS"] and c["GROUP"] == 4):  # the lane-per-row word tile, forced
            tile = bitonic_plan(call, 1, 32, 1, 4, 1, True, True)
            tile = tile._replace(constexprs={**tile.constexprs, "DENSE_OUT": True})
        arms = {"rule": rule_arm(inputs, call, rule)}
        if tile is not rule:
            arms["lane-per-row tile"] = rule_arm(inputs, call, tile)
        variants = [(s, False) for s in args.stages]
        if args.bias_tma and inputs.bias is not None:
            variants += [(s, True) for s in args.stages]
        for s, bias_by_tma in variants:
            arm = tma_arm(inputs, call, tile, s, bias_by_tma)
            name = f"TMA={s}" + (" bias by TMA" if bias_by_tma else "")
            ok = same_bits(inputs, arms["rule"], arm)
            print(f"{shape.label} T={t}: {name} bits {'equal' if ok else 'DIFFER'} to the rule", flush=True)
            if ok:
                arms[name] = arm
        if args.warm_only:
            continue
        times = {name: [] for name in arms}
        for _ in range(args.rounds):
            for name, arm in arms.items():
                times[name].append(statistics.median(graph_time_us(arm, len(inputs.logits))))
        for name, values in times.items():
            med = statistics.median(values)
            row = dict(shape=shape.label, tokens=t, arm=name, median_us=med, drift=(max(values) - min(values)) / med,
                       rounds=values)
            rows.append(row)
            print(f"{shape.label:>16} T={t:>6} {name:>18}: {med:7.2f} us  drift {row['drift']:.1%}", flush=True)
        del inputs
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                           command=" ".join(sys.argv), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
