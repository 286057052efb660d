"""Programmatic dependent launch (PDL) on the rule's plans: what it does to the harness's graph-replay device time.

Run: python benchmarks/probes/pdl_probe.py [--shape SPEC ...] [--rounds 3]

SPEC as ``constexpr_ab.py`` reads it (E/K/T, E/K/T/G/KEPT, then /nobias, /fp32, /softmax). Arms, on the rule's plan of
each shape, every one launched through Triton's own launcher (``kernel[grid](...)``) so that only the launch attribute
and the kernel's first instructions differ:
  rule            the tree's kernel, launched as it is
  pdl wait        a copy of the kernel whose programs first execute ``griddepcontrol.wait`` (nothing is read before
                  the previous kernel in the stream has completed and its writes are visible), launched with the
                  programmatic-stream-serialization attribute (Triton's ``launch_pdl``): the launch may begin while
                  the previous kernel drains
  pdl trigger     as ``pdl wait``, and each program also executes ``griddepcontrol.launch_dependents`` first: the
                  next kernel (here the next route call of the graph) may launch at once
  empty / empty pdl   the harness's empty kernel, and one that waits, launched with the attribute
Every routing arm is first checked bit for bit against the rule on the first input set.

Session 28: run 1 (kernel v26; the copy added both constexprs) decided kernel v27, ``GRID_WAIT`` (the ``pdl wait`` arm,
now the tree's kernel with the switch on).
"""

import argparse
from pathlib import Path

import torch
import triton
import triton.language as tl
from constexpr_ab import rule_inputs, time_arms
from kernel_source import bitonic_kernel_from_source

SHAPES = ["64/6/1", "256/8/1", "384/8/1", "256/8/1/8/4", "64/6/128", "256/8/128", "384/8/128", "256/8/128/8/4",
          "256/8/8192", "256/8/65536"]
KERNEL = Path(__file__).resolve().parents[2] / "src" / "moe_routing" / "kernels" / "_bitonic.py"


def pdl_kernel():
    """The tree's bitonic kernel with one more constexpr, TRIGGER (let the next grid launch first). Before kernel v27
    (session 28, run 1) the copy also added GRID_WAIT, which the tree's kernel has since."""
    source = KERNEL.read_text()
    marker = "    GRID_WAIT: tl.constexpr = False,"
    assert source.count(marker) == 1 and source.count("\n):\n    if GRID_WAIT:") == 1
    source = source.replace(marker, marker + "\n    TRIGGER: tl.constexpr = False,")
    source = source.replace("\n):\n    if GRID_WAIT:", "\n):\n    if TRIGGER:\n        tl.extra.cuda.gdc_launch_dependents()\n"
                            "    if GRID_WAIT:")
    return bitonic_kernel_from_source(source, "bitonic_pdl")


@triton.jit
def _empty_kernel(x_ptr, n):
    pass


@triton.jit
def _empty_waiting_kernel(x_ptr, n):
    tl.extra.cuda.gdc_wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", nargs="*", default=SHAPES)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    variant = pdl_kernel()
    for spec in args.shape:
        shape, inputs, call, plan = rule_inputs(spec)
        options = {} if plan.maxnreg is None else {"maxnreg": plan.maxnreg}
        grid = (triton.cdiv(call.tokens, plan.rows),)
        w, ids = inputs.weights, inputs.ids

        def launcher(kernel, extra, pdl):
            def run(i, weights=w, ids=ids):
                kernel[grid](inputs.logits[i], inputs.bias, inputs.logits[i].stride(0), weights, ids, weights.stride(0),
                             weights.stride(1), ids.stride(0), ids.stride(1), call.tokens, call.scale,
                             num_warps=plan.num_warps, launch_pdl=pdl, **options, **{**plan.constexprs, **extra})
            return run

        arms = {"rule": launcher(plan.kernel, {}, False),
                "pdl wait": launcher(plan.kernel, {"GRID_WAIT": True}, True),
                "pdl trigger": launcher(variant, {"GRID_WAIT": True, "TRIGGER": True}, True)}
        if plan.name != "bitonic":  # the rounds kernel (softmax with a bias): no copy with the trigger
            del arms["pdl trigger"]
        expected = None
        for name, run in list(arms.items()):
            weights, ids = torch.full_like(w, float("nan")), torch.full_like(inputs.ids, -7)
            run(0, weights, ids)
            got = (weights.view(torch.int32).clone(), ids.clone())
            expected = expected or got
            if not (torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])):
                print(f"{spec} {name}: DIFFERS from the rule, not timed", flush=True)
                del arms[name]
        x = torch.empty(1, device="cuda")
        arms["empty"] = lambda i: _empty_kernel[(1,)](x, 0)
        arms["empty pdl"] = lambda i: _empty_waiting_kernel[(1,)](x, 0, launch_pdl=True)
        time_arms(f"{spec} ({plan.name}, rows {plan.rows}, rounds {int(plan.constexprs.get('ROUNDS', 0))})", shape,
                  arms, len(inputs.logits), args.rounds)
        del inputs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
