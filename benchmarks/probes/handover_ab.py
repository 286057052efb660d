"""Session 26 probe: the streaming tiles' weights from the picks' logits handed over by the tail (kernel v25's
``HANDOVER`` on a bitonic plan that is not a rounds plan) against the rule's plan, which re-reads them.

Run: python benchmarks/probes/handover_ab.py [--shape SPEC ...] [--rounds 3] [--variant NAME=FILE ...] [--jobs N]

SPEC is E/K/T, E/K/T/G/KEPT (grouped) or E/K/T/softmax (no bias). Arms, on the rule's plan of the shape (aligned
bf16 logits, fp32 bias, renormalised, dense outputs, as ``moe-routing bench`` calls it):
  rule            the rule's plan
  handover        the same plan with ``HANDOVER`` on
  NAME            (``--variant``) the same plan with ``HANDOVER`` on, run by the bitonic kernel module in FILE
Every arm is first checked bit for bit against the rule on the first input set (ids and weights); an arm that differs
is reported and not timed. Interleaved rounds; each line gives the median of the round medians and the same-arm drift.
"""

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

import torch

from kernel_source import bitonic_kernel_from_source
from moe_routing.call import check_call
from moe_routing.kernels import choose_plan, launch
from moe_routing.kernels.launch import tensor_traits
from moe_routing.measure.bench import Shape, graph_time_us, make_inputs

SHAPES = ["256/8/65536", "128/8/65536", "160/8/65536", "224/8/65536", "256/8/65536/8/4", "128/8/65536/softmax",
          "384/8/65536", "256/8/49152", "128/8/32768", "256/8/32768/8/4"]


def parse(spec: str) -> Shape:
    parts = spec.split("/")
    e, k, t = (int(v) for v in parts[:3])
    if parts[3:] == ["softmax"]:
        return Shape(e, k, t, scoring="softmax", bias=False)
    if len(parts) == 5:
        return Shape(e, k, t, int(parts[3]), int(parts[4]))
    return Shape(e, k, t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", nargs="*", default=SHAPES)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=FILE")
    ap.add_argument("--jobs", type=int, default=1, help="first compile every arm in this many processes (shapes split)")
    ap.add_argument("--warm-only", action="store_true", help="launch every arm once (compile into Triton's cache)")
    args = ap.parse_args()
    if args.jobs > 1:
        variant_args = [a for item in args.variant for a in ("--variant", item)]
        workers = [subprocess.Popen([sys.executable, __file__, "--warm-only", *variant_args, "--shape",
                                     *args.shape[i::args.jobs]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for i in range(args.jobs) if args.shape[i::args.jobs]]
        for worker in workers:
            worker.wait()
    variants = {}
    for item in args.variant:
        name, path = item.split("=", 1)
        variants[name] = bitonic_kernel_from_source(Path(path).read_text(), f"handover_{name.replace(' ', '_')}")
    for spec in args.shape:
        shape = parse(spec)
        inputs = make_inputs(shape)
        call = check_call(inputs.logits[0], shape.topk, shape.scoring, inputs.bias, shape.groups, shape.topk_group,
                          True, shape.scale, None)
        rule = choose_plan(call, **tensor_traits(inputs.logits[0], inputs.bias))
        if rule.name != "bitonic" or rule.constexprs["ROUNDS"]:
            print(f"{spec}: the rule's plan is not a streaming tile", flush=True)
            continue
        hand = {**rule.constexprs, "HANDOVER": True}
        plans = {"rule": rule, "handover": rule._replace(constexprs=hand),
                 **{name: rule._replace(kernel=kernel, constexprs=hand) for name, kernel in variants.items()}}
        expected = None
        arms = {}
        for name, plan in plans.items():
            weights, ids = torch.full_like(inputs.weights, float("nan")), torch.full_like(inputs.ids, -7)
            launch(call, inputs.logits[0], inputs.bias, weights, ids, plan=plan)
            got = (weights.view(torch.int32).clone(), ids.clone())
            if expected is None:
                expected = got
            elif not (torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])):
                print(f"{spec} {name}: DIFFERS from the rule, not timed", flush=True)
                continue
            if args.warm_only:
                continue
            arms[name] = (lambda i, plan=plan: launch(call, inputs.logits[i], inputs.bias, inputs.weights, inputs.ids,
                                                      plan=plan))
        times = {name: [] for name in arms}
        for _ in range(args.rounds):
            for name, arm in arms.items():
                times[name].append(statistics.median(graph_time_us(arm, len(inputs.logits))))
        c = rule.constexprs
        for name, values in times.items():
            med = statistics.median(values)
            print(f"{spec} (lanes {c['LANES']}, rows {c['ROWS']}, one pass {int(c['ONE_PASS'])}) {name:>10}: "
                  f"{med:7.2f} us  drift {(max(values) - min(values)) / med:.1%}", flush=True)
        del inputs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
