"""Which one-pass grouped tiles give the two-pass ids? The map that found kernel v9's GPU-only failure.

Run: python benchmarks/probes/one_pass_bisect.py [--rule] [--tokens 67] [--jobs N]
     (GPU; the interpreter runs it too, slowly)

Kernel v9 found the one-pass path (``_select_one_pass``, kernel v6) wrong on the H200 for 512 experts in 8
groups, 4 kept, K = 20 on four lanes, while the interpreter was exact. This map (session 12, NOTES.md v10)
traced it to the group scores of steps whose groups span several lanes, in shipped K <= 16 tiles too; v10
computes them without the reshape that went wrong. Run it on any new Triton or GPU.

It forces one pass onto tiles, keeping the structural conditions (``launch.one_pass_ok``: steps of whole
groups, a lane's part of a step inside one group), and counts the rows whose ids or weights differ from
the same tile in two passes (the group stage, then the masked stream) on the same inputs. The default grid crosses list length (8, 16, 32 keys) with groups per step
(1, 2, 4) on tiles of runs of 1. ``--rule`` instead takes, for every distinct one-pass tile the rule can
choose (list length, lanes, run length, groups per step, lanes per group, word loads; found by walking
grouped shapes of 64-512 experts through ``launch.all_plans``), the first shape that gets it, and compares
the rule's plan with its two-pass twin.

For each differing tile it also says whether the one-pass ids stay inside the kept groups of a float32
torch reference (the groups' ranking went right and the lists' merge went wrong) or not. ``--jobs N``
splits the tiles over N processes (compiling dominates: 1-27 s a kernel for sm_90 on a 2-core machine).
"""

import argparse

import parts as parts_module
import torch

from moe_routing.call import check_call
from moe_routing.kernels import launch
from moe_routing.kernels.launch import all_plans, bitonic_plan, one_pass_ok, one_pass_step, two_passes

# (experts, groups, kept, topk, lanes): lists of 8 / 16 / 32 keys, 1 / 2 / 4 groups per step, runs of 1
GRID = [
    (512, 8, 4, 8, 8), (512, 8, 4, 8, 16), (256, 8, 4, 8, 4), (256, 8, 4, 8, 8), (256, 8, 4, 8, 16),
    (256, 4, 2, 16, 4), (256, 4, 2, 16, 8), (256, 8, 4, 16, 2), (256, 8, 4, 16, 4), (256, 8, 4, 16, 8),
    (512, 8, 4, 20, 2), (512, 8, 4, 20, 4), (256, 8, 4, 20, 1), (256, 8, 4, 20, 2), (256, 8, 4, 20, 4),
]


def tile_class(call, plan) -> tuple:
    """(list length, lanes, run length, groups per step, lanes per group, word loads) of a one-pass plan."""
    c = plan.constexprs
    return (c["CHUNK"], c["LANES"], c["GROUP"], *one_pass_step(plan, call), c["WORDS"])


def rule_cases():
    """One (shape, plan) per distinct one-pass tile class the rule can choose."""
    seen = {}
    for experts in (64, 96, 128, 160, 192, 256, 320, 384, 512):
        for groups in (2, 4, 8, 16, 32, 64):
            if experts % groups:
                continue
            for kept in range(1, groups):
                for topk in range(1, min(32, kept * experts // groups) + 1):
                    call = check_call(torch.zeros(1, experts), topk, "sigmoid", torch.zeros(experts), groups, kept,
                                      True, 1.0, None)
                    for plan in all_plans(call, wide_loads=True, biased=True).values():
                        if plan.name == "bitonic" and plan.constexprs["ONE_PASS"]:
                            seen.setdefault(tile_class(call, plan), ((experts, groups, kept, topk), plan))
    return [seen[key] for key in sorted(seen)]


def grid_cases():
    cases = []
    for experts, groups, kept, topk, lanes in GRID:
        call = check_call(torch.zeros(1, experts), topk, "sigmoid", torch.zeros(experts), groups, kept, True, 1.0, None)
        if one_pass_ok(call, lanes, 1):
            two = bitonic_plan(call, lanes, 4, 1, 1, groups, prefetch=True)
            cases.append(((experts, groups, kept, topk), two._replace(constexprs={**two.constexprs, "ONE_PASS": True})))
        else:
            print(f"{experts}/{groups}:{kept} K={topk} lanes={lanes}: not a one-pass tile, skipped")
    return cases


def kept_groups_reference(logits, bias, groups, kept):
    """[T, groups] bool: the kept groups by a float32 torch reference (sum of each group's two best c)."""
    c = torch.sigmoid(logits.float()) + bias.float()
    top2 = c.view(c.shape[0], groups, -1).topk(2, dim=-1).values.sum(-1)
    chosen = top2.topk(kept, dim=-1).indices
    return torch.zeros_like(top2, dtype=torch.bool).scatter_(1, chosen, True)


def compare(shape, plan, tokens, device):
    experts, groups, kept, topk = shape
    gen = torch.Generator(device="cpu").manual_seed(0)
    logits = (torch.randn(tokens, experts, generator=gen) * 2).to(torch.bfloat16).to(device)
    bias = (torch.randn(experts, generator=gen) * 0.5).to(device)
    call = check_call(logits, topk, "sigmoid", bias, groups, kept, True, 2.5, None)
    results = []
    for one in (plan, two_passes(plan)):
        weights = torch.full((tokens, topk), float("nan"), device=device)
        ids = torch.full((tokens, topk), -1, dtype=torch.int32, device=device)
        launch(call, logits, bias, weights, ids, plan=one)
        results.append((weights, ids))
    (w1, i1), (w2, i2) = results
    differ = (i1 != i2).any(dim=1) | (w1 != w2).any(dim=1)
    cls = tile_class(call, plan)
    line = (f"{experts}/{groups}:{kept} K={topk}: list {cls[0]} keys, lanes {cls[1]}, runs of {cls[2]}, "
            f"{cls[3]} groups per step, {cls[4]} lanes per group, words {int(cls[5])} -> "
            f"{int(differ.sum())} of {tokens} rows differ")
    if differ.any():
        keep = kept_groups_reference(logits, bias, groups, kept)
        in_kept = lambda ids: int(keep.gather(1, (ids.long() // call.group_size).clamp(0, groups - 1)).all(1)[differ].sum())
        line += (f"; of those, one pass inside the reference's kept groups: {in_kept(i1)}, two passes: "
                 f"{in_kept(i2)}; first: one {i1[differ][0].tolist()} two {i2[differ][0].tolist()}")
    print(line, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rule", action="store_true", help="every one-pass tile class the rule can choose")
    ap.add_argument("--tokens", type=int, default=67)
    parts_module.add_arguments(ap)
    args = ap.parse_args()
    part, parts = parts_module.my_part(args)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cases = rule_cases() if args.rule else grid_cases()
    for shape, plan in cases[part::parts]:
        compare(shape, plan, args.tokens, device)


if __name__ == "__main__":
    main()
