"""The rule's plan against the same plan with some constexprs switched (and, given, other kernel files), interleaved.

Run: python benchmarks/probes/constexpr_ab.py --arm NAME=KEY:VALUE[,KEY:VALUE...] ... [--shape SPEC ...] [--rounds 3]
         [--variant NAME=FILE ...] [--jobs N]

SPEC is E/K/T or E/K/T/G/KEPT (grouped), then any of /softmax (no bias), /nobias, /fp32 or /float32. Arms, on
the rule's plan of the shape (aligned bf16 logits unless /fp32, fp32 bias, renormalised, dense outputs, as
``moe-routing bench`` calls it):
  rule            the rule's plan
  NAME            (``--arm``) the same plan with those constexprs set (VALUE an integer; 0 / 1 for flags), skipped
                  where the plan is a rounds plan or already has them
  NAME            (``--variant``) the rule's plan run by the bitonic kernel module in FILE (its own constexprs)
Every arm is first checked bit for bit against the rule on the first input set (ids and weights); an arm that differs
is reported and not timed. Each line gives the median of the round medians and the same-arm drift.

Session 26: run 1 timed the streaming tiles' handover (``--arm handover=HANDOVER:1`` at commit 926e6bc, whose kernel
had it; this script was ``handover_ab.py`` then), run 3 kernel v25's ``CHECKED_STREAM`` and ``MASKED_WORDS``.
"""

import argparse
import subprocess
import sys
from pathlib import Path

import torch

from kernel_source import bitonic_kernel_from_source
from moe_routing.call import check_call
from moe_routing.cli import _parse_shapes
from moe_routing.kernels import choose_plan, launch
from moe_routing.kernels.launch import tensor_traits
from moe_routing.measure.bench import Shape, make_inputs, run_interleaved

SHAPES = ["256/8/65536", "384/8/65536", "256/8/65536/8/4", "256/8/8192", "384/8/8192", "256/8/8192/8/4"]


def time_arms(prefix: str, shape: Shape, arms: dict, sets: int, rounds: int) -> None:
    """Time ``arms`` (name -> call of an input set's index) interleaved (the harness's ``run_interleaved``) and print
    a line per arm: the median of its round medians and its same-arm drift."""
    for measured in run_interleaved(shape, arms, sets, rounds):
        device = measured.summary()["device"]
        print(f"{prefix} {measured.arm:>14}: {device['median']:7.2f} us  drift {device['drift']:.1%}", flush=True)


def parse(spec: str) -> Shape:
    """E/K/T, then G/KEPT (grouped) and the words of ``moe-routing bench --shape`` (read by its parser, the CLI's
    ``_parse_shapes``): softmax (here without bias, as sessions 10-26 wrote it), nobias, fp32 (or float32)."""
    parts = spec.split("/")
    numbers = [v for v in parts if v.isdigit()]
    words = ["fp32" if v == "float32" else v for v in parts if not v.isdigit()]
    assert len(numbers) in (3, 5), spec
    if "softmax" in words and "nobias" not in words:
        words.append("nobias")
    grouping = [f"{numbers[3]}:{numbers[4]}"] if len(numbers) == 5 else []
    return _parse_shapes(("/".join(numbers[:2] + grouping + words),), numbers[2])[0]


def rule_inputs(spec: str):
    """The shape of ``spec``, its input sets (the harness's ``make_inputs``), the normalised call and the rule's plan
    (``pdl_probe.py`` shares it)."""
    shape = parse(spec)
    inputs = make_inputs(shape)
    call = check_call(inputs.logits[0], shape.topk, shape.scoring, inputs.bias, shape.groups, shape.topk_group, True,
                      shape.scale, None)
    return shape, inputs, call, choose_plan(call, **tensor_traits(inputs.logits[0], inputs.bias))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", nargs="*", default=SHAPES)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--arm", action="append", default=[], metavar="NAME=KEY:VALUE[,KEY:VALUE...]")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=FILE")
    ap.add_argument("--jobs", type=int, default=1, help="first compile every arm in this many processes (shapes split)")
    ap.add_argument("--warm-only", action="store_true", help="launch every arm once (compile into Triton's cache)")
    args = ap.parse_args()
    if args.jobs > 1:
        variant_args = [a for item in args.variant for a in ("--variant", item)]
        variant_args += [a for item in args.arm for a in ("--arm", item)]
        workers = [subprocess.Popen([sys.executable, __file__, "--warm-only", *variant_args, "--shape",
                                     *args.shape[i::args.jobs]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for i in range(args.jobs) if args.shape[i::args.jobs]]
        for worker in workers:
            worker.wait()
    switches = {}
    for item in args.arm:
        name, pairs = item.split("=", 1)
        switches[name] = {key: int(value) for key, value in (pair.split(":") for pair in pairs.split(","))}
    variants = {}
    for item in args.variant:
        name, path = item.split("=", 1)
        variants[name] = bitonic_kernel_from_source(Path(path).read_text(), f"variant_{name.replace(' ', '_')}")
    for spec in args.shape:
        shape, inputs, call, rule = rule_inputs(spec)
        if rule.name != "bitonic" or rule.constexprs["ROUNDS"]:
            print(f"{spec}: the rule's plan is not a streaming tile", flush=True)
            continue
        plans = {"rule": rule}
        for name, switch in switches.items():
            constexprs = {**rule.constexprs, **{key: type(rule.constexprs[key])(value) for key, value in switch.items()}}
            if constexprs != rule.constexprs:
                plans[name] = rule._replace(constexprs=constexprs)
        for name, kernel in variants.items():
            plans[name] = rule._replace(kernel=kernel, constexprs={key: value for key, value in rule.constexprs.items()
                                                                   if key in kernel.arg_names})
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
        c = rule.constexprs
        time_arms(f"{spec} (lanes {c['LANES']}, rows {c['ROWS']}, one pass {int(c['ONE_PASS'])})", shape, arms,
                  len(inputs.logits), args.rounds)
        del inputs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
