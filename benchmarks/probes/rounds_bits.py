"""Kernels v20-v21 on the GPU: the rounds' plans equal the lane merge's, bit for bit.

Run: python benchmarks/probes/rounds_bits.py [--tokens 64] [--seeds 4] [--from-shape N]
     (prints one line per shape and row kind: rows compared, rows whose weights or ids differ in any bit)

Why: CI's interpreter computes both sigmoids with the plain expression, so its bit-equality test
(tests/test_plans.py ``test_rounds_selection_equals_the_lane_merge``) cannot see whether the PTX window sigmoid
(``ex2.approx.ftz``, ``rcp.approx.ftz``) that v20 hands over gives ``sigmoid_scores``' bits on the GPU. The
claim (kernels/_bitonic.py ``_route_in_rounds``): equal wherever the score is a normal float; a pick whose
handed-over score is 0 takes the exact path. Rows here: random logits (scale 2 and 8), logits between -90 and
-85 (scores near and under 2**-126, the edge of that claim) with a bias that lifts some of them into the picks,
many equal logits, and a NaN row; groupings whose groups the rounds' tile ranks itself (v21: by one integer
reduction a group) come first, with the window v21 reduces the same way. Each rule's decode plan (``ROUNDS``) against the same tile without rounds
(v18's lane merge), and against the same plan without the scores handed over (v19's stores), into
poisoned outputs.
"""

import argparse

import torch

from moe_routing.call import check_call
from moe_routing.kernels import launch
from moe_routing.kernels.launch import LATENCY, choose_plan, tensor_traits

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # (cpu: under TRITON_INTERPRET=1)
SHAPES = [(256, 8, 1, 1, True), (256, 8, 8, 4, True), (256, 8, 32, 7, True), (256, 8, 16, 5, False),
          (128, 4, 2, 1, True), (64, 6, 1, 1, True), (384, 8, 1, 1, True), (512, 8, 1, 1, True),
          (256, 8, 8, 4, False), (160, 8, 1, 1, False), (37, 3, 1, 1, True),
          (300, 8, 4, 2, True), (256, 8, 64, 8, True)]  # (experts, K, groups, kept, bias)


def rows(kind: str, tokens: int, experts: int, gen: torch.Generator) -> torch.Tensor:
    """float32 logits of one row kind."""
    if kind == "random":
        return torch.randn(tokens, experts, generator=gen) * 2.0
    if kind == "wide":
        return torch.randn(tokens, experts, generator=gen) * 8.0
    if kind == "near underflow":
        return -85.0 - 5.0 * torch.rand(tokens, experts, generator=gen)
    if kind == "ties":
        return torch.randint(-2, 3, (tokens, experts), generator=gen).float()
    x = torch.randn(tokens, experts, generator=gen)
    x[:, ::5] = float("nan")
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--from-shape", type=int, default=0, help="start at this entry of SHAPES")
    args = ap.parse_args()
    failed = 0
    for experts, topk, groups, kept, biased in SHAPES[args.from_shape:]:
        for dtype in (torch.bfloat16, torch.float32):
            for kind in ("random", "wide", "near underflow", "ties", "nan"):
                compared = differ = 0
                for seed in range(args.seeds):
                    gen = torch.Generator().manual_seed(seed * 1000 + experts)
                    logits = rows(kind, args.tokens, experts, gen).to(dtype).to(DEVICE)
                    bias = None
                    if biased:
                        bias = torch.randn(experts, generator=gen) * 0.5
                        if kind == "near underflow":  # a few experts lifted into the picks whatever their score
                            bias[: 2 * topk] += 1.5
                        bias = bias.to(DEVICE)
                    call = check_call(logits, topk, "sigmoid", bias, groups, kept, True, 2.5, None)
                    plan = choose_plan(call, LATENCY, **tensor_traits(logits, bias))
                    if not plan.constexprs.get("ROUNDS"):
                        break
                    merged = plan._replace(constexprs={**plan.constexprs, "ROUNDS": False})
                    reread = plan._replace(constexprs={**plan.constexprs, "HANDOVER": False})
                    outs = []
                    for variant in (plan, merged, reread):
                        weights = torch.full((args.tokens, topk), float("nan"), device=DEVICE)
                        ids = torch.full((args.tokens, topk), -7, dtype=torch.int32, device=DEVICE)
                        launch(call, logits, bias, weights, ids, plan=variant)
                        outs.append((weights.view(torch.int32).cpu(), ids.cpu()))
                    row_differs = torch.zeros(args.tokens, dtype=torch.bool)
                    for other in outs[1:]:
                        row_differs |= ((outs[0][0] != other[0]) | (outs[0][1] != other[1])).any(dim=1)
                    compared += args.tokens
                    differ += int(row_differs.sum())
                if compared:
                    failed += differ
                    print(f"{experts} / {topk} / {kept} of {groups} bias={biased} {str(dtype)[6:]:9s} {kind:15s} "
                          f"rows {compared:4d}  differ {differ}", flush=True)
    print("rounds_bits:", "all equal" if failed == 0 else f"{failed} rows differ")


if __name__ == "__main__":
    main()
