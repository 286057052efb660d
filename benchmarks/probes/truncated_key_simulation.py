"""Probe (issue 3): how often a truncated 32-bit key (top value bits + index) orders rows wrongly (CPU).

Run: python benchmarks/probes/truncated_key_simulation.py   (prints wrong / flagged / missed row fractions)
"""
import torch
def ordered(c):
    b = c.view(torch.int32)
    return b ^ ((b >> 31) & 0x7FFFFFFF)
def run(T, E, K, P, dtype, bias_scale, logit_scale, softmax=False):
    torch.manual_seed(0)
    x = (torch.randn(T, E) * logit_scale).to(dtype).float()
    s = torch.softmax(x, -1) if softmax else torch.sigmoid(x)
    c = s + (torch.randn(E) * bias_scale if bias_scale else 0)
    key = ordered(c).long()
    pos = torch.arange(E)
    exact = key * 4096 + (4095 - pos)            # exact (value, lower index first)
    packed = ((key >> P) << P) | ((1 << P) - 1 - pos)  # value top bits | inverted position
    ex = exact.topk(K + 1, -1).indices
    pk = packed.topk(K + 1, -1).indices
    # a row needs the exact fix-up if the packed top-K (ordered) differs, or the boundary is uncertain
    bad = (ex[:, :K] != pk[:, :K]).any(-1)
    # detectable collision: adjacent pairs among top K+1 (packed) with equal truncated value but unequal keys
    tk = key.gather(1, pk) >> P
    fk = key.gather(1, pk)
    flag = ((tk[:, 1:] == tk[:, :-1]) & (fk[:, 1:] != fk[:, :-1])).any(-1)
    return bad.float().mean().item(), flag.float().mean().item(), (bad & ~flag).sum().item()
for (E, K, P) in [(256, 8, 8), (384, 8, 9), (64, 6, 6)]:
    for dt in [torch.bfloat16, torch.float32]:
        for bs, ls in [(0.0, 1.0), (0.01, 1.0), (0.5, 2.0), (0.0, 4.0), (0.001, 8.0)]:
            for sm in [False, True]:
                print(E, K, P, str(dt)[6:], "bias", bs, "logit", ls, "softmax" if sm else "sigmoid", "wrong/flagged/missed:", run(100000, E, K, P, dt, bs, ls, sm))
