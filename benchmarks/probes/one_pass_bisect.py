"""Which one-pass grouped tiles give the two-pass ids? A map for bisecting kernel v9's GPU-only failure.

Run: python benchmarks/probes/one_pass_bisect.py [--tokens 67]     (GPU; the interpreter runs it too, slowly)

Kernel v9 found the one-pass path (``_select_one_pass``, kernel v6) wrong on the H200 for 512 experts in 8
groups, 4 kept, K = 20 on four lanes (lists of 32 keys, two groups per step: 61 of 67 rows), while the
interpreter is exact; ``launch.one_pass_ok`` has refused lists of 32 keys since (benchmarks/NOTES.md v9).
This probe forces one pass onto tiles that the rule never picks, bypassing that guard but keeping the
structural conditions (``launch.one_pass_tile_ok``: steps of whole groups, a lane's part of a step inside
one group), and counts the rows
whose ids or weights differ from the same tile in two passes (the group stage, then the masked stream) on
the same inputs. The grid crosses list length (8, 16, 32 keys) with groups per step (1, 2, 4), so one
run says whether the failure follows the list length, the groups per step, or both. It compiles 30
kernels on first use (1-27 s each for sm_90 on this 2-core machine; 52 s here in the interpreter at 5 tokens,
every row equal), so give a GPU run several minutes, or warm Triton's cache first.
"""

import argparse

import torch

from moe_routing.call import check_call
from moe_routing.kernels import launch
from moe_routing.kernels.launch import bitonic_chunk, bitonic_plan, one_pass_tile_ok, two_passes

# (experts, groups, kept, topk, lanes): lists of 8 / 16 / 32 keys, 1 / 2 / 4 groups per step, runs of 1
GRID = [
    (512, 8, 4, 8, 8), (512, 8, 4, 8, 16), (256, 8, 4, 8, 4), (256, 8, 4, 8, 8), (256, 8, 4, 8, 16),
    (256, 4, 2, 16, 4), (256, 4, 2, 16, 8), (256, 8, 4, 16, 2), (256, 8, 4, 16, 4), (256, 8, 4, 16, 8),
    (512, 8, 4, 20, 2), (512, 8, 4, 20, 4), (256, 8, 4, 20, 1), (256, 8, 4, 20, 2), (256, 8, 4, 20, 4),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=67)
    ap.add_argument("--rows", type=int, default=4, help="rows per program of every tile")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device="cpu").manual_seed(0)
    for experts, groups, kept, topk, lanes in GRID:
        logits = (torch.randn(args.tokens, experts, generator=gen) * 2).to(torch.bfloat16).to(device)
        bias = (torch.randn(experts, generator=gen) * 0.5).to(device)
        call = check_call(logits, topk, "sigmoid", bias, groups, kept, True, 2.5, None)
        if not one_pass_tile_ok(call, lanes, 1):
            print(f"{experts}/{groups}:{kept} K={topk} lanes={lanes}: not a one-pass tile, skipped")
            continue
        two = bitonic_plan(call, lanes, args.rows, 1, 1, groups, prefetch=True)
        one = two._replace(constexprs={**two.constexprs, "ONE_PASS": True})
        results = []
        for plan in (one, two_passes(one)):
            weights = torch.full((args.tokens, topk), float("nan"), device=device)
            ids = torch.full((args.tokens, topk), -1, dtype=torch.int32, device=device)
            launch(call, logits, bias, weights, ids, plan=plan)
            results.append((weights, ids))
        (w1, i1), (w2, i2) = results
        differ = ((i1 != i2).any(dim=1) | (w1 != w2).any(dim=1)).sum().item()
        size = experts // groups
        print(f"{experts}/{groups}:{kept} K={topk} lanes={lanes}: list {bitonic_chunk(call)} keys, "
              f"{lanes * bitonic_chunk(call) // size} groups per step -> {differ} of {args.tokens} rows differ",
              flush=True)


if __name__ == "__main__":
    main()
