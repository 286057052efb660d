"""Probe (issue 3 exploration): streaming bitonic top-k with different key encodings.

Not part of the library. Measures what a selection strategy costs before it is built properly:
  KEY = 0: exact, float64-bitcast packed key  (u32 ordered c << 20 | inverted position): DSETP compares
  KEY = 1: exact, int64 packed key              (same bits as int64: emulated 64-bit compares)
  KEY = 2: INEXACT int32 key (top 24 bits of c | 8-bit inverted position): speed reference only
Each lane streams chunks of CHUNK experts of its row; LANES lanes share a row and merge at the end.
"""

import triton
import triton.language as tl


@triton.jit
def _key(c, valid, col, KEY: tl.constexpr, POS_BITS: tl.constexpr):
    u = c.to(tl.uint32, bitcast=True)
    ordered = u ^ tl.where((u >> 31) != 0, 0xFFFFFFFF, 0x80000000).to(tl.uint32)
    ordered = tl.where(valid, ordered, 1).to(tl.uint32)
    inv = ((1 << POS_BITS) - 1 - col).to(tl.uint32)
    if KEY == 2:
        out = ((ordered >> POS_BITS) << POS_BITS) | inv
    elif KEY == 0:
        out = ((ordered.to(tl.uint64) << 20) | inv.to(tl.uint64)).to(tl.float64, bitcast=True)
    else:
        out = ((ordered.to(tl.uint64) << 20) | inv.to(tl.uint64)).to(tl.int64, bitcast=True)
    return out


@triton.jit
def _chunk_keys(base, bias_ptr, row_ok, lane, j, step, E: tl.constexpr, KEY: tl.constexpr, LANES: tl.constexpr,
                CHUNK: tl.constexpr, POS_BITS: tl.constexpr):
    """Load one chunk per (row, lane), compute sigmoid + bias keys, return them sorted descending."""
    col = (step * LANES + lane)[:, None] * CHUNK + j[None, :]
    inside = col < E
    x = tl.load(base + col[None, :, :], mask=row_ok[:, None, None] & inside[None], other=0.0).to(tl.float32)
    b = tl.load(bias_ptr + col, mask=inside, other=0.0).to(tl.float32)
    c = tl.sigmoid(x) + b[None]
    valid = (tl.abs(x) < float("inf")) & inside[None]
    return tl.topk(_key(c, valid, col[None], KEY, POS_BITS), CHUNK, dim=2)


@triton.jit
def stream_topk_probe(logits_ptr, bias_ptr, stride_row, weights_ptr, ids_ptr, num_rows, scale,
                      E: tl.constexpr, TOPK: tl.constexpr, KEY: tl.constexpr, LANES: tl.constexpr,
                      CHUNK: tl.constexpr, ROWS: tl.constexpr, POS_BITS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < num_rows
    lane = tl.arange(0, LANES)
    j = tl.arange(0, CHUNK)
    STEPS: tl.constexpr = (E + LANES * CHUNK - 1) // (LANES * CHUNK)
    base = logits_ptr + rows.to(tl.int64)[:, None, None] * stride_row
    acc = _chunk_keys(base, bias_ptr, row_ok, lane, j, 0, E, KEY, LANES, CHUNK, POS_BITS)
    for step in range(1, STEPS):  # a runtime loop: code size independent of E
        acc = tl.maximum(tl.bitonic_merge(acc),
                         _chunk_keys(base, bias_ptr, row_ok, lane, j, step, E, KEY, LANES, CHUNK, POS_BITS))
    best = tl.topk(tl.reshape(acc, (ROWS, LANES * CHUNK)), CHUNK, dim=1)
    # decode: position, then the weight from a re-read of the chosen logits (sigmoid recomputed)
    if KEY == 2:
        bits = best.to(tl.uint32, bitcast=True)
        pos = ((1 << POS_BITS) - 1) - (bits & ((1 << POS_BITS) - 1)).to(tl.int32)
    else:
        bits = best.to(tl.uint64, bitcast=True)
        pos = ((1 << POS_BITS) - 1) - (bits & 0xFFFFF).to(tl.int32)
    slot = tl.arange(0, CHUNK)
    out_mask = row_ok[:, None] & (slot < TOPK)[None, :]
    xs = tl.load(logits_ptr + rows.to(tl.int64)[:, None] * stride_row + pos, mask=out_mask, other=0.0).to(tl.float32)
    w = tl.where(tl.abs(xs) < float("inf"), tl.sigmoid(xs), 0.0)
    w = tl.where(out_mask, w, 0.0)
    total = tl.sum(w, axis=1)
    w = w / tl.where(total > 0, total, 1.0)[:, None] * scale
    tl.store(weights_ptr + rows[:, None] * TOPK + slot[None, :], w, mask=out_mask)
    tl.store(ids_ptr + rows[:, None] * TOPK + slot[None, :], pos, mask=out_mask)
