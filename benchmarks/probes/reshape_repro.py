"""A minimal kernel for the wrong one-pass group scores of kernels v6-v9 (NOTES.md v10): is it Triton's?

Run: python benchmarks/probes/reshape_repro.py        (GPU; the interpreter runs it too)

Each program loads ROWS rows of LANES x CHUNK x GROUP logits as [ROWS, LANES, CHUNK, GROUP] (the
bitonic kernel's step load), reshapes them to [ROWS, GROUPS, LANES * CHUNK * GROUP / GROUPS] as v9's
``_select_one_pass`` did, and stores each group's maximum (``MODE`` 0), its two largest by v9's split and
pairwise reduce (1), or the maximum next to a ``tl.topk`` of the same values along the chunk axis, as the
one-pass step also sorted them (2). Prints, per tile, how many rows differ from torch's answer.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _combine(a_best, a_second, b_best, b_second):
    return tl.maximum(a_best, b_best), tl.maximum(tl.minimum(a_best, b_best), tl.maximum(a_second, b_second))


@triton.jit
def reshape_kernel(x_ptr, out_ptr, sorted_ptr, num_rows, ROWS: tl.constexpr, LANES: tl.constexpr,
                   CHUNK: tl.constexpr, GROUP: tl.constexpr, GROUPS: tl.constexpr, MODE: tl.constexpr):
    E: tl.constexpr = LANES * CHUNK * GROUP
    SIZE: tl.constexpr = E // GROUPS
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    lane = tl.arange(0, LANES)[:, None, None]
    member = tl.arange(0, CHUNK)[None, :, None]
    within = tl.arange(0, GROUP)[None, None, :]
    expert = (lane * CHUNK + member) * GROUP + within
    ok = (rows < num_rows)[:, None, None, None]
    x = tl.load(x_ptr + rows[:, None, None, None].to(tl.int64) * E + expert[None], mask=ok, other=0.0).to(tl.float32)
    grouped = tl.reshape(x, (ROWS, GROUPS, SIZE))
    if MODE == 1:
        left, right = tl.split(tl.reshape(grouped, (ROWS, GROUPS, SIZE // 2, 2)))
        best, second = tl.reduce((tl.maximum(left, right), tl.minimum(left, right)), 2, _combine)
        score = best + second
    else:
        score = tl.max(grouped, axis=2)
    g = tl.arange(0, GROUPS)
    tl.store(out_ptr + rows[:, None] * GROUPS + g[None, :], score, mask=(rows < num_rows)[:, None])
    if MODE == 2:
        keys = tl.topk(tl.max(x, axis=3), CHUNK, dim=2)  # [ROWS, LANES, CHUNK]
        k = tl.arange(0, CHUNK)
        tl.store(sorted_ptr + rows[:, None, None] * (LANES * CHUNK) + tl.arange(0, LANES)[None, :, None] * CHUNK
                 + k[None, None, :], keys, mask=(rows < num_rows)[:, None, None])


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokens = 67
    # (lanes, chunk, group, groups, rows): v10's failing classes first (two groups of two lanes), then passing ones
    tiles = [(4, 8, 4, 2, 4), (4, 16, 1, 2, 8), (4, 16, 4, 2, 4), (4, 32, 1, 2, 4), (8, 16, 1, 2, 4), (8, 16, 1, 4, 4),
             (8, 8, 1, 2, 4), (16, 8, 1, 2, 4), (4, 8, 4, 4, 4), (4, 8, 4, 1, 4)]
    for lanes, chunk, group, groups, rows in tiles:
        experts = lanes * chunk * group
        gen = torch.Generator().manual_seed(experts)
        x = torch.randn(tokens, experts, generator=gen).to(torch.bfloat16).to(device)
        xs = x.float().view(tokens, groups, -1)
        top2 = xs.topk(2, dim=-1).values
        for mode in (0, 1, 2):
            out = torch.full((tokens, groups), float("nan"), device=device)
            srt = torch.zeros(tokens, lanes * chunk, device=device)
            reshape_kernel[(triton.cdiv(tokens, rows),)](x, out, srt, tokens, ROWS=rows, LANES=lanes, CHUNK=chunk,
                                                        GROUP=group, GROUPS=groups, MODE=mode, num_warps=1)
            want = top2.sum(-1) if mode == 1 else top2[..., 0]
            bad = int((out != want).any(1).sum())
            print(f"lanes {lanes} chunk {chunk} run {group} groups {groups} rows {rows} mode {mode}: "
                  f"{bad} of {tokens} rows differ", flush=True)


if __name__ == "__main__":
    main()
