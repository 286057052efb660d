"""Decode-size selection by K rounds of one 32-bit warp reduction (issue 3, session 20 probe).

Run: python benchmarks/probes/decode_rounds_probe.py --sass            (static: compiled for sm_90 here)
     python benchmarks/probes/decode_rounds_probe.py --out DIR [--rounds 5]   (GPU: timed against the rule)

Idea: at T <= 256 a row sits on one warp and its time is one dependent chain (NOTES.md v7, v10). The
window keys are 32-bit unsigned integers, and sm_80+ reduce a 32-bit integer across a warp in one
instruction (``REDUX.MAX``, which Triton emits for ``tl.max`` of uint32 over a whole warp). So the K picks
can be K rounds of (in-thread max of the thread's keys, one REDUX, remove the winner) instead of a
bitonic sort of each lane's list and log2(lanes) halving merges with their shuffles. The same keys, so
the same picks; the weights as the kernel forms them. Flat sigmoid with bias only; rows with a pick on
the window's floor are not redone here (the probe checks every row's ids against the rule's kernel).
``INT_WINDOW`` also takes the bias window's min and max as REDUX of order-preserving bits instead of
float shuffles.
"""

import argparse
import json
import re
import statistics
import subprocess
import tempfile
from pathlib import Path

import torch
import triton
import triton.language as tl

from moe_routing.kernels._bitonic import (Q_BASE, Q_SPAN, WINDOW_KEYS, _finite_choice, _key_expert, _window,
                                          _window_choice, _window_key)
from moe_routing.kernels._common import finish_weights, sigmoid_scores

@triton.jit
def _ordered(v):
    """Order-preserving unsigned bits of float32 ``v`` (no NaN)."""
    bits = v.to(tl.uint32, bitcast=True)
    return bits ^ tl.where((bits >> 31) != 0, 0xFFFFFFFF, 0x80000000).to(tl.uint32)


@triton.jit
def _unordered(o):
    bits = o ^ tl.where((o >> 31) != 0, 0x80000000, 0xFFFFFFFF).to(tl.uint32)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _int_window(bias_ptr, NUM_EXPERTS: tl.constexpr, BLOCK_EXPERTS: tl.constexpr):
    """_bitonic._window with min and max as 32-bit integer reductions (REDUX)."""
    e = tl.arange(0, BLOCK_EXPERTS)
    b = tl.load(bias_ptr + e, mask=e < NUM_EXPERTS, other=0.0).to(tl.float32)
    bad = (tl.abs(b) == float("inf")) | (b != b)
    o = _ordered(tl.where(bad, 0.0, b))
    lo = _unordered(tl.min(o, axis=0))
    hi = _unordered(tl.max(o, axis=0))
    finite = tl.max(bad.to(tl.int32), axis=0) == 0
    top = hi + 1.0
    lowest = tl.maximum(lo, top - 2.0)
    usable = finite & (top < 4.0) & (lowest > -4.0)
    steps = tl.full((), Q_SPAN, tl.float32) / (top - lowest)
    return -(lowest * steps) + Q_BASE, steps, usable


@triton.jit
def _columns(x, COUNT: tl.constexpr):
    """[N, COUNT] (a thread's COUNT values in its registers) -> a tuple of COUNT [N] tensors, column by column
    (register moves only: halving by reshape, permute and split)."""
    N: tl.constexpr = x.shape[0]
    parts = (x,)
    for level in tl.static_range(5):
        if (1 << level) < COUNT:
            halves = ()
            for p in tl.static_range(1 << level):
                a, b = tl.split(tl.permute(tl.reshape(parts[p], (N, 2, COUNT >> (level + 1))), (0, 2, 1)))
                halves = halves + (a, b)
            parts = halves
    columns = ()
    for c in tl.static_range(COUNT):
        columns = columns + (tl.reshape(parts[c], (N,)),)
    return columns


@triton.jit
def _rounds_sorted(keys, TOPK: tl.constexpr, CHUNK: tl.constexpr, PER: tl.constexpr):
    """K rounds over keys [32, PER] (a thread's PER keys in registers): each thread's keys sorted once
    (descending, in registers), then per round one REDUX of the heads and a shift of the winner's list."""
    KEEP: tl.constexpr = min(PER, TOPK)
    if PER > TOPK:
        keys = tl.topk(keys, KEEP, dim=1)
    else:
        keys = tl.sort(keys, dim=1, descending=True)
    cols = _columns(keys, KEEP)
    slot = tl.arange(0, CHUNK)
    best = tl.zeros((CHUNK,), tl.uint32)
    for r in tl.static_range(TOPK):
        m = tl.max(cols[0], axis=0)
        best = tl.where(slot == r, m, best)
        won = cols[0] == m
        shifted = ()
        for j in tl.static_range(KEEP - 1):
            shifted = shifted + (tl.where(won, cols[j + 1], cols[j]),)
        shifted = shifted + (tl.where(won, 0, cols[KEEP - 1]).to(tl.uint32),)
        cols = shifted
    return best


@triton.jit
def decode_rounds_kernel(logits_ptr, bias_ptr, stride_l_row, weights_ptr, ids_ptr, stride_w_row, stride_i_row,
                         num_rows, scale, TOPK: tl.constexpr, RENORMALIZE: tl.constexpr, NUM_EXPERTS: tl.constexpr,
                         BLOCK_EXPERTS: tl.constexpr, CHUNK: tl.constexpr, LOG2_CHUNK: tl.constexpr,
                         INT_WINDOW: tl.constexpr, SORTED: tl.constexpr = False):
    row = tl.program_id(0).to(tl.int64)
    PER: tl.constexpr = BLOCK_EXPERTS // 32
    if SORTED and PER > 8:  # [PER / 8, 32, 8]: a thread's 16-byte pieces, one per 256 experts
        e = (tl.arange(0, PER // 8)[:, None, None] * 256 + tl.arange(0, 32)[None, :, None] * 8
             + tl.arange(0, 8)[None, None, :])
    elif SORTED:  # a thread's PER experts along the second axis
        e = tl.arange(0, 32)[:, None] * PER + tl.arange(0, PER)[None, :]
    else:
        e = tl.arange(0, BLOCK_EXPERTS)
    exists = e < NUM_EXPERTS
    x = tl.load(logits_ptr + row * stride_l_row + e, mask=exists, other=0.0)  # issued before the window
    if INT_WINDOW:
        offset, steps, usable = _int_window(bias_ptr, NUM_EXPERTS, BLOCK_EXPERTS)
    else:
        offset, steps, usable = _window(bias_ptr, NUM_EXPERTS, BLOCK_EXPERTS)
    b = tl.load(bias_ptr + e, mask=exists, other=0.0).to(tl.float32)
    xf = x.to(tl.float32)
    keys = _window_key(_finite_choice(xf, _window_choice(xf, b)), e, exists, offset, steps,
                       BLOCK_EXPERTS != NUM_EXPERTS)
    slot = tl.arange(0, CHUNK)
    if SORTED:
        if PER > 8:
            keys = tl.reshape(tl.permute(keys, (1, 0, 2)), (32, PER))
        best = _rounds_sorted(keys, TOPK, CHUNK, PER)
    else:
        best = tl.zeros((CHUNK,), tl.uint32)
        for r in tl.static_range(TOPK):
            m = tl.max(keys, axis=0)
            best = tl.where(slot == r, m, best)
            keys = tl.where(keys == m, 0, keys).to(tl.uint32)
    expert, valid = _key_expert(best, WINDOW_KEYS)
    out = slot < TOPK
    xs = tl.load(logits_ptr + row * stride_l_row + expert, mask=out & valid, other=0.0)
    chosen = tl.where(out, sigmoid_scores(xs.to(tl.float32), valid), 0.0)
    weights = tl.reshape(finish_weights(tl.reshape(chosen, (1, CHUNK)), slot, TOPK, RENORMALIZE, 1, CHUNK,
                                        LOG2_CHUNK, scale), (CHUNK,))
    tl.store(weights_ptr + row * stride_w_row + slot, weights, mask=out)
    tl.store(ids_ptr + row * stride_i_row + slot, expert, mask=out)


ATTRS = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]], (2,): [["tt.divisibility", 16]]}


def constexprs(experts, topk, int_window, sorted_lists=False):
    chunk = max(8, triton.next_power_of_2(topk))
    return dict(TOPK=topk, RENORMALIZE=True, NUM_EXPERTS=experts, BLOCK_EXPERTS=triton.next_power_of_2(experts),
                CHUNK=chunk, LOG2_CHUNK=chunk.bit_length() - 1, INT_WINDOW=int_window,
                SORTED=sorted_lists)


def sass(experts, topk, int_window, sorted_lists=False):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    sig = {"logits_ptr": "*bf16", "bias_ptr": "*fp32", "stride_l_row": "i32", "weights_ptr": "*fp32",
           "ids_ptr": "*i32", "stride_w_row": "i32", "stride_i_row": "i32", "num_rows": "i32", "scale": "fp32"}
    compiled = triton.compile(ASTSource(decode_rounds_kernel, sig, constexprs(experts, topk, int_window, sorted_lists), ATTRS),
                              target=GPUTarget("cuda", 90, 32), options={"num_warps": 1})
    binary = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        text = subprocess.run([str(binary), "-sass", f.name], capture_output=True, text=True).stdout
    ops = [m.group(1) for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", text)]
    ops = [o for o in ops if o != "NOP"]
    kinds = {k: sum(o.startswith(k) for o in ops) for k in ("REDUX", "SHFL", "BAR", "LDS", "STS", "LDG", "MUFU")}
    return len(ops), kinds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sass", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 128])
    args = ap.parse_args()
    shapes = [(64, 6), (256, 8), (384, 8), (128, 8), (512, 8)]
    if args.sass:
        for experts, topk in shapes:
            for iw, so in ((False, False), (False, True)):
                n, kinds = sass(experts, topk, iw, so)
                print(f"{experts}/{topk} int_window={iw} sorted={so}: {n} instructions {kinds}")
        return
    from moe_routing.call import check_call
    from moe_routing.kernels import launch
    from moe_routing.measure.bench import Shape, graph_time_us, make_inputs
    rows = []
    for experts, topk in shapes:
        for tokens in args.tokens:
            shape = Shape(experts, topk, tokens)
            inputs = make_inputs(shape)
            call = check_call(inputs.logits[0], topk, "sigmoid", inputs.bias, 1, 1, True, 2.5, None)
            sets = len(inputs.logits)
            w, i = inputs.weights, inputs.ids
            w2, i2 = torch.empty_like(w), torch.empty_like(i)

            def probe(s, iw):
                decode_rounds_kernel[(tokens,)](inputs.logits[s], inputs.bias, inputs.logits[s].stride(0), w2, i2,
                                                w2.stride(0), i2.stride(0), tokens, 2.5, num_warps=1,
                                                **constexprs(experts, topk, iw))
            bad = 0
            for s in range(sets):
                launch(call, inputs.logits[s], inputs.bias, w, i)
                for iw in (False, True):
                    w2.fill_(-1), i2.fill_(-1)
                    probe(s, iw)
                    torch.cuda.synchronize()
                    bad += int((i2 != i).any(dim=1).sum()) + int((w2 - w).abs().max() > 1e-6)
            arms = {"rule": lambda s: launch(call, inputs.logits[s], inputs.bias, w, i),
                    "rounds": lambda s: probe(s, False), "rounds+int window": lambda s: probe(s, True)}
            times = {name: [] for name in arms}
            for _ in range(args.rounds):
                for name, arm in arms.items():
                    times[name].append(statistics.median(graph_time_us(arm, sets, 50, 20)))
            line = {"shape": f"{experts}/{topk}", "tokens": tokens, "mismatched": bad}
            for name, values in times.items():
                med = statistics.median(values)
                line[name] = [round(med, 3), round((max(values) - min(values)) / med * 100, 1)]
            print(json.dumps(line), flush=True)
            rows.append(line)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "decode_rounds_probe.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
