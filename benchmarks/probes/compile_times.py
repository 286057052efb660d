"""Compile time, size and SASS of the rule's plans for sm_90, on a machine without a GPU (kernel v17's figures).

Run: python benchmarks/probes/compile_times.py --shape 256/8/64:8 --classes latency medium large huge
     python benchmarks/probes/compile_times.py --shape 256/9/64:8/nobias --classes huge
     python benchmarks/probes/compile_times.py --shape 256/8/64:8 --classes large --groups-per-load 16
     (prints, per plan: seconds to compile, cubin KiB, SASS instructions, its local-memory loads and stores
     (register spills), the registers its instructions name, and a hash of the SASS with its
     addresses stripped: equal hashes are the same instructions. To time an earlier tree, run this file with
     PYTHONPATH=<a worktree of that commit>/src.)

Each plan is compiled through Triton's own JIT path, as ``launch`` compiles it on the GPU (the same
argument specialisation: aligned pointers, a stride of 16 elements, unit strides as constants, no bias as
None), with a driver that reports an sm_90 target instead of a GPU. Set TRITON_CACHE_DIR to an empty folder,
or the seconds are a cache hit's.
"""

import argparse
import hashlib
import re
import time

import torch
import triton.runtime.driver as driver
from triton.backends.compiler import GPUTarget

from moe_routing.call import check_call
from moe_routing.kernels import all_plans
from sass_counts import _sass


class _Sm90Driver:
    """Just enough of a driver for ``JITFunction.warmup``: device 0, stream 0, an sm_90 target."""

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def get_active_torch_device(self):
        return torch.device("cpu")


def parse_shape(text: str):
    """E/K[/G:KEPT][/nobias] -> (experts, topk, groups, kept, biased)."""
    parts = text.split("/")
    groups, kept = (int(v) for v in (parts[2].split(":") if len(parts) > 2 and ":" in parts[2] else (1, 1)))
    return int(parts[0]), int(parts[1]), groups, kept, "nobias" not in parts


def compile_plan(plan, experts: int, topk: int, biased: bool):
    """(seconds, compiled kernel) of the plan, specialised as ``launch`` would for 2 x rows + 3 tokens."""
    tokens = 2 * plan.rows + 3
    logits = torch.zeros(tokens, experts, dtype=torch.bfloat16)
    bias = torch.zeros(experts) if biased else None
    weights, ids = torch.zeros(tokens, topk), torch.zeros(tokens, topk, dtype=torch.int32)
    options = {} if plan.maxnreg is None else {"maxnreg": plan.maxnreg}
    started = time.time()
    compiled = plan.kernel.warmup(logits, bias, logits.stride(0), weights, ids, weights.stride(0), weights.stride(1),
                                  ids.stride(0), ids.stride(1), tokens, 2.5, grid=(1,), num_warps=plan.num_warps,
                                  **options, **plan.constexprs)
    return time.time() - started, compiled


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", action="append", required=True, help="E/K[/G:KEPT][/nobias], repeatable")
    ap.add_argument("--classes", nargs="+", default=["latency", "medium", "large", "huge"],
                    help="all_plans names (token classes)")
    ap.add_argument("--groups-per-load", type=int, metavar="N",
                    help="the group stage reads N groups at once instead of the rule's (a tile no rule chooses; "
                         "kernel v18's counts of the 64-group plans)")
    args = ap.parse_args()
    driver.set_active(_Sm90Driver())
    for text in args.shape:
        experts, topk, groups, kept, biased = parse_shape(text)
        call = check_call(torch.zeros(1, experts, dtype=torch.bfloat16), topk, "sigmoid",
                          torch.zeros(experts) if biased else None, groups, kept, True, 1.0, None)
        plans = all_plans(call, True, biased)
        for name in args.classes:
            plan = plans[name]
            if args.groups_per_load:
                plan = plan._replace(constexprs={**plan.constexprs, "GROUPS_PER_LOAD": args.groups_per_load})
            seconds, compiled = compile_plan(plan, experts, topk, biased)
            instructions = [re.sub(r"/\*[0-9a-f]{4,}\*/", "", line).strip() for line in _sass(compiled).splitlines()
                            if re.match(r"\s+/\*[0-9a-f]{4,}\*/", line)]
            digest = hashlib.sha1("\n".join(instructions).encode()).hexdigest()[:12]
            local = sum(1 for line in instructions if re.search(r"\b(LDL|STL)(\.|\s)", line))
            registers = 1 + max((int(r) for line in instructions for r in re.findall(r"\bR(\d+)\b", line)), default=-1)
            print(f"{text} {name}: compiled in {seconds:.0f} s, cubin {len(compiled.asm['cubin']) // 1024} KiB, "
                  f"{len(instructions)} SASS instructions ({local} local-memory loads and stores: spills), "
                  f"{registers} registers named, SASS {digest}", flush=True)


if __name__ == "__main__":
    main()
