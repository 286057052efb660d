"""A representative set of route() calls for `compute-sanitizer --tool memcheck` (small, every path).

Exits non-zero if any result disagrees with the float64 judge, so the sanitizer run also checks values.
"""

import sys

import torch

import moe_routing
from moe_routing.measure.verify import verify

CASES = [  # (tokens, experts, topk, groups, topk_group, scoring, bias)
    (1, 2, 1, 1, 1, "sigmoid", True), (3, 257, 8, 1, 1, "sigmoid", True), (13, 1021, 31, 1, 1, "softmax", False),
    (7, 256, 8, 8, 4, "sigmoid", True), (5, 160, 6, 8, 3, "softmax", True), (9, 96, 3, 32, 2, "sigmoid", True),
    (33, 384, 8, 1, 1, "sigmoid", True), (4100, 256, 8, 8, 4, "sigmoid", True), (4100, 64, 6, 1, 1, "sigmoid", True),
    (2, 1024, 32, 1, 1, "sigmoid", True), (5, 4096, 64, 1, 1, "softmax", False),
]
failures = 0
for tokens, experts, topk, groups, topk_group, scoring, with_bias in CASES:
    logits = (torch.randn(tokens, experts, device="cuda") * 2).bfloat16()
    logits[0, 0] = float("nan")
    logits[-1] = float("inf")
    bias = torch.randn(experts, device="cuda") * 0.5 if with_bias else None
    kw = dict(scoring_func=scoring, correction_bias=bias, num_expert_group=groups, topk_group=topk_group)
    weights, ids = moe_routing.route(logits, topk, **kw)
    out = (torch.empty(tokens + 3, topk + 2, device="cuda")[1:-2, 1:-1],
           torch.empty(tokens + 3, topk + 2, dtype=torch.int32, device="cuda")[1:-2, 1:-1])
    moe_routing.route(logits[:, :], topk, out=out, **kw)
    torch.cuda.synchronize()
    verdict = verify(weights, ids, logits, topk, **kw)
    same = torch.equal(out[1], ids) and torch.equal(out[0], weights)
    print(tokens, experts, topk, f"{groups}:{topk_group}", scoring, "ok" if verdict.ok and same else "FAILED")
    failures += not (verdict.ok and same)
sys.exit(1 if failures else 0)
