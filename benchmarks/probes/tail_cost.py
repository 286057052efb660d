"""Session 25 probe: how much of a streaming tile's time its tail takes, by timing the tree's kernel against copies with
parts of the tail left out (METHOD.md: place time inside a kernel by variants that leave one stage out).

Run: python benchmarks/probes/tail_cost.py [--shape E/K/T ...] [--rounds 3]

Arms, each on the rule's plan of the shape (aligned bf16 logits, fp32 bias, renormalised):
  rule            the tree's kernel
  no exact pick   the run filter's best keys taken as the picks: the candidates' re-read (the top runs' experts, their
                  bias and keys) and the exact top CHUNK of them left out (wrong ids: timing only)
  no re-reads     that, and the weights from zeros instead of the chosen logits re-read (wrong weights: timing only)
The differences bound what the tail costs; the stream (loads, keys, sorts, merges) is the rest. The variants are
copies of kernels/_bitonic.py with those edits (``kernel_source``); each edit must find its text once.
"""

import argparse
from pathlib import Path

import torch

from constexpr_ab import time_arms
from kernel_source import bitonic_kernel_from_source
from moe_routing.call import check_call
from moe_routing.kernels import _bitonic, choose_plan, launch
from moe_routing.kernels.launch import tensor_traits
from moe_routing.measure.bench import Shape, make_inputs

NO_EXACT_PICK = ("    if GROUP > 1:\n        # the experts of the top CHUNK runs",
                 "    if GROUP > 1 and False:\n        # the experts of the top CHUNK runs")
NO_WEIGHTS_READ = ("    x = tl.load(logits_ptr + rows64[:, None] * stride_l_row + expert, mask=out_mask & valid, other=0.0)\n",
                   "    x = tl.zeros(expert.shape, tl.float32)\n")


def variant(name: str, edits) -> object:
    source = Path(_bitonic.__file__).read_text()
    for old, new in edits:
        assert source.count(old) == 1, (name, old)
        source = source.replace(old, new)
    return bitonic_kernel_from_source(source, name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", nargs="*", default=["256/8/65536", "128/8/65536", "384/8/65536"])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    kernels = {"no exact pick": variant("tail_no_pick", [NO_EXACT_PICK]),
               "no re-reads": variant("tail_no_reads", [NO_EXACT_PICK, NO_WEIGHTS_READ])}
    for spec in args.shape:
        e, k, t = (int(v) for v in spec.split("/"))
        shape = Shape(e, k, t)
        inputs = make_inputs(shape)
        call = check_call(inputs.logits[0], k, "sigmoid", inputs.bias, 1, 1, True, shape.scale, None)
        rule = choose_plan(call, **tensor_traits(inputs.logits[0], inputs.bias))
        plans = {"rule": rule, **{name: rule._replace(kernel=kernel) for name, kernel in kernels.items()}}
        arms = {name: (lambda i, plan=plan: launch(call, inputs.logits[i], inputs.bias, inputs.weights, inputs.ids,
                                                   plan=plan)) for name, plan in plans.items()}
        c = rule.constexprs
        time_arms(f"{shape.label} T={t} (lanes {c['LANES']}, rows {c['ROWS']})", shape, arms, len(inputs.logits),
                  args.rounds)
        del inputs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
