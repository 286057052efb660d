"""The streaming bitonic routing kernel: sigmoid scoring (with or without bias), flat or grouped, and flat
softmax without bias; the kernel only.

Selection without K sequential full-row reductions. Every expert gets one key that orders experts
as the semantics do (larger choice value ``c`` first, ties to the lower index, invalid experts after
valid ones, padding last); ``LANES`` lanes share a row; each lane streams its experts, keeps its top
``CHUNK`` keys with a bitonic merge per step, and the lanes' lists merge into the row's top ``CHUNK``
by halving (``_merge_lanes``).

Grouped routing (some group can be eliminated) runs a group stage first (``_kept_group_bits``): each
group's score in float32 from the row, ``GROUPS_PER_LOAD`` groups per load, exactly as the reference
forms it (the sum of the two largest valid ``c``, by a pairwise max/min and an exact top-2 merge), and
the groups' ranks. The selection then streams every expert as on the flat path, and an expert of an
eliminated group is not read and gets key 0 (below everything), so the same streaming code and tiles
serve both paths; a run of the filter never straddles two groups (``GROUP`` divides the group size).
``ONE_PASS`` (window keys, tiles whose steps hold whole groups) does both in one read of the
row (``_select_one_pass``): each step's ``c`` feed the group scores and the keys, every step's sorted
lists wait in registers until the groups are ranked, and the eliminated groups' lists become 0 before
they merge: the same keys and the same bits as the two passes, with half the reads and sigmoids.
(Streaming only the kept groups' experts instead needs a per-row gather of positions and of the bias,
whose layout conversions cost more than the masked half of the stream: 50 vs 46 instructions per
logit in static counts, docs/kernel-design-log.md.)

Three key encodings. Which one a row gets depends only on the bias and on that row, never on the
batch or the tile, so results stay batch-invariant:

* **window keys** (32 bits, ``E <= 512``). Every ``c`` is at most ``top = max b + 1``. The window
  ``[L, top]``, ``L = max(min b, top - 2)``, is used when it lies inside (-8, 8): one FMA gives
  ``q = round(c * scale + offset)`` (the float 2**23 + q holds q) with ``scale = (2**23 - 256) / (top - L)``,
  steps of at most 2.4e-7, above 9 bits of inverted index. Budget: experts whose float64 choice values
  differ by 1e-6 differ in float32 by at least 1e-6 - 2 x (2e-7 sigmoid error + 1.2e-7 rounding of
  ``c``) = 3.6e-7 where ``|c| < 4``, more than a step; where ``|c|`` is 4 to 8 (a trained checkpoint's bias
  can sit there: DeepSeek-V3's is reported around +5) by more than 0 (1e-6 - 2 x (2e-7 + 2.4e-7)), so by at least one
  float32 step of ``c`` there, 4.8e-7, two steps of the window. Either way their keys keep that order
  (docs/semantics.md's margin); beyond 8 float32 ``c`` itself cannot keep it, and rows take exact keys. The
  quantisation is monotone: it can only reorder choice values closer than that (near ties), and equal
  values stay in index order. Values below ``L`` and invalid experts share the floor; a row whose K-th
  pick is under the window (fewer than K valid experts in it: garbage rows, NaN logits) is redone with
  exact keys. Compares are single 32-bit min/max instructions.
* **certified window keys** (sqrt-softplus with a bias, ``E <= 512``, K below the list length). Sqrt-softplus
  scores are unbounded, but every valid ``c = s + b`` is at least ``min b``: the window is ``[min b, min b + 8]``
  (steps of 9.5e-7, values beyond it on a ceiling key), used when ``min b`` lies inside (-16, 16) and the bias is
  finite. The keys' ``c`` comes from three bare MUFU approximations (``_window_sqrtsoftplus``: no division, no
  selects), within 8e-7 + 3.2e-7 s of the exact ``c`` from a logit of -3 up, and below ``max b + 0.2215`` for
  logits under -3. The keys' order is then made exact (the same ids as exact keys give: float32 ``c``, ties to the
  lower index, whatever the window or the tile): a row is certain when its first K + 1 keys lie more than
  ``3 + (q >> 20)`` steps apart and the K-th lies above the inaccurate scores' bound (``_sqrt_certain``); otherwise
  its listed experts are ranked by exact keys and kept where at least K of them beat what any unlisted expert's key
  allows (``_certify_sqrt``, on the rounds tile too); otherwise it is redone with exact keys.
* **exact keys** (64 bits: ``E > 512``, a non-finite bias entry, a window outside (-8, 8), and the
  redone rows): the order-preserving bits of float32 ``c`` above 20 bits of inverted index, held as a
  float64 (non-negative denormals: float64 compares order them like the integers, on the FP64 pipe
  instead of emulated 64-bit integer compares). They stream without the run filter (``GROUP = 1``):
  their wider keys would otherwise raise the register count, and with it lower the occupancy, of
  the whole kernel.

Softmax (``SCORING``: flat, no bias; launch.bitonic_supported) is ranked by the logits
themselves: softmax is strictly increasing in the logit, so the semantics' order of ``c = s`` is the
logits' order (equal logits: lower index first; float32 softmax values can tie where the logits differ,
but such rows' float64 margin is below one float32 step, a near tie). 16-bit logits of rows up to 512
experts get 32-bit keys from their own bits (**logit keys**: the bits made order-preserving above 9 bits
of inverted index, -0 as +0, non-finite ones below every finite one); float32 logits and longer rows
get the exact keys of the float32 logit. No sigmoid and no window: nothing is redone. The weights are
``exp(x - max)`` of the chosen logits over their float32 sum when renormalised (the row's softmax
denominator cancels: the row is read once), else over the row's sum of ``exp(x - max)``, read again in
an order that does not depend on the tile (``_softmax_total``). Flat sigmoid without bias beyond 512
experts is ranked the same way, by the exact keys of the float32 logit instead of those of its
sigmoid (sigmoid is strictly increasing; float32 sigmoids that tie where the logits differ, saturated near
1 or underflowed to 0, are near ties); up to 512 experts it keeps window keys, which measured faster than
16-bit logit keys there (docs/kernel-design-log.md).

Lists hold ``CHUNK`` = 8, 16 or 32 keys (K <= 32).

Small batches (``ROUNDS``: one row on one warp, at most 512 experts, K <= 8, 32-bit keys; up to 2047
tokens, or 3071 for 256 and 512 experts, by the rule) select without lanes' lists: each thread holds 2-16 of the row's experts, sorts their keys in registers, and K rounds
each take the warp's largest first key with one 32-bit integer reduction (``REDUX`` on sm_80+) and move the
winner's list up (``_select_rounds``). Same keys, so the same picks and bits as the lane merge. Sqrt-softplus rows
take K + 1 rounds: those picks certify the first K by their gaps (``_gaps_certain``); an uncertain row takes the rest
of the CHUNK rounds, and one whose gaps leave one adjacent pair in doubt is settled by that pair's two exact c
(``_swap_close_pair``), any other ranked from all CHUNK picks (``_certify_sqrt``); the K weights' scores are formed
one a lane and handed back by one reduction each (``_lane_scores``).

``GROUP > 1`` adds a filter for long rows: a lane keeps only the best key of each run of ``GROUP``
consecutive experts (one max per expert) and streams those; the row's top ``CHUNK`` runs hold its top
``CHUNK`` experts (an expert outside them is beaten by the best keys of ``CHUNK`` other runs, i.e. by
``CHUNK`` experts), so their ``CHUNK * GROUP`` experts are re-read (cache hits) and selected exactly.
Weights come from re-reading the K chosen logits and the sigmoid of ``_common``.

Loads (chosen per tile by rules.py): ``PREFETCH`` reads each step's logits one step ahead
and the first step's before the bias window; ``WORDS`` reads aligned 16-bit logits as 64-bit
words; with both on a lane-per-row tile each thread also reads its step's bias itself (``_step_bias``).
They only change when values arrive, never which values are used.

Tiles of one or two lanes a row take a shorter step without changing a bit of any key: bfloat16 words unpack
straight to float32, a step's keys are formed by the experts' place in the step and get the step's index bits once
per sorted key (``PLACE_LANES``), sorts of 8 run Batcher's network (``_sort_descending``), and the lane-per-row tail
merges its 32 candidates as four sorted lists. Dense outputs are stored with their layout compiled in
(``DENSE_OUT``, ``_store_outputs``: vector stores) on the lane-per-row tiles.

``CHECKED_STREAM`` off (where the rule measured it faster: the four-lane tile) forms a stream's
window keys of runs without the finite check and leaves it to the tail, which re-keys its candidates exactly anyway and
redoes a row with a non-finite candidate (``_finish_select``): the same picks and bits.

The four-lane tile sorts its 32 candidates a row as four lists of 8, one a thread, merged across the row's
threads (``_finish_select``); ``STORE_FIRST`` (where the rule measured it faster) stores the rows the window
settles before the exact redo of the others (``_route_streaming``): the same bits.

``GRID_WAIT`` (on NVIDIA GPUs of compute capability 9.0 and later, launch.py's ``with_device``): the kernel is launched
with programmatic dependent launch: its programs may start while the stream's previous kernel drains, and each first
waits (``griddepcontrol.wait``) until that kernel has completed and its writes are visible, before reading anything.
"""

import torch
import triton
import triton.language as tl

from ._common import (SIGMOID, SOFTMAX, SQRTSOFTPLUS, elementwise_scores, finish_weights, kept_groups,
                      sigmoid_scores, sqrtsoftplus_scores, top2_group_score, tree_sum)

# exact keys
POSITION_BITS = tl.constexpr(20)
POSITION_MASK = tl.constexpr((1 << 20) - 1)
ORDER_INVALID = tl.constexpr(1)  # ordered value of an invalid expert; padding gets 0; valid ones >= 0x00800000
# key encodings (the KEYS constexpr)
EXACT_KEYS = tl.constexpr(0)  # 64 bits: sigmoid c, exact
WINDOW_KEYS = tl.constexpr(1)  # 32 bits: sigmoid c in the bias window
LOGIT16_KEYS = tl.constexpr(2)  # 32 bits: softmax, the 16-bit logit's own bits (E <= 512)
LOGIT_KEYS = tl.constexpr(3)  # 64 bits: softmax, the float32 logit, exact
SQRTSOFTPLUS_KEYS = tl.constexpr(4)  # 64 bits: sqrt-softplus c, exact
SQRT_WINDOW_KEYS = tl.constexpr(5)  # 32 bits: sqrt-softplus c (the keys' approximation) in the bias window
# window keys: y = 2**23 + q holds the integer q in its low 23 bits; key = q << 9 | (511 - expert)
WINDOW_EXPERTS = tl.constexpr(512)
MAX_LANES = tl.constexpr(64)  # lanes per row that _merge_lanes merges: six halvings
LOG2_MAX_LANES = tl.constexpr(6)
INDEX_BITS = tl.constexpr(9)
INDEX_MASK = tl.constexpr(511)
LOGIT16_INVALID = tl.constexpr(4)  # ordered value of a non-finite 16-bit logit: below every finite one (>= 128)
Q_FLOOR = tl.constexpr(8388612.0)  # 2**23 + 4: below the window, and invalid experts (q = 4); padding has key 0
Q_BASE = tl.constexpr(8388672.0)  # 2**23 + 64: the bottom of the window (q = 64, give or take the offset's rounding)
Q_SPAN = tl.constexpr(8388352.0)  # 2**23 - 256 steps across the window: q stays below 2**23 - 128
Q_VALID = tl.constexpr(32)  # q below this: under the window or invalid
WINDOW_WIDTH = tl.constexpr(2.0)
WINDOW_LIMIT = tl.constexpr(8.0)  # the window must lie inside (-8, 8), where float32 c keeps the 1e-6 margin
# sqrt-softplus window keys (module docstring): the window [min b, min b + 8], keys clamped below 2**23 q-steps
SQRT_WINDOW_WIDTH = tl.constexpr(8.0)
SQRT_WINDOW_LIMIT = tl.constexpr(16.0)  # min b must lie inside (-16, 16)
Q_CEIL = tl.constexpr(16777215.0)  # 2**24 - 1: q = 2**23 - 1, the largest key (c beyond the window)
Q_CEIL_BITS = tl.constexpr(8388607)  # its q
SQRT_KEY_ERROR = tl.constexpr(4e-6)  # |key's c - c| bound where the logit is at least SQRT_ACCURATE_FROM
# q-steps two keys must lie apart, from q: 3 + (q >> 20), for |key's c - c| <= 8e-7 + 3.2e-7 s (``_sqrt_certain``)
SQRT_GAP = tl.constexpr(3)
SQRT_GAP_SHIFT = tl.constexpr(20)
SQRT_ACCURATE_FROM = tl.constexpr(-3.0)
SQRT_SCORE_BELOW = tl.constexpr(0.2215)  # above sqrt(softplus(-3)) = 0.22054: every s under SQRT_ACCURATE_FROM
MINUS_LOG2E = tl.constexpr(-1.4426950408889634)
LOG2E = tl.constexpr(1.4426950408889634)
SQRT_LN2 = tl.constexpr(0.8325546111576977)
# PTX approximations on NVIDIA GPUs; the plain expression in the interpreter and on ROCm
PTX_SIGMOID = tl.constexpr(not triton.knobs.runtime.interpret and torch.version.hip is None)
# Triton's interpreter rounds tl.fma twice (a product, then a sum); the keys' FMA is formed in float64 there instead
FMA_IN_FLOAT64 = tl.constexpr(bool(triton.knobs.runtime.interpret))


def use_plain_math() -> None:
    """Compile the plain expression instead of the PTX approximations from now on in this process: for AMD
    targets compiled where torch is not a ROCm build (``moe-routing compile-check``). Call it before the first
    compile (Triton hashes a kernel's globals once)."""
    global PTX_SIGMOID
    PTX_SIGMOID = tl.constexpr(False)


@triton.jit
def _window_sigmoid(x):
    """1 / (1 + 2^(-x log2 e)) with the bare MUFU approximations (flush-to-zero), for window keys only.

    In the normal range this is the same arithmetic as ``sigmoid_scores`` (ex2 and reciprocal
    approximations) without its denormal fix-ups, which cost three ALU instructions per expert; it
    differs only where the score is below 1e-37, far inside one quantisation step. The interpreter and
    ROCm get the plain expression.
    """
    if PTX_SIGMOID:
        e = tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [x * MINUS_LOG2E], dtype=tl.float32,
                                      is_pure=True, pack=1)
        return tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=r,r", [1.0 + e], dtype=tl.float32,
                                         is_pure=True, pack=1)
    else:
        return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _window_sqrtsoftplus(x):
    """sqrt(log2(1 + 2^(x log2 e))), whose product with sqrt(ln 2) is sqrt(softplus(x)), with the bare MUFU
    approximations (flush-to-zero), for window keys only: three approximations and no correction of 1 + e's
    rounding, where ``sqrtsoftplus_scores`` (the weights, exact keys) also divides and selects. Its error is
    bounded (SQRT_KEY_ERROR from SQRT_ACCURATE_FROM up; below it, where 1 + e loses e's bits, s is under
    SQRT_SCORE_BELOW either way), which the certificate in ``_certify_sqrt`` allows for. Beyond x = 88 it is +inf
    (the keys' ceiling). The interpreter and ROCm get the plain expression, with the same bound."""
    if PTX_SIGMOID:
        e = tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [x * LOG2E], dtype=tl.float32,
                                      is_pure=True, pack=1)
        l2 = tl.inline_asm_elementwise("lg2.approx.ftz.f32 $0, $1;", "=r,r", [1.0 + e], dtype=tl.float32,
                                       is_pure=True, pack=1)
        return tl.inline_asm_elementwise("sqrt.approx.ftz.f32 $0, $1;", "=r,r", [l2], dtype=tl.float32,
                                         is_pure=True, pack=1)
    else:
        return tl.sqrt(tl.log2(1.0 + tl.exp2(x * LOG2E)))


@triton.jit
def _window_choice(x, bias):
    """c = s + b of float32 logits ``x`` with the window keys' sigmoid (``bias`` None: s)."""
    choice = _window_sigmoid(x)
    if bias is not None:
        choice = choice + bias
    return choice


@triton.jit
def _finite_choice(x, choice):
    """``choice`` where the float32 logit ``x`` is finite, NaN where it is not (x * 0 is +-0 or NaN; c is never
    -0, so a finite logit's c keeps its bits): one FMA, which the window keys and the one-pass group scores
    share."""
    return tl.fma(x, 0.0, choice)


@triton.jit
def _window_key(finite_choice, expert, exists, offset, scale, PADDED: tl.constexpr, CLAMP_BY_MAX: tl.constexpr = False,
                CEILING: tl.constexpr = False):
    """Window keys of experts ``expert`` from their ``_finite_choice`` values. ``CLAMP_BY_MAX`` (the unchecked
    stream): the floor clamp written as a max on the GPU, where without the finite check before it the select
    compiled to a compare and a select instead of one FMNMX (the same values: a NaN gets the floor either way).
    ``CEILING`` (sqrt-softplus, whose c has no bound): values beyond the window share the ceiling key Q_CEIL (after
    the floor, so that a NaN stays on the floor)."""
    # an invalid logit's NaN lands on the floor with the values below the window; window keys are used
    # only when every bias entry is finite
    # q = round(c * scale + offset), one rounding: the offset's own rounding shifts every key alike
    if FMA_IN_FLOAT64:  # exact in float64 (a 24 x 24-bit product and a float32 sum span under 53 bits), rounded once
        y = (finite_choice.to(tl.float64) * scale.to(tl.float64) + offset.to(tl.float64)).to(tl.float32)
    else:
        y = tl.fma(finite_choice, scale, offset)
    if CLAMP_BY_MAX and PTX_SIGMOID:  # max returns the non-NaN operand (the interpreter's would pass a NaN on)
        y = tl.maximum(y, Q_FLOOR)
    else:
        y = tl.where(y > Q_FLOOR, y, Q_FLOOR)  # one max (NaN -> floor)
    if CEILING:
        y = tl.minimum(y, Q_CEIL)
    key = (y.to(tl.uint32, bitcast=True) << INDEX_BITS) | (expert ^ INDEX_MASK).to(tl.uint32)
    if PADDED:
        key = tl.where(exists, key, 0).to(tl.uint32)
    return key


@triton.jit
def _keys(x, bias, expert, exists, offset, scale, KEYS: tl.constexpr, PADDED: tl.constexpr,
          FINITE: tl.constexpr = True):
    """Keys of experts ``expert`` (any shape) from their raw logits ``x`` and bias (None without). Window keys with
    ``FINITE`` off (a stream whose tail checks its candidates, ``_finish_select``) skip the check that puts
    an infinite logit on the floor: such an expert's key is then that of c = b (x = -inf) or 1 + b (+inf), at or above
    its floor key; a NaN logit reaches the floor either way."""
    if KEYS == LOGIT16_KEYS:  # softmax ranks as its logits do: their own 16 bits, made order-preserving
        if x.dtype == tl.float32:  # bfloat16 logits unpacked from words (``_unpack_words``): the top half
            bits = (x.to(tl.int32, bitcast=True) >> 16) & 0xFFFF
        else:
            bits = x.to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
        bits = tl.where(bits == 0x8000, 0, bits)  # -0 ranks as +0 (equal logits: lower index first)
        ordered = bits ^ tl.where(bits >= 0x8000, 0xFFFF, 0x8000)
        ordered = tl.where(tl.abs(x.to(tl.float32)) < float("inf"), ordered, LOGIT16_INVALID)
        key = (ordered.to(tl.uint32) << INDEX_BITS) | (expert ^ INDEX_MASK).to(tl.uint32)
        if PADDED:
            key = tl.where(exists, key, 0).to(tl.uint32)
        return key
    elif KEYS == WINDOW_KEYS or KEYS == SQRT_WINDOW_KEYS:
        x = x.to(tl.float32)
        if KEYS == SQRT_WINDOW_KEYS:  # (only with a bias: without one sqrt-softplus ranks by the logits)
            choice = tl.fma(_window_sqrtsoftplus(x), SQRT_LN2, bias)
        else:
            choice = _window_choice(x, bias)
        if FINITE:
            choice = _finite_choice(x, choice)
        return _window_key(choice, expert, exists, offset, scale, PADDED, not FINITE, KEYS == SQRT_WINDOW_KEYS)
    else:
        x = x.to(tl.float32)
        valid = tl.abs(x) < float("inf")
        if KEYS == LOGIT_KEYS:  # softmax: the logit itself (softmax is strictly increasing in it)
            choice = x
        else:
            if KEYS == SQRTSOFTPLUS_KEYS:
                scores = sqrtsoftplus_scores(x, valid)
            else:
                scores = sigmoid_scores(x, valid)
            if bias is not None:
                valid = valid & (tl.abs(bias) < float("inf"))
                choice = scores + bias
            else:
                choice = scores
        # order-preserving unsigned bits of c (negative floats flipped whole, positive ones get the sign
        # bit; -0 as +0, so that equal values keep index order)
        bits = choice.to(tl.uint32, bitcast=True)
        bits = tl.where(bits == 0x80000000, 0, bits).to(tl.uint32)
        ordered = bits ^ tl.where((bits >> 31) != 0, 0xFFFFFFFF, 0x80000000).to(tl.uint32)
        ordered = tl.where(valid, ordered, ORDER_INVALID).to(tl.uint32)
        if PADDED:
            ordered = tl.where(exists, ordered, 0).to(tl.uint32)
        packed = (ordered.to(tl.uint64) << POSITION_BITS) | (-expert + POSITION_MASK).to(tl.uint64)
        return packed.to(tl.float64, bitcast=True)


@triton.jit
def _key_expert(key, KEYS: tl.constexpr):
    """The expert index a key encodes, and whether that expert is valid."""
    if KEYS == WINDOW_KEYS or KEYS == LOGIT16_KEYS or KEYS == SQRT_WINDOW_KEYS:
        expert = (key & INDEX_MASK).to(tl.int32) ^ INDEX_MASK
        valid = (key >> INDEX_BITS) >= Q_VALID
    else:
        bits = key.to(tl.uint64, bitcast=True)
        expert = -(bits & POSITION_MASK).to(tl.int32) + POSITION_MASK
        valid = (bits >> POSITION_BITS) > ORDER_INVALID
    return expert, valid


@triton.jit
def _step_experts(row_ok, lane, member, within, step, kept, NUM_EXPERTS: tl.constexpr, GROUP_SIZE: tl.constexpr,
                  LANES: tl.constexpr, CHUNK: tl.constexpr, GROUP: tl.constexpr):
    """The experts a lane reads at one step [LANES, CHUNK, GROUP]; which of them are real (and, grouped,
    of a kept group: ``kept`` [ROWS], bit g set for a kept group g); which are read (of a real row)."""
    run = (step * LANES + lane)[:, None] * CHUNK + member[None, :]  # [LANES, CHUNK]
    expert = run[:, :, None] * GROUP + within[None, None, :]  # [LANES, CHUNK, GROUP]
    present = (expert < NUM_EXPERTS)[None]
    if kept is not None:  # experts of eliminated groups are not read, and get key 0 like padding
        group = (expert // GROUP_SIZE).to(kept.dtype)
        present = present & (((kept[:, None, None, None] >> group[None]) & 1) != 0)
    return expert, present, row_ok[:, None, None, None] & present


@triton.jit
def _step_load(row_base, row_ok, lane, member, within, step, kept, NUM_EXPERTS: tl.constexpr,
               GROUP_SIZE: tl.constexpr, LANES: tl.constexpr, CHUNK: tl.constexpr, GROUP: tl.constexpr,
               WORDS: tl.constexpr):
    """The raw logits of one step of a lane [ROWS, LANES, CHUNK, GROUP] (0 where not read).

    ``WORDS`` (16-bit logits, rows 16-byte aligned; the host checks): each run of 4 experts is one 64-bit
    word, read two words per 16-byte load and unpacked in registers. Loaded as 16-bit values with runs
    of 4, a lane's 64 bytes take eight 8-byte loads; as words, four 16-byte loads: half the L1 requests
    (the lane-per-row tile is L1-throughput-bound, (docs/kernel-design-log.md). The loads are separate so that each
    lands whole in its lane's thread: one [.., CHUNK] load is spread by Triton's coalescing over four
    threads per row, and every compare-exchange after it shuffles (the word loads of a four-lane tile; docs/kernel-design-log.md).
    """
    if WORDS and GROUP == 4 and kept is None and NUM_EXPERTS % (LANES * CHUNK * GROUP) == 0:
        PIECES: tl.constexpr = CHUNK // 2  # 16-byte loads per lane and step
        first_word = (step * LANES + lane) * CHUNK  # a lane's CHUNK runs of 4 are CHUNK words
        words_ptr = (row_base.to(tl.pointer_type(tl.int64)) + first_word[None, :, None, None]
                     + tl.arange(0, 2)[None, None, None, :])
        parts = ()
        for piece in tl.static_range(PIECES):
            parts = parts + (_unpack_words(tl.load(words_ptr + 2 * piece, mask=row_ok[:, None, None, None], other=0),
                                           row_base.dtype.element_ty),)
        x = _all_side_by_side(parts, PIECES)  # [ROWS, LANES, 2, 4] each -> [ROWS, LANES, CHUNK, 4]
    else:  # (a constexpr branch: bfloat16 words unpack to float32, other loads keep the logits' dtype)
        expert, present, read = _step_experts(row_ok, lane, member, within, step, kept, NUM_EXPERTS, GROUP_SIZE,
                                              LANES, CHUNK, GROUP)
        x = tl.load(row_base + expert[None], mask=read, other=0.0)
    return x


@triton.jit
def _step_bias(bias_ptr, row_ok, lane, expert, step, kept, NUM_EXPERTS: tl.constexpr, LANES: tl.constexpr,
               CHUNK: tl.constexpr, GROUP: tl.constexpr, WORDS: tl.constexpr, PREFETCH: tl.constexpr):
    """The bias of one step's experts ``expert`` [LANES, CHUNK, GROUP] as float32, ready to add to the step's
    logits [ROWS, LANES, CHUNK, GROUP].

    One load of [LANES, CHUNK, GROUP], which the compiler spreads over the rows' threads through shared memory
    (a store, a barrier and CHUNK 16-byte shared loads a step) — except on the lane-per-row word tile with
    step-ahead loads, where the step's logits are in registers when the step begins and that
    exchange would be all its step waits on: there each thread reads its experts' bias itself, CHUNK 16-byte
    loads at addresses every row shares (the L1 serves a warp's as one), laid out as ``_step_load`` lays out
    the logits. Without step-ahead loads that was no faster (docs/kernel-design-log.md).
    """
    # _step_load's word condition, on a lane per row
    if WORDS and PREFETCH and LANES == 1 and GROUP == 4 and kept is None and NUM_EXPERTS % (LANES * CHUNK * GROUP) == 0:
        first = ((step * LANES + lane) * CHUNK)[None, :, None, None] * GROUP + tl.arange(0, GROUP)[None, None, None, :]
        every_row = tl.zeros_like(row_ok).to(tl.int32)[:, None, None, None]
        parts = ()
        for run in tl.static_range(CHUNK):
            parts = parts + (tl.load(bias_ptr + every_row + first + run * GROUP).to(tl.float32),)
        return _all_side_by_side(parts, CHUNK)  # [ROWS, 1, 1, 4] each -> [ROWS, 1, CHUNK, 4]
    elif NUM_EXPERTS % (LANES * CHUNK * GROUP) != 0:
        return tl.load(bias_ptr + expert, mask=expert < NUM_EXPERTS, other=0.0).to(tl.float32)[None]
    else:
        return tl.load(bias_ptr + expert).to(tl.float32)[None]


@triton.jit
def _unpack_words(words, dtype: tl.constexpr):
    """64-bit words [ROWS, LANES, 1, W] of four 16-bit logits each -> the logits [ROWS, LANES, W, 4] in order.

    bfloat16 logits come back as their float32 values (the same numbers: a bfloat16 is the top half of its
    float32), one shift or one mask each (the 16-bit values' conversion took a shift down and a
    shift up for the odd halves); float16 ones as float16."""
    low = words.to(tl.int32)
    high = (words >> 32).to(tl.int32)
    # experts 4w, 4w+1 in the low half, 4w+2, 4w+3 in the high half; join(join(e0, e2), join(e1, e3)) puts
    # them in order along the last two dimensions
    if dtype == tl.bfloat16:
        even = tl.join((low << 16).to(tl.float32, bitcast=True), (high << 16).to(tl.float32, bitcast=True))
        odd = tl.join((low & -65536).to(tl.float32, bitcast=True), (high & -65536).to(tl.float32, bitcast=True))
    else:
        even = tl.join(low.to(tl.int16).to(dtype, bitcast=True), high.to(tl.int16).to(dtype, bitcast=True))
        odd = tl.join((low >> 16).to(tl.int16).to(dtype, bitcast=True),
                      (high >> 16).to(tl.int16).to(dtype, bitcast=True))
    return tl.reshape(tl.join(even, odd), (words.shape[0], words.shape[1], words.shape[3], 4))


@triton.jit
def _all_side_by_side(parts, COUNT: tl.constexpr):
    """A tuple of COUNT (a power of two, at most 32) tensors [ROWS, LANES, N, M] -> one [ROWS, LANES, COUNT * N, M]
    with them in order, joined pairwise by halving (register moves only)."""
    for level in tl.static_range(5):
        if (1 << level) < COUNT:
            joined = ()
            for pair in tl.static_range(COUNT >> (level + 1)):
                joined = joined + (_side_by_side(parts[2 * pair], parts[2 * pair + 1]),)
            parts = joined
    return parts[0]


@triton.jit
def _side_by_side(first, second):
    """[ROWS, LANES, N, M] twice -> [ROWS, LANES, 2N, M]: ``second``'s runs after ``first``'s (register moves
    only)."""
    both = tl.permute(tl.join(first, second), (0, 1, 4, 2, 3))  # [ROWS, LANES, 2, N, M]
    return tl.reshape(both, (first.shape[0], first.shape[1], 2 * first.shape[2], first.shape[3]))


@triton.jit
def _step_keys(x, bias_ptr, row_ok, lane, member, within, step, offset, scale, kept,
               NUM_EXPERTS: tl.constexpr, GROUP_SIZE: tl.constexpr, LANES: tl.constexpr, CHUNK: tl.constexpr,
               GROUP: tl.constexpr, KEYS: tl.constexpr, WORDS: tl.constexpr, PREFETCH: tl.constexpr,
               FINITE: tl.constexpr = True):
    """One step of a lane from its logits ``x`` (``_step_load``): CHUNK runs of GROUP experts -> their
    best keys, sorted descending [ROWS, LANES, CHUNK]. Experts of eliminated groups get key 0, below
    everything, like padding. On tiles of at most PLACE_LANES lanes the keys are formed by place.
    ``FINITE`` off: window keys without the finite check (``_select``'s ``CHECKED_STREAM``)."""
    PADDED: tl.constexpr = NUM_EXPERTS % (LANES * CHUNK * GROUP) != 0
    expert, present, _ = _step_experts(row_ok, lane, member, within, step, kept, NUM_EXPERTS, GROUP_SIZE,
                                       LANES, CHUNK, GROUP)
    bias = None
    if bias_ptr is not None:
        bias = _step_bias(bias_ptr, row_ok, lane, expert, step, kept, NUM_EXPERTS, LANES, CHUNK, GROUP, WORDS,
                          PREFETCH)
    BY_PLACE: tl.constexpr = ((KEYS == WINDOW_KEYS or KEYS == LOGIT16_KEYS or KEYS == SQRT_WINDOW_KEYS)
                              and LANES <= PLACE_LANES and not PADDED
                              and kept is None)  # keys by place (PLACE_LANES)
    if BY_PLACE:
        place = member[:, None] * GROUP + within[None, :]  # [CHUNK, GROUP]
        keys = _keys(x, bias, place[None, None], present, offset, scale, KEYS, False, FINITE)
    else:
        keys = _keys(x, bias, expert[None], present, offset, scale, KEYS, PADDED or kept is not None, FINITE)
    if GROUP > 1:
        keys = tl.max(keys, axis=3)
    else:
        keys = tl.reshape(keys, keys.shape[:3])
    keys = _sort_descending(keys, LANES <= PLACE_LANES)
    if BY_PLACE:
        base = (step * LANES + lane) * (CHUNK * GROUP)  # [LANES]
        keys = keys ^ base[None, :, None].to(tl.uint32)
    return keys


# "Keys by place": a step's 32-bit keys formed by the experts' place within the step, so that each key
# takes one LEA with an immediate (the place is a constant per register), and the step's own part of the index put in
# once per sorted key (an index below 512 is the step's base, a multiple of the step's span, plus the place, so
# 511 - index = (511 - place) ^ base): the same order within the step, then the same keys. With Batcher's sorts, on
# tiles of at most PLACE_LANES lanes a row (measured faster there: 2-7% from 16384 tokens); on four
# lanes the keys by place measured 6-8% slower at 8192 tokens (run 2), and with them back the sorts and dense stores
# still 1-7% slower, so those tiles keep the plain step.
PLACE_LANES = tl.constexpr(2)


# Batcher's odd-even merge sort of 8: 19 compare-exchanges (i, j) in 6 stages (a bitonic sort of 8 takes 24)
SORT8_HIGH = tl.constexpr((0, 2, 4, 6, 0, 1, 4, 5, 1, 5, 0, 1, 2, 3, 2, 3, 1, 3, 5))
SORT8_LOW = tl.constexpr((1, 3, 5, 7, 2, 3, 6, 7, 2, 6, 4, 5, 6, 7, 4, 5, 2, 4, 6))


@triton.jit
def _sort_descending(keys, NETWORK: tl.constexpr):
    """``keys`` [A, B, N] sorted descending along the last axis. With ``NETWORK``, 32-bit keys of N = 8 that each
    thread holds whole (A x B at least 32 lists: a warp's worth, so the compiler gives each thread whole lists) by
    Batcher's network (19 compare-exchanges, each one integer max and one min, against ``tl.topk``'s
    24; the columns split and joined again in registers); otherwise by ``tl.topk`` (float64 keys: its compares and
    selects compiled shorter than float64 max and min; lists spread over threads: its shuffles, where splitting
    columns moved them between threads). The callers take the network where it measured no slower: the streaming
    steps of tiles of one or two lanes a row, the lane-per-row tail, the rounds' sorts (the four-lane
    tiles keep ``tl.topk``)."""
    N: tl.constexpr = keys.shape[2]
    IN_THREAD: tl.constexpr = keys.shape[0] * keys.shape[1] >= 32
    if NETWORK and N == 8 and keys.dtype == tl.uint32 and IN_THREAD:
        column = _last_axis_columns(keys, 8)
        for k in tl.static_range(19):
            high = tl.maximum(column[SORT8_HIGH[k]], column[SORT8_LOW[k]])
            low = tl.minimum(column[SORT8_HIGH[k]], column[SORT8_LOW[k]])
            column = _set2(column, SORT8_HIGH[k], high, SORT8_LOW[k], low)
        result = _join_last_axis(column, 8)
    else:
        result = tl.topk(keys, N, dim=2)
    return result


@triton.jit
def _set2(values, i: tl.constexpr, first, j: tl.constexpr, second):
    """The tuple ``values`` with ``first`` at ``i`` and ``second`` at ``j``."""
    out = ()
    for k in tl.static_range(len(values)):
        if k == i:
            out = out + (first,)
        elif k == j:
            out = out + (second,)
        else:
            out = out + (values[k],)
    return out


@triton.jit
def _last_axis_columns(x, COUNT: tl.constexpr):
    """[A, B, COUNT] (each thread holding its COUNT values) -> a tuple of COUNT [A, B] tensors, column by column
    (register moves: halving by reshape, permute and split)."""
    A: tl.constexpr = x.shape[0]
    B: tl.constexpr = x.shape[1]
    parts = (x,)
    for level in tl.static_range(5):
        if (1 << level) < COUNT:
            halves = ()
            for p in tl.static_range(1 << level):
                part = tl.reshape(parts[p], (A, B, 2, COUNT >> (level + 1)))
                first, second = tl.split(tl.permute(part, (0, 1, 3, 2)))
                halves = halves + (first, second)
            parts = halves
    columns = ()
    for c in tl.static_range(COUNT):
        columns = columns + (tl.reshape(parts[c], (A, B)),)
    return columns


@triton.jit
def _join_last_axis(columns, COUNT: tl.constexpr):
    """A tuple of COUNT (a power of two) tensors [A, B] -> one [A, B, COUNT] with column c at c (register moves:
    ``_all_side_by_side`` of [A, B, 1, 1] pieces)."""
    A: tl.constexpr = columns[0].shape[0]
    B: tl.constexpr = columns[0].shape[1]
    parts = ()
    for c in tl.static_range(COUNT):
        parts = parts + (tl.reshape(columns[c], (A, B, 1, 1)),)
    return tl.reshape(_all_side_by_side(parts, COUNT), (A, B, COUNT))


@triton.jit
def _select(logits_ptr, bias_ptr, rows64, row_ok, stride_l_row, offset, scale, kept, NUM_EXPERTS: tl.constexpr,
            GROUP_SIZE: tl.constexpr, TOPK: tl.constexpr, ROWS: tl.constexpr, LANES: tl.constexpr, CHUNK: tl.constexpr,
            GROUP: tl.constexpr, KEYS: tl.constexpr, PREFETCH: tl.constexpr, WORDS: tl.constexpr,
            x_first=None, CHECKED_STREAM: tl.constexpr = True, above=0.0):
    """The row's top CHUNK experts (of the kept groups, when ``kept`` is given), best first: expert
    [ROWS, CHUNK] int32, valid [ROWS, CHUNK], and (window keys) whether one of the first TOPK picks is on
    the floor [ROWS]. ``x_first``: the first step's logits, when the caller loaded them already.
    ``CHECKED_STREAM`` off (window keys with runs): the stream's keys skip the finite check (``_keys``), the tail
    checks (``_finish_select``). ``above``: sqrt-softplus window keys' certificate bound (``_certify_sqrt``)."""
    UNCHECKED: tl.constexpr = not CHECKED_STREAM and KEYS == WINDOW_KEYS and GROUP > 1
    STEPS: tl.constexpr = (NUM_EXPERTS + LANES * CHUNK * GROUP - 1) // (LANES * CHUNK * GROUP)
    lane = tl.arange(0, LANES)
    member = tl.arange(0, CHUNK)
    within = tl.arange(0, GROUP)
    row_base = logits_ptr + rows64[:, None, None, None] * stride_l_row

    # PREFETCH: each step's logits are loaded one step ahead, so that their memory latency overlaps the
    # previous step's keys and merge (in registers; Triton's num_stages pipelining through shared
    # memory was slower, (docs/kernel-design-log.md). The last step reloads itself rather than branch.
    if x_first is None:
        x = _step_load(row_base, row_ok, lane, member, within, 0, kept, NUM_EXPERTS, GROUP_SIZE, LANES, CHUNK,
                       GROUP, WORDS)
    else:
        x = x_first
    if PREFETCH:
        x_next = _step_load(row_base, row_ok, lane, member, within, min(1, STEPS - 1), kept, NUM_EXPERTS,
                            GROUP_SIZE, LANES, CHUNK, GROUP, WORDS)
    best = _step_keys(x, bias_ptr, row_ok, lane, member, within, 0, offset, scale, kept, NUM_EXPERTS,
                      GROUP_SIZE, LANES, CHUNK, GROUP, KEYS, WORDS, PREFETCH, not UNCHECKED)
    for step in range(1, STEPS):
        if PREFETCH:
            x = x_next
            x_next = _step_load(row_base, row_ok, lane, member, within, tl.minimum(step + 1, STEPS - 1), kept,
                                NUM_EXPERTS, GROUP_SIZE, LANES, CHUNK, GROUP, WORDS)
        else:
            x = _step_load(row_base, row_ok, lane, member, within, step, kept, NUM_EXPERTS, GROUP_SIZE, LANES,
                           CHUNK, GROUP, WORDS)
        # ascending running list against a descending chunk: their elementwise max is a bitonic
        # sequence holding the top CHUNK of both
        best = tl.maximum(tl.bitonic_merge(best),
                          _step_keys(x, bias_ptr, row_ok, lane, member, within, step, offset, scale, kept,
                                     NUM_EXPERTS, GROUP_SIZE, LANES, CHUNK, GROUP, KEYS, WORDS,
                                     PREFETCH, not UNCHECKED))
    return _finish_select(best, logits_ptr, bias_ptr, rows64, row_ok, stride_l_row, offset, scale, kept,
                          NUM_EXPERTS, TOPK, ROWS, LANES, CHUNK, GROUP, KEYS, STEPS == 1, UNCHECKED, above)


@triton.jit
def _finish_select(best, logits_ptr, bias_ptr, rows64, row_ok, stride_l_row, offset, scale, kept,
                   NUM_EXPERTS: tl.constexpr, TOPK: tl.constexpr, ROWS: tl.constexpr, LANES: tl.constexpr,
                   CHUNK: tl.constexpr, GROUP: tl.constexpr, KEYS: tl.constexpr, SORTED: tl.constexpr,
                   STREAM_UNCHECKED: tl.constexpr = False, above=0.0):
    """From the lanes' lists ``best`` [ROWS, LANES, CHUNK] (0 for eliminated groups' runs; sorted
    descending when ``SORTED``, else bitonic): the lanes merged, the top runs' experts selected exactly;
    returns what ``_select`` does.

    ``STREAM_UNCHECKED`` (window keys with runs): the stream's keys skipped the finite check
    (``_keys``), so an infinite logit's key was at or above its true key (the floor). A run's best key can then only
    be too high, and only where the run holds an infinite logit: if none of the top CHUNK runs' experts is
    non-finite, those runs are the true top CHUNK runs, and the exact pick among them is the true one. A row with a
    non-finite candidate is marked like a row with a pick under the window (``floored``), so the caller redoes it
    with exact keys (NaN candidates too: they were on the floor, but one check of the bits is cheaper than telling
    them apart; such rows are garbage and rare).

    Sqrt-softplus window keys: the row's top CHUNK are ranked again by exact keys and certified (``_certify_sqrt``,
    ``above`` its bound); an uncertified row is marked like a row with a pick under the window."""
    best = _merge_lanes(best, SORTED)
    expert, valid = _key_expert(best, KEYS)
    if GROUP > 1:
        # the experts of the top CHUNK runs, selected exactly (key 0: an eliminated group's run, not read)
        first = (expert // GROUP) * GROUP
        candidate = first[:, :, None] + tl.arange(0, GROUP)[None, None, :]  # [ROWS, CHUNK, GROUP]
        exists = candidate < NUM_EXPERTS
        if kept is not None:
            exists = exists & (best != 0)[:, :, None]
        x = tl.load(logits_ptr + rows64[:, None, None] * stride_l_row + candidate,
                    mask=row_ok[:, None, None] & exists, other=0.0)
        bias = None
        if bias_ptr is not None:
            bias = tl.load(bias_ptr + candidate, mask=exists, other=0.0).to(tl.float32)
        keys = _keys(x, bias, candidate, exists, offset, scale, KEYS, kept is not None or NUM_EXPERTS % GROUP != 0)
        if CHUNK == 8 and GROUP == 4 and ROWS >= 32 and keys.dtype == tl.uint32:
            # a row's 32 candidates in its thread (a lane per row): the runs sorted by pairs, as four lists of
            # 8 (Batcher's network), merged by halving (``_merge_lanes``): 248 min / max against tl.topk's 312
            best = _merge_lanes(_sort_descending(tl.reshape(keys, (ROWS, 4, 8)), True), True)
        elif CHUNK == 8 and GROUP == 4 and ROWS * 4 == 32 and keys.dtype == tl.uint32:
            # the four-lane tile's 8 rows a warp: the same four lists of 8, one a thread, each of runs j and
            # j + 4 (the two runs a thread's candidate loads hold; runs 2j and 2j + 1 took layout shuffles), merged
            # across the row's four threads by halving: 16 shuffles against tl.topk's 28, 136 fewer instructions
            # (sm_90, 256 / 8). Which candidates share a list does not matter: the top 8 of the 32 are the same keys
            lists = tl.reshape(tl.permute(tl.reshape(keys, (ROWS, 2, 4, GROUP)), (0, 2, 1, 3)), (ROWS, 4, 8))
            best = _merge_lanes(_sort_descending(lists, True), True)
        else:
            best = tl.topk(tl.reshape(keys, (ROWS, CHUNK * GROUP)), CHUNK, dim=1)
        expert, valid = _key_expert(best, KEYS)
    floored = tl.max(((tl.arange(0, CHUNK) < TOPK)[None, :] & ~valid).to(tl.int32), axis=1) > 0
    if STREAM_UNCHECKED:  # (``_select`` sets it only with runs: ``x`` are the candidates' logits)
        tl.static_assert(GROUP > 1)
        # the largest |x| bits of the candidates (0 where not read): infinite or NaN from 0x7F800000 up
        magnitude = tl.abs(x.to(tl.float32)).to(tl.int32, bitcast=True)
        floored = floored | (tl.max(tl.reshape(magnitude, (ROWS, CHUNK * GROUP)), axis=1) >= 0x7F800000)
    if KEYS == SQRT_WINDOW_KEYS:  # rows the keys' gaps leave uncertain: ranked by exact keys, or redone
        uncertain = ~_sqrt_certain(best, _sqrt_threshold(offset, scale, above), TOPK) & ~floored
        if tl.max((uncertain & row_ok).to(tl.int32), axis=0) > 0:
            ranked, ranked_valid, uncertified = _certify_sqrt(best, logits_ptr, bias_ptr, rows64, row_ok & uncertain,
                                                              stride_l_row, offset, scale, above, TOPK, CHUNK)
            expert = tl.where(uncertain[:, None], ranked, expert)
            valid = tl.where(uncertain[:, None], ranked_valid, valid)
            floored = floored | (uncertain & uncertified)
    return expert, valid, floored


@triton.jit
def _merge_lanes(best, SORTED: tl.constexpr):
    """The lanes' lists [ROWS, LANES, CHUNK] (each sorted descending when ``SORTED``, else bitonic) -> each
    row's top CHUNK keys [ROWS, CHUNK], sorted descending.

    A halving per level: the upper half of the lanes reverses its lists (registers only, a lane's list
    being in its thread), so that one max with the paired lane of the lower half gives a bitonic
    sequence holding the top CHUNK of both (one shuffle per key), which a bitonic merge of constant
    direction sorts (single min/max instructions). ``tl.topk`` over the lanes' keys would sort the
    already-sorted lists again and merge in alternating directions (a compare, a predicate and a select
    per key and stage instead of one min or max). A single lane's bitonic list is sorted by ``tl.topk``
    as a full sort: a bitonic merge there took the lane-per-row tile from 72 to 94 registers."""
    ROWS: tl.constexpr = best.shape[0]
    LANES: tl.constexpr = best.shape[1]
    CHUNK: tl.constexpr = best.shape[2]
    tl.static_assert(LANES <= MAX_LANES)
    if LANES == 1:
        best = tl.reshape(best, (ROWS, CHUNK))
        return best if SORTED else tl.topk(best, CHUNK)
    if not SORTED:
        best = tl.bitonic_merge(best, descending=True)
    for level in tl.static_range(LOG2_MAX_LANES):
        if (LANES >> level) > 1:
            pair = tl.reshape(best, (ROWS, 2, LANES >> (level + 1), CHUNK))
            upper = (tl.arange(0, 2) == 1)[None, :, None, None]
            best = tl.max(tl.where(upper, tl.flip(pair, 3), pair), axis=1)
            best = tl.bitonic_merge(best, descending=True)
    return tl.reshape(best, (ROWS, CHUNK))


@triton.jit
def _rounds_load(ptr, offset, ok, NUM_EXPERTS: tl.constexpr, PER: tl.constexpr):
    """Values of experts [32, PER] from ``ptr + offset`` (0 where masked): thread t holds experts t * PER ...
    t * PER + PER - 1 in its registers, read as 16-byte pieces and joined in registers (one [32, PER] load of
    more than 16 bytes a thread is split by Triton's coalescing over several threads, and every step after it
    would shuffle)."""
    VEC: tl.constexpr = min(PER, 128 // ptr.dtype.element_ty.primitive_bitwidth)
    PIECES: tl.constexpr = PER // VEC
    tl.static_assert(PIECES <= 4)
    parts = ()
    for p in tl.static_range(PIECES):
        expert = tl.arange(0, 32)[:, None] * PER + p * VEC + tl.arange(0, VEC)[None, :]
        parts = parts + (tl.load(ptr + offset + expert, mask=ok & (expert < NUM_EXPERTS), other=0.0),)
    if PIECES == 1:
        values = parts[0]
    elif PIECES == 2:
        values = tl.reshape(tl.permute(tl.join(parts[0], parts[1]), (0, 2, 1)), (32, PER))
    else:  # [32, VEC, 2, 2] with piece 2j + k at [.., j, k] -> [32, j, k, VEC]
        joined = tl.join(tl.join(parts[0], parts[2]), tl.join(parts[1], parts[3]))
        values = tl.reshape(tl.permute(joined, (0, 2, 3, 1)), (32, PER))
    return values  # piece-major: expert t * PER + p * VEC + i at [t, p * VEC + i]


@triton.jit
def _select_rounds(x, values, expert, exists, bias, offset, scale, kept, NUM_GROUPS: tl.constexpr,
                   GROUP_SIZE: tl.constexpr, TOPK_GROUP: tl.constexpr, TOPK: tl.constexpr, CHUNK: tl.constexpr,
                   KEYS: tl.constexpr):
    """Small batches (one row on one warp, at most 16 experts a thread, 32-bit keys; the rule gives it
    decode sizes and the SMALL class, ``launch._bitonic_rule``): the row's top CHUNK keys by TOPK rounds of one
    warp-wide 32-bit max.

    ``x``, ``expert``, ``exists``: [32, PER], thread t's experts t * PER ... (``_rounds_load``); ``values``: the
    same experts' float32 values to hand over (a round's winner hands over its pick's), or None; ``bias`` the
    same experts' float32 bias (None without); ``kept``: the kept groups' bits [1] from the group stage, or None:
    flat, or grouped with the groups ranked here (the kernel's ``GROUPS_IN_TILE``: each thread's experts inside
    one group), from the same ``c`` as the keys and in the same float32 arithmetic as the group stage, while the
    threads sort; an eliminated group's threads then drop their whole lists. Returns the TOPK picks' keys and
    their handed-over values (tuples of scalars, the same in every thread, best first; no values without
    ``values``), the kept groups' bits ranked here (a placeholder otherwise) and the lists after the last round (more
    rounds continue from them: ``_round``). Each thread sorts its keys in registers once;
    a round is then one ``tl.max`` of the 32 threads' first keys, which sm_80+ run as a single ``REDUX``
    instruction (Triton emits it for a 32-bit integer max over a whole warp), and the winner's list moves
    up one. The same keys as the streaming path, so the same top keys: where the lane merge's chain (a
    sort per lane and log2(lanes) halving merges, each of shuffles and compare stages) stood, a chain of
    K reductions with two ALU steps between them (docs/kernel-design-log.md)."""
    PER: tl.constexpr = x.shape[1]
    IN_TILE: tl.constexpr = TOPK_GROUP < NUM_GROUPS and kept is None
    present = exists
    if kept is not None:  # eliminated groups' experts get key 0, below everything (they were read anyway)
        group = (expert // GROUP_SIZE).to(kept.dtype)
        present = present & (((tl.reshape(kept, (1, 1)) >> group) & 1) != 0)
    if IN_TILE:
        tl.static_assert(KEYS == WINDOW_KEYS and 32 % NUM_GROUPS == 0 and NUM_GROUPS * GROUP_SIZE == 32 * PER)
        x = x.to(tl.float32)
        choice = _window_choice(x, bias)
        keys = _window_key(_finite_choice(x, choice), expert, exists, offset, scale, True)
        valid = exists & (tl.abs(x) < float("inf"))
        if bias is not None:
            valid = valid & (tl.abs(bias) < float("inf"))
        mine, kept = _tile_kept_groups(tl.where(valid, choice, float("-inf")), bias is not None, NUM_GROUPS,
                                       TOPK_GROUP)
    else:
        keys = _keys(x, bias, expert, present, offset, scale, KEYS, True)
    LISTED: tl.constexpr = min(PER, CHUNK)
    lists = _thread_lists(keys, CHUNK)
    if IN_TILE:  # a thread's experts are in one group: an eliminated group's lists become 0 (still sorted)
        dropped = ()
        for j in tl.static_range(LISTED):
            dropped = dropped + (tl.where(mine, lists[j], 0).to(tl.uint32),)
        lists = dropped
    # the values' float32 bits, column by column: a round's winner hands over its head's value (``values``
    # None: nothing handed over)
    if values is not None:
        value_bits = _columns(values.to(tl.uint32, bitcast=True), PER)
    picks = ()
    picked = ()
    for r in tl.static_range(TOPK):
        if values is not None:  # the winner's value, off the rounds' chain: its head's column (the key's low
            # index bits), then one more REDUX of it where the thread won (keys are unique but for 0, which only
            # rows with invalid picks pick)
            mine = _pick_column(value_bits, (lists[0] ^ INDEX_MASK) & (PER - 1), PER)
        top, won, lists = _round(lists)
        picks = picks + (top,)
        if values is not None:
            picked = picked + (_handed(won, mine),)
    if not IN_TILE:  # a placeholder (compiled Triton returns no None): the caller keeps its own ``kept``
        kept = tl.zeros((1,), tl.int32)
    return picks, picked, kept, lists


@triton.jit
def _thread_lists(keys, CHUNK: tl.constexpr):
    """Each thread's keys [32, PER] sorted descending, as a tuple of its first min(PER, CHUNK) columns [32] (a thread
    gives at most CHUNK picks): sorts of 8 by Batcher's network (16 keys: two, merged), else sorts or top-CHUNK."""
    PER: tl.constexpr = keys.shape[1]
    if PER >= 8 and CHUNK == 8 and PER <= 16:
        keys = _merge_lanes(_sort_descending(tl.reshape(keys, (32, PER // 8, 8)), True), True)
    elif PER > CHUNK:
        keys = tl.topk(keys, CHUNK, dim=1)
    elif PER > 1:
        keys = tl.sort(keys, dim=1, descending=True)
    return _columns(keys, min(PER, CHUNK))


@triton.jit
def _round(lists):
    """One round of ``_select_rounds``: the warp's largest head key (one ``REDUX``), whether this thread's head is
    it, and the lists with the winner's moved up one (a list entry no later round can reach is dead code)."""
    head = lists[0]
    top = tl.max(head, axis=0)  # REDUX.MAX
    won = head == top
    moved = ()
    for j in tl.static_range(len(lists) - 1):
        moved = moved + (tl.where(won, lists[j + 1], lists[j]),)
    return top, won, moved + (tl.where(won, 0, lists[len(lists) - 1]).to(tl.uint32),)


@triton.jit
def _handed(won, mine):
    """The winning thread's 32-bit value ``mine`` [32] in every thread: one ``REDUX`` of it where the thread won, 0
    elsewhere (one winner a round: keys are unique but for 0, which only rows with invalid picks pick)."""
    return tl.max(tl.where(won, mine.to(tl.uint32, bitcast=True), 0).to(tl.uint32), axis=0).to(tl.float32,
                                                                                              bitcast=True)


@triton.jit
def _pick_column(columns, index, COUNT: tl.constexpr):
    """Per thread, ``columns[index]`` of a tuple of COUNT (a power of two, at most 32) [32] tensors or scalars
    (``index`` [32] below COUNT): a tree of selects on the index's bits."""
    level = columns
    for b in tl.static_range(5):
        if (1 << b) < COUNT:
            odd = ((index >> b) & 1) != 0
            chosen = ()
            for i in tl.static_range(COUNT >> (b + 1)):
                chosen = chosen + (tl.where(odd, level[2 * i + 1], level[2 * i]),)
            level = chosen
    return level[0]


@triton.jit
def _complete_picks(picks, TOPK: tl.constexpr, KEYS: tl.constexpr):
    """Whether every one of the TOPK picks' keys is a valid expert's (none under the window, none invalid): the
    last pick's, as the rounds pick in descending key order and validity is a lower bound on the key (one
    compare after the rounds instead of TOPK)."""
    return _key_expert(picks[TOPK - 1], KEYS)[1]


@triton.jit
def _picks_keys(picks, COUNT: tl.constexpr, CHUNK: tl.constexpr):
    """The first COUNT picks' keys as a [1, CHUNK] tile, best first (slots past COUNT: key 0)."""
    slot = tl.arange(0, CHUNK)
    best = tl.zeros((CHUNK,), tl.uint32)
    for r in tl.static_range(COUNT):
        best = tl.where(slot == r, picks[r], best)
    return tl.reshape(best, (1, CHUNK))


@triton.jit
def _picks_tile(picks, TOPK: tl.constexpr, CHUNK: tl.constexpr, KEYS: tl.constexpr):
    """(expert, valid) [1, CHUNK] of the picks' keys, as ``_select`` returns them (slots past TOPK: key 0)."""
    return _key_expert(_picks_keys(picks, TOPK, CHUNK), KEYS)


@triton.jit
def _tile_kept_groups(choice, HAS_BIAS: tl.constexpr, NUM_GROUPS: tl.constexpr, TOPK_GROUP: tl.constexpr):
    """(whether each thread's group is kept [32], the kept groups' bits [1]) from ``c`` [32, PER] (-inf where
    invalid) of a row whose NUM_GROUPS groups are each GROUP_SIZE / PER consecutive threads: the group stage's
    scores (``_group_scores``: each thread's two largest, then its group's two largest, a set whatever the order;
    without bias the largest) and ranks (``kept_groups``: higher score, or equal and lower index, beats).

    Every group's score reaches every thread by one 32-bit integer reduction (``REDUX``) of its
    order-preserving bits (scores hold no NaN and no -0: ``c`` never is -0), NUM_GROUPS of them side by side, and
    each thread ranks its own group, where gathering the scores into a [1, NUM_GROUPS] tile and summing the rank
    matrix and the bits across the warp took ten dependent shuffle levels."""
    THREADS: tl.constexpr = 32 // NUM_GROUPS
    group = tl.arange(0, 32) // THREADS
    if HAS_BIAS:  # each group's two largest across its threads (butterfly shuffles), in every one of them
        best, second = _top2_last_axis(choice)  # [32]
        best, second = tl.reduce((tl.reshape(best, (NUM_GROUPS, THREADS)), tl.reshape(second, (NUM_GROUPS, THREADS))),
                                 1, _top2_combine)
        score = tl.reshape(tl.broadcast_to(top2_group_score(best, second)[:, None], (NUM_GROUPS, THREADS)), (32,))
    else:  # the group's largest is the largest of its threads' (the reductions below)
        score = tl.max(choice, axis=1)
    order = _ordered_int(score)
    scores = ()
    for g in tl.static_range(NUM_GROUPS):
        scores = scores + (tl.max(tl.where(group == g, order, -2147483648), axis=0),)
    own = order if HAS_BIAS else _pick_column(scores, group, NUM_GROUPS)
    beaten = tl.zeros((32,), tl.int32)
    for g in tl.static_range(NUM_GROUPS):
        beaten = beaten + ((scores[g] > own) | ((scores[g] == own) & (g < group))).to(tl.int32)
    mine = beaten < TOPK_GROUP
    bits = tl.sum(tl.where(mine & (tl.arange(0, 32) % THREADS == 0), 1 << group, 0), axis=0)
    return mine, bits + tl.zeros((1,), tl.int32)


@triton.jit
def _columns(x, COUNT: tl.constexpr):
    """[N, COUNT] (each thread holding its COUNT values) -> a tuple of COUNT [N] tensors, column by column
    (``_last_axis_columns`` of [N, 1, COUNT]: register moves)."""
    N: tl.constexpr = x.shape[0]
    wide = _last_axis_columns(tl.reshape(x, (N, 1, COUNT)), COUNT)
    columns = ()
    for c in tl.static_range(COUNT):
        columns = columns + (tl.reshape(wide[c], (N,)),)
    return columns


@triton.jit
def _select_one_pass(logits_ptr, bias_ptr, rows64, row_ok, stride_l_row, offset, scale, NUM_EXPERTS: tl.constexpr,
                     GROUP_SIZE: tl.constexpr, NUM_GROUPS: tl.constexpr, TOPK_GROUP: tl.constexpr, TOPK: tl.constexpr,
                     ROWS: tl.constexpr, LANES: tl.constexpr, CHUNK: tl.constexpr, GROUP: tl.constexpr,
                     PREFETCH: tl.constexpr, WORDS: tl.constexpr, x_first=None):
    """Grouped routing with window keys in one read of the row: what ``_select`` returns, and
    the kept groups' bits.

    Each step reads whole groups and each lane's part of a step lies in one group (the host checks:
    ``launch.one_pass_ok``) and computes every ``c`` once, for both the groups' scores
    (``_step_group_scores``: the same float32 numbers as the group stage's) and the keys. The lanes'
    sorted lists of every step stay in registers until the groups are ranked; then the lists of
    eliminated groups become 0 and merge as the masked stream would have (same keys, same top ``CHUNK``:
    the same bits as the group stage plus the masked stream, which read the kept half of the row again
    and recomputed its sigmoids).
    """
    SPAN: tl.constexpr = LANES * CHUNK * GROUP
    STEPS: tl.constexpr = NUM_EXPERTS // SPAN
    GROUPS_PER_STEP: tl.constexpr = SPAN // GROUP_SIZE
    tl.static_assert(GROUP_SIZE % (CHUNK * GROUP) == 0 and SPAN % GROUP_SIZE == 0 and NUM_EXPERTS % SPAN == 0
                     and STEPS * GROUPS_PER_STEP == NUM_GROUPS)
    lane = tl.arange(0, LANES)
    member = tl.arange(0, CHUNK)
    within = tl.arange(0, GROUP)
    row_base = logits_ptr + rows64[:, None, None, None] * stride_l_row
    group_scores = tl.full((ROWS, STEPS, GROUPS_PER_STEP), float("-inf"), tl.float32)
    lists = ()
    if x_first is None:
        x_next = _step_load(row_base, row_ok, lane, member, within, 0, None, NUM_EXPERTS, GROUP_SIZE, LANES, CHUNK,
                            GROUP, WORDS)
    else:
        x_next = x_first
    for step in tl.static_range(STEPS):
        x = x_next
        if step + 1 < STEPS:  # the next step's logits are read before this step's work (PREFETCH) or after
            if PREFETCH:
                x_next = _step_load(row_base, row_ok, lane, member, within, step + 1, None, NUM_EXPERTS, GROUP_SIZE,
                                    LANES, CHUNK, GROUP, WORDS)
        expert, _, _ = _step_experts(row_ok, lane, member, within, step, None, NUM_EXPERTS, GROUP_SIZE, LANES,
                                     CHUNK, GROUP)
        x = x.to(tl.float32)
        bias = None
        if bias_ptr is not None:
            bias = tl.load(bias_ptr + expert).to(tl.float32)[None]
        choice = _finite_choice(x, _window_choice(x, bias))
        if LANES <= PLACE_LANES:  # keys by the place within the step, the step's index bits after the sort
            place = member[:, None] * GROUP + within[None, :]
            keys = _sort_descending(tl.max(_window_key(choice, place[None, None], None, offset, scale, False), axis=3),
                                    True)
            keys = keys ^ ((step * LANES + lane) * (CHUNK * GROUP))[None, :, None].to(tl.uint32)
        else:
            keys = tl.topk(tl.max(_window_key(choice, expert[None], None, offset, scale, False), axis=3), CHUNK, dim=2)
        lists = lists + (keys,)  # [ROWS, LANES, CHUNK], best first
        # the step's groups' scores where the values lie (no reshape: see _step_group_scores), from the same
        # values as the keys: NaN for a non-finite logit
        score = _step_group_scores(choice, bias is not None, GROUPS_PER_STEP)
        here = tl.arange(0, STEPS)[None, :, None] == step
        group_scores = tl.where(here, score[:, None, :], group_scores)
        if step + 1 < STEPS:
            if not PREFETCH:
                x_next = _step_load(row_base, row_ok, lane, member, within, step + 1, None, NUM_EXPERTS, GROUP_SIZE,
                                    LANES, CHUNK, GROUP, WORDS)
    kept = _kept_bits(tl.reshape(group_scores, (ROWS, NUM_GROUPS)), NUM_GROUPS, TOPK_GROUP, NUM_GROUPS)
    # the lists in step order, an eliminated group's list as 0 (below everything, like padding)
    best = _kept_list(lists[0], kept, 0, lane, LANES, CHUNK * GROUP, GROUP_SIZE)
    for step in tl.static_range(1, STEPS):
        best = tl.maximum(tl.bitonic_merge(best), _kept_list(lists[step], kept, step, lane, LANES, CHUNK * GROUP,
                                                             GROUP_SIZE))
    expert, valid, floored = _finish_select(best, logits_ptr, bias_ptr, rows64, row_ok, stride_l_row, offset, scale,
                                            kept, NUM_EXPERTS, TOPK, ROWS, LANES, CHUNK, GROUP, WINDOW_KEYS, STEPS == 1)
    return expert, valid, floored, kept


@triton.jit
def _kept_list(keys, kept, step, lane, LANES: tl.constexpr, LANE_SPAN: tl.constexpr, GROUP_SIZE: tl.constexpr):
    """A step's lists ``keys`` [ROWS, LANES, CHUNK], 0 where the lane's experts are in an eliminated group."""
    group = ((step * LANES + lane) * LANE_SPAN) // GROUP_SIZE
    keep = ((kept[:, None] >> group[None, :].to(kept.dtype)) & 1) != 0
    return tl.where(keep[:, :, None], keys, 0).to(tl.uint32)


@triton.jit
def _top2_combine(best_a, second_a, best_b, second_b):
    """Merge two (largest, second largest) pairs; exact under any association order."""
    return tl.maximum(best_a, best_b), tl.maximum(tl.minimum(best_a, best_b), tl.maximum(second_a, second_b))


@triton.jit
def _group_experts(load, NUM_GROUPS: tl.constexpr, GROUP_SIZE: tl.constexpr, BLOCK_GROUP_SIZE: tl.constexpr,
                   GROUPS_PER_LOAD: tl.constexpr):
    """The experts of the group stage's load ``load`` [GROUPS_PER_LOAD, BLOCK_GROUP_SIZE] and which exist."""
    group = load * GROUPS_PER_LOAD + tl.arange(0, GROUPS_PER_LOAD)
    member = tl.arange(0, BLOCK_GROUP_SIZE)
    expert = group[:, None] * GROUP_SIZE + member[None, :]
    return expert, (group < NUM_GROUPS)[:, None] & (member < GROUP_SIZE)[None, :]


@triton.jit
def _group_load(logits_ptr, rows64, row_ok, stride_l_row, load, NUM_GROUPS: tl.constexpr, GROUP_SIZE: tl.constexpr,
                BLOCK_GROUP_SIZE: tl.constexpr, GROUPS_PER_LOAD: tl.constexpr):
    """The raw logits of one group-stage load [ROWS, GROUPS_PER_LOAD, BLOCK_GROUP_SIZE] (0 where none)."""
    expert, exists = _group_experts(load, NUM_GROUPS, GROUP_SIZE, BLOCK_GROUP_SIZE, GROUPS_PER_LOAD)
    return tl.load(logits_ptr + rows64[:, None, None] * stride_l_row + expert[None],
                   mask=row_ok[:, None, None] & exists[None], other=0.0)


@triton.jit
def _kept_group_bits(logits_ptr, bias_ptr, rows64, row_ok, stride_l_row, NUM_GROUPS: tl.constexpr,
                 GROUP_SIZE: tl.constexpr, TOPK_GROUP: tl.constexpr, BLOCK_GROUPS: tl.constexpr,
                 BLOCK_GROUP_SIZE: tl.constexpr, GROUPS_PER_LOAD: tl.constexpr,
                 ROWS: tl.constexpr, PREFETCH: tl.constexpr):
    """The group stage (docs/semantics.md rule 2) in float32, like the reference: each group's score is the
    sum of its two largest valid ``c`` (its largest ``s`` without bias); the TOPK_GROUP best groups, ties to
    the lower index. Returns [ROWS]: bit g set for a kept group g (int64 beyond 32 groups).

    Reads the row ``GROUPS_PER_LOAD`` groups at a time. Scores use the window keys' sigmoid (flush to
    zero below 1e-37: differences that small are near ties, docs/semantics.md), the same float32 numbers
    in every plan and either key encoding.
    """
    LOADS: tl.constexpr = BLOCK_GROUPS // GROUPS_PER_LOAD
    group_scores = tl.full((ROWS, LOADS, GROUPS_PER_LOAD), float("-inf"), tl.float32)
    # PREFETCH: the next load's logits are read before this load's work (as in _select)
    if PREFETCH:
        x_next = _group_load(logits_ptr, rows64, row_ok, stride_l_row, 0, NUM_GROUPS, GROUP_SIZE,
                             BLOCK_GROUP_SIZE, GROUPS_PER_LOAD)
    for load in range(LOADS):
        if PREFETCH:
            x = x_next.to(tl.float32)
            x_next = _group_load(logits_ptr, rows64, row_ok, stride_l_row, tl.minimum(load + 1, LOADS - 1),
                                 NUM_GROUPS, GROUP_SIZE, BLOCK_GROUP_SIZE, GROUPS_PER_LOAD)
        else:
            x = _group_load(logits_ptr, rows64, row_ok, stride_l_row, load, NUM_GROUPS, GROUP_SIZE,
                            BLOCK_GROUP_SIZE, GROUPS_PER_LOAD).to(tl.float32)
        expert, exists = _group_experts(load, NUM_GROUPS, GROUP_SIZE, BLOCK_GROUP_SIZE, GROUPS_PER_LOAD)
        valid = exists[None] & (tl.abs(x) < float("inf"))
        bias = None
        if bias_ptr is not None:
            bias = tl.load(bias_ptr + expert, mask=exists, other=0.0).to(tl.float32)[None]
            valid = valid & (tl.abs(bias) < float("inf"))
        score = _group_scores(_window_choice(x, bias), valid, bias is not None)  # [ROWS, GROUPS_PER_LOAD]
        here = tl.arange(0, LOADS)[None, :, None] == load
        group_scores = tl.where(here, score[:, None, :], group_scores)
    return _kept_bits(tl.reshape(group_scores, (ROWS, BLOCK_GROUPS)), NUM_GROUPS, TOPK_GROUP, BLOCK_GROUPS)


@triton.jit
def _group_scores(choice, valid, HAS_BIAS: tl.constexpr):
    """Scores [ROWS, G] of groups whose ``c`` are ``choice`` [ROWS, G, N] (N a power of two; ``valid``
    marks real experts with finite logit and bias): with a bias the sum of the two largest valid ``c``,
    without it the largest (docs/semantics.md rule 2), -inf for a group with no valid expert."""
    choice = tl.where(valid, choice, float("-inf"))
    if HAS_BIAS:
        best, second = _top2_last_axis(choice)
        return top2_group_score(best, second)
    else:
        return tl.max(choice, axis=2)


@triton.jit
def _top2_last_axis(values):
    """The two largest of ``values`` (no NaN) along its last axis, which goes (the second -inf where that axis
    has one entry): pairs first, one max and one min per two in the thread that holds them, then
    ``_top2_combine``'s exact merge. The group stage's groups and the one-pass steps' runs."""
    AXIS: tl.constexpr = len(values.shape) - 1
    N: tl.constexpr = values.shape[AXIS]
    if N == 1:
        best = tl.reshape(values, values.shape[:AXIS])
        second = tl.full(best.shape, float("-inf"), tl.float32)
    else:
        left, right = tl.split(tl.reshape(values, values.shape[:AXIS] + [N // 2, 2]))
        best, second = tl.reduce((tl.maximum(left, right), tl.minimum(left, right)), AXIS, _top2_combine)
    return best, second


@triton.jit
def _step_group_scores(choice, HAS_BIAS: tl.constexpr, GROUPS_PER_STEP: tl.constexpr):
    """``_group_scores`` of a step's groups, ``choice`` [ROWS, LANES, CHUNK, GROUP] (``_finite_choice``: NaN for
    an invalid expert) -> [ROWS, GROUPS_PER_STEP] (each group is LANES / GROUPS_PER_STEP consecutive lanes):
    each lane's two largest valid ``c``, then each group's two largest of its lanes' pairs (a set: the same
    pair, and the same float32 sum, whatever the order of reduction).

    Reduced where the values lie, never reshaped across lanes: reshaping [ROWS, LANES, CHUNK, GROUP] into
    [ROWS, GROUPS_PER_STEP, GROUP_SIZE] gave wrong group scores on the H200 for tiles whose
    groups span several lanes (2 or 4 groups a step and 2 or 4 lanes a group: 28 to 67 of 67 rows with other
    ids, docs/kernel-design-log.md) where Triton's interpreter is right; ``moe-routing census`` keeps judging
    every tile class on the GPU for that reason.

    An invalid expert's NaN becomes -inf by ``c > -inf`` (a valid ``c`` is finite), which compiles
    to one max instead of the compare and select of masking by the logit; a run's experts pair up in the
    thread that holds them (``_top2_last_axis``, as in the group stage) instead of entering the top-2 merge
    one by one with a -inf second."""
    ROWS: tl.constexpr = choice.shape[0]
    LANES: tl.constexpr = choice.shape[1]
    choice = tl.where(choice > float("-inf"), choice, float("-inf"))
    if HAS_BIAS:
        best, second = _top2_last_axis(choice)  # each run's pair
        best, second = tl.reduce((best, second), 2, _top2_combine)  # [ROWS, LANES]
    else:
        best = tl.max(tl.max(choice, axis=3), axis=2)
    if GROUPS_PER_STEP == 1:
        if HAS_BIAS:
            best, second = tl.reduce((best, second), 1, _top2_combine, keep_dims=True)
            return top2_group_score(best, second)
        return tl.max(best, axis=1, keep_dims=True)
    if GROUPS_PER_STEP == LANES:  # a lane per group: its pair is the group's
        return top2_group_score(best, second) if HAS_BIAS else best
    owner = tl.arange(0, LANES) // (LANES // GROUPS_PER_STEP)  # the step's group of each lane
    slot = tl.arange(0, GROUPS_PER_STEP)
    scores = tl.full((ROWS, GROUPS_PER_STEP), float("-inf"), tl.float32)
    for g in tl.static_range(GROUPS_PER_STEP):
        mine = (owner == g)[None, :]
        if HAS_BIAS:
            group_best, group_second = tl.reduce((tl.where(mine, best, float("-inf")),
                                                  tl.where(mine, second, float("-inf"))), 1, _top2_combine)
            score = top2_group_score(group_best, group_second)
        else:
            score = tl.max(tl.where(mine, best, float("-inf")), axis=1)
        scores = tl.where(slot[None, :] == g, score[:, None], scores)
    return scores


@triton.jit
def _kept_bits(group_scores, NUM_GROUPS: tl.constexpr, TOPK_GROUP: tl.constexpr, BLOCK_GROUPS: tl.constexpr):
    """[ROWS]: bit g set for each of the TOPK_GROUP best groups g of ``group_scores`` [ROWS, BLOCK_GROUPS]
    (int64 beyond 32 groups)."""
    kept = kept_groups(group_scores, NUM_GROUPS, TOPK_GROUP, BLOCK_GROUPS)
    g = tl.arange(0, BLOCK_GROUPS)
    if BLOCK_GROUPS > 32:
        return tl.sum(tl.where(kept, tl.full((), 1, tl.int64) << g.to(tl.int64)[None, :], 0), axis=1)
    else:
        return tl.sum(tl.where(kept, tl.full((), 1, tl.int32) << g[None, :], 0), axis=1)


@triton.jit
def _softmax_total(logits_ptr, rows64, row_ok, stride_l_row, top, NUM_EXPERTS: tl.constexpr, ROWS: tl.constexpr):
    """Softmax's denominator [ROWS]: the sum of exp(x - ``top``) over each row's valid experts, in one
    association order whatever the tile (pairwise within blocks of 32 experts, the blocks in order), so
    that every plan rounds alike. A second read of the row (cache hits after the selection's)."""
    member = tl.arange(0, 32)
    total = tl.zeros((ROWS,), tl.float32)
    for block in range((NUM_EXPERTS + 31) // 32):
        expert = block * 32 + member
        exists = expert < NUM_EXPERTS
        x = tl.load(logits_ptr + rows64[:, None] * stride_l_row + expert[None, :],
                    mask=row_ok[:, None] & exists[None, :], other=0.0).to(tl.float32)
        valid = exists[None, :] & (tl.abs(x) < float("inf"))
        total = total + tree_sum(tl.where(valid, tl.exp(x - top[:, None]), 0.0), ROWS, 32, 5)
    return total


@triton.jit
def _window(bias_ptr, NUM_EXPERTS: tl.constexpr, BLOCK_EXPERTS: tl.constexpr):
    """(offset, steps per unit of c, usable): the quantisation window from the bias (module docstring)."""
    if bias_ptr is None:
        lo = tl.zeros((), tl.float32)
        hi = tl.zeros((), tl.float32)
        finite = tl.full((), True, tl.int1)
    else:
        lo, hi, finite = _bias_bounds(bias_ptr, NUM_EXPERTS, BLOCK_EXPERTS)
    return _window_from(lo, hi, finite)


@triton.jit
def _bias_bounds(bias_ptr, NUM_EXPERTS: tl.constexpr, BLOCK_EXPERTS: tl.constexpr):
    """The bias's smallest and largest entry (0.0 counted for padding up to BLOCK_EXPERTS, so that every tile forms
    the same window) and whether every entry is finite."""
    e = tl.arange(0, BLOCK_EXPERTS)
    b = tl.load(bias_ptr + e, mask=e < NUM_EXPERTS, other=0.0).to(tl.float32)
    return tl.min(b, axis=0), tl.max(b, axis=0), tl.max((tl.abs(b) == float("inf")) | (b != b), axis=0) == 0


@triton.jit
def _sqrt_window(bias_ptr, NUM_EXPERTS: tl.constexpr, BLOCK_EXPERTS: tl.constexpr):
    """``_sqrt_window_from`` of the bias (its padding's 0.0 keeps the bounds a lower and an upper bound)."""
    lo, hi, finite = _bias_bounds(bias_ptr, NUM_EXPERTS, BLOCK_EXPERTS)
    return _sqrt_window_from(lo, hi, finite)


@triton.jit
def _sqrt_window_from(lo, hi, finite):
    """The sqrt-softplus window keys' (offset, steps, usable, above) from a lower bound ``lo`` and an upper bound
    ``hi`` of the bias entries and whether all are finite: the window [lo, lo + 8] (every valid c = s + b is at
    least lo, s being non-negative), usable where lo lies inside (-16, 16) and the bias is finite; ``above``, the
    bound the certificate needs for experts whose key is not within SQRT_KEY_ERROR (their c is below it)."""
    usable = finite & (lo > -SQRT_WINDOW_LIMIT) & (lo < SQRT_WINDOW_LIMIT)
    steps = tl.full(lo.shape, Q_SPAN, tl.float32) / SQRT_WINDOW_WIDTH
    return -(lo * steps) + Q_BASE, steps, usable, hi + SQRT_SCORE_BELOW


@triton.jit
def _sqrt_threshold(offset, scale, above):
    """The smallest q (int32) a key must exceed for its expert's c to be above ``above`` + SQRT_KEY_ERROR whatever
    the key's error: keys of logits below SQRT_ACCURATE_FROM lie under it (their keys' c is below ``above``)."""
    y = tl.minimum(tl.fma(above + SQRT_KEY_ERROR, scale, offset), Q_CEIL)
    return y.to(tl.int32) - 8388607  # (2**23 + q rounded down, plus one step)


@triton.jit
def _sqrt_certain(best, threshold, TOPK: tl.constexpr):
    """Whether sqrt-softplus window keys ``best`` [ROWS, CHUNK] (sorted descending, CHUNK > TOPK) already rank each
    row's top TOPK exactly: consecutive keys among the first TOPK + 1 lie more than 3 + (q >> 20) q-steps apart, and
    the TOPK-th is above ``threshold`` (``_sqrt_threshold``: no expert whose key is less accurate can beat it).

    Why the gap suffices: keys a gap g apart have keys' c at least (g - 1) steps (9.54e-7) apart (each key rounds its
    c once), and from SQRT_ACCURATE_FROM up each key's c is within 8e-7 + 3.2e-7 s of c (twice the largest error
    measured over every float32 logit, on the H200 and in numpy: 4.1e-7 up to s = 2.9, 1.44e-6 at s = 9.4), s being
    at most the key's place in the window, q x 9.54e-7; 3 + (q >> 20) steps cover twice that. Then the keys' order
    is the exact c's and no unlisted expert beats the TOPK-th. Integer compares on the listed keys; rows it leaves
    are ranked by exact keys (``_certify_sqrt``)."""
    return _gaps_certain(_columns((best >> INDEX_BITS).to(tl.int32), best.shape[1]), threshold, TOPK)


@triton.jit
def _gaps_certain(q, threshold, TOPK: tl.constexpr):
    """``_sqrt_certain``'s test on a tuple of the keys' q-steps (int32), best first: a tile's columns, or the rounds'
    picks (``_picks_q``)."""
    certain = q[TOPK - 1] > threshold
    for i in tl.static_range(TOPK):
        certain = certain & _gap_apart(q[i], q[i + 1])
    return certain


@triton.jit
def _lane_scores(picks, row_ptr, row_ok, TOPK: tl.constexpr, NUM_EXPERTS: tl.constexpr):
    """The sqrt-softplus scores (``sqrtsoftplus_scores``) of the first TOPK picks (scalars, the same in every thread)
    of a row at ``row_ptr``, one a lane: lane r reads pick r's logit and forms its score, and each score comes back
    to every thread by one 32-bit integer max (``REDUX``; scores are non-negative, so their bits order as they do).
    One score's instructions a thread instead of TOPK."""
    lane = tl.arange(0, 32)
    mine = tl.zeros((32,), tl.uint32)
    for r in tl.static_range(TOPK):
        mine = tl.where(lane == r, picks[r], mine)
    pick, _valid = _key_expert(mine, SQRT_WINDOW_KEYS)
    x = tl.load(row_ptr + pick, mask=row_ok & (lane < TOPK) & (pick < NUM_EXPERTS), other=0.0)
    bits = sqrtsoftplus_scores(x.to(tl.float32), lane < TOPK).to(tl.uint32, bitcast=True)
    scores = ()
    for r in tl.static_range(TOPK):
        scores = scores + (tl.max(tl.where(lane == r, bits, 0).to(tl.uint32), axis=0).to(tl.float32, bitcast=True),)
    return scores


@triton.jit
def _gap_apart(upper, lower):
    """``_sqrt_certain``'s gap test between two keys' q-steps (int32): whether ``upper`` lies more than
    3 + (upper >> 20) steps above ``lower``, so that the first key's exact c beats the second's (and every c
    whose key is at most the second)."""
    return upper - lower > (upper >> SQRT_GAP_SHIFT) + SQRT_GAP  # (tensor first: Triton 3.8)


@triton.jit
def _pick(values, index):
    """``values[index]`` of a tuple of scalars, ``index`` a scalar: a chain of selects."""
    chosen = values[0]
    for i in tl.static_range(1, len(values)):
        chosen = tl.where(index == i, values[i], chosen)
    return chosen


@triton.jit
def _swap_close_pair(picks, scores, row_ptr, bias_ptr, row_ok, threshold, usable, TOPK: tl.constexpr):
    """Rows the gap test leaves (``_gaps_certain``) because of one close pair of picks, ranked by the two picks' exact
    c alone. Where the first TOPK + 1 picks' keys are apart but for one adjacent pair (j, j + 1), every other pair is
    in its exact order, and so is each pick against the one two places down once tested (``_gap_apart``, the one
    between j and j + 2); the pair's own order is then that of their exact c = s + b (float32, ties to the lower
    index). Where the pair is the TOPK-th and the next pick, that next pick must also be apart from the one after it
    and lie above ``threshold``, so that whichever of the two wins beats every unlisted expert (``_sqrt_certain``).

    Returns (keys, scores, settled): the TOPK picks in their exact order with their scores (``scores``: those of
    picks 0..TOPK - 1, from ``_lane_scores``; pick TOPK's formed here from its logit at ``row_ptr``), and whether
    the row is settled so."""
    tl.static_assert(TOPK + 2 <= len(picks))
    q = _picks_q(picks, TOPK + 2)
    close = tl.zeros((), tl.int32)
    j = tl.zeros((), tl.int32)
    for i in tl.static_range(TOPK):
        near = ~_gap_apart(q[i], q[i + 1])
        close += near.to(tl.int32)
        j = tl.where(near, i, j)
    upper = _pick(q, j)
    two_down = _pick(q, j + 2)
    settled = usable & (close == 1) & (q[TOPK - 1] > threshold) & _gap_apart(upper, two_down)
    last = j == TOPK - 1  # the pair decides which of picks TOPK - 1 and TOPK is chosen
    settled = settled & (~last | (_gap_apart(q[TOPK], q[TOPK + 1]) & (q[TOPK] > threshold)))
    next_expert, next_valid = _key_expert(picks[TOPK], SQRT_WINDOW_KEYS)
    next_x = tl.load(row_ptr + next_expert, mask=row_ok & settled & last, other=0.0).to(tl.float32)
    all_scores = scores + (sqrtsoftplus_scores(next_x, next_valid),)
    first_key = _pick(picks, j)
    second_key = _pick(picks, j + 1)
    first, _valid = _key_expert(first_key, SQRT_WINDOW_KEYS)
    second, _valid = _key_expert(second_key, SQRT_WINDOW_KEYS)
    first_score = _pick(all_scores, j)
    second_score = _pick(all_scores, j + 1)
    first_c = first_score + tl.load(bias_ptr + first, mask=settled, other=0.0).to(tl.float32)
    second_c = second_score + tl.load(bias_ptr + second, mask=settled, other=0.0).to(tl.float32)
    swap = (second_c > first_c) | ((second_c == first_c) & (second < first))
    keys = ()
    ranked = ()
    for r in tl.static_range(TOPK):
        keys = keys + (tl.where(swap & (j == r), second_key, tl.where(swap & (j + 1 == r), first_key, picks[r])),)
        ranked = ranked + (tl.where(swap & (j == r), second_score,
                                    tl.where(swap & (j + 1 == r), first_score, scores[r])),)
    return keys, ranked, settled


@triton.jit
def _picks_q(picks, COUNT: tl.constexpr):
    """The q-steps (int32) of the first COUNT picks' keys."""
    q = ()
    for i in tl.static_range(COUNT):
        q = q + ((picks[i] >> INDEX_BITS).to(tl.int32),)
    return q


@triton.jit
def _unlisted_bound(q_last, offset, scale, above):
    """The largest c an expert whose key is at most the last listed one (q-step ``q_last``) can have: its keys' c
    rounded up a step with a step of margin, plus SQRT_KEY_ERROR, or ``above`` for inaccurate keys
    (``_certify_sqrt``)."""
    y_last = (q_last | 0x4B000000).to(tl.float32, bitcast=True)  # 2**23 + q
    return tl.maximum((y_last + 2.0 - offset) / scale + SQRT_KEY_ERROR, above)


@triton.jit
def _certify_sqrt(best, logits_ptr, bias_ptr, rows64, row_ok, stride_l_row, offset, scale, above, TOPK: tl.constexpr,
                  LISTED: tl.constexpr):
    """Sqrt-softplus window keys made exact: from each row's top keys ``best`` [ROWS, CHUNK] (sorted descending, the
    first LISTED of them the row's top LISTED, LISTED > TOPK), the listed experts ranked again by their exact keys
    (``SQRTSOFTPLUS_KEYS``: float32 c from ``sqrtsoftplus_scores``, ties to the lower index), and whether that ranking
    is certainly the row's: returns (expert, valid, uncertified) as ``_select`` does (uncertified rows: redo).

    Certificate: an expert not listed has a key at most the LISTED-th's, so its keys' c is at most ``bound`` (the
    quantisation's rounding and a step of margin) and its c at most ``bound + SQRT_KEY_ERROR``, or, where its logit is
    below SQRT_ACCURATE_FROM, at most ``above`` (max b + SQRT_SCORE_BELOW). If at least TOPK listed experts have an
    exact c above both, the row's top TOPK are all listed, and their exact ranking is the semantics' (float32 c, ties
    to the lower index): the same ids as exact keys give, whatever the window, so every tile agrees. A ceiling key
    at the LISTED-th place bounds nothing (c beyond the window): uncertified."""
    CHUNK: tl.constexpr = best.shape[1]
    slot = tl.arange(0, CHUNK)[None, :]
    expert, valid = _key_expert(best, SQRT_WINDOW_KEYS)
    listed = valid & (slot < LISTED)
    x = tl.load(logits_ptr + rows64[:, None] * stride_l_row + expert, mask=row_ok[:, None] & listed, other=0.0)
    b = tl.load(bias_ptr + expert, mask=listed, other=0.0).to(tl.float32)
    choice = sqrtsoftplus_scores(x.to(tl.float32), listed) + b
    exact = _keys(x, b, expert, listed, 0.0, 1.0, SQRTSOFTPLUS_KEYS, True)
    q_last = tl.sum(tl.where(slot == LISTED - 1, best >> INDEX_BITS, 0), axis=1).to(tl.int32)
    bound = _unlisted_bound(q_last, offset, scale, above)
    beyond = tl.sum((listed & (choice > bound[:, None])).to(tl.int32), axis=1)
    certified = (beyond >= TOPK) & (q_last < Q_CEIL_BITS)
    ranked = tl.sort(exact, dim=1, descending=True)
    expert, valid = _key_expert(ranked, SQRTSOFTPLUS_KEYS)
    return expert, valid, ~certified


@triton.jit
def _window_from(lo, hi, finite):
    """``_window`` from the bias's smallest and largest entry (0.0 counted for padding up to BLOCK_EXPERTS, so
    that every tile forms the same window) and whether every entry is finite."""
    top = hi + 1.0
    lowest = tl.maximum(lo, top - WINDOW_WIDTH)
    usable = finite & (top < WINDOW_LIMIT) & (lowest > -WINDOW_LIMIT)
    steps = tl.full((), Q_SPAN, tl.float32) / (top - lowest)  # a tensor first: Triton 3.8 wraps constexpr / tensor
    return -(lowest * steps) + Q_BASE, steps, usable


@triton.jit
def _ordered_int(value):
    """float32 -> int32 whose signed order is the floats' (-0 below +0; NaN beyond the infinities); its own
    inverse (``_ordered_int(x).to(tl.float32, bitcast=True)`` of an ordered value gives the float back)."""
    bits = value.to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def _warp_window(bias, BY_BITS: tl.constexpr):
    """``_window`` from the bias [32, PER] in the rounds' layout (one warp).

    ``BY_BITS``: by the order-preserving bits of every entry, each thread's smallest and largest,
    then the warp's by one 32-bit integer reduction each (``REDUX``), instead of two chains of five float shuffles
    and a third reduction for non-finite entries. Non-finite entries need no test of their own: an infinity or a
    NaN ends up as the smallest or the largest (a NaN's bits order it beyond the infinity of its sign), and neither
    then compares as finite. Its two conversions per entry cost more than the shuffles save on rows of 8 or 16
    experts a thread of sigmoid rows (docs/kernel-design-log.md), so the rule's caller takes it there for shorter rows
    and for grouped rows ranked in the tile only; otherwise float reductions as in ``_window``. Sqrt-softplus rows
    take it at every length (``_route_in_rounds``).

    Both give ``_window``'s (offset, steps, usable): min and max are exact, and where they could differ, -0
    against +0, ``_window_from`` gives the same bits (``top`` = hi + 1; a ``lowest`` of +-0 gives ``offset``
    Q_BASE and the same ``steps``)."""
    lo, hi, finite = _warp_bias_bounds(bias, BY_BITS)
    return _window_from(lo, hi, finite)


@triton.jit
def _warp_bias_bounds(bias, BY_BITS: tl.constexpr):
    """``_bias_bounds`` of the bias [32, PER] in the rounds' layout (``_warp_window``'s two ways)."""
    if BY_BITS:
        order = _ordered_int(bias)
        lo = _ordered_int(tl.min(tl.min(order, axis=1), axis=0)).to(tl.float32, bitcast=True)
        hi = _ordered_int(tl.max(tl.max(order, axis=1), axis=0)).to(tl.float32, bitcast=True)
        finite = (lo > float("-inf")) & (hi < float("inf"))
    else:
        unusable = (tl.abs(bias) == float("inf")) | (bias != bias)
        lo = tl.min(tl.min(bias, axis=1), axis=0)
        hi = tl.max(tl.max(bias, axis=1), axis=0)
        finite = tl.max(tl.max(unusable.to(tl.int32), axis=1), axis=0) == 0
    return lo, hi, finite


@triton.jit(do_not_specialize=["num_rows", "stride_w_row", "stride_w_col", "stride_i_row", "stride_i_col"],
            do_not_specialize_on_alignment=["weights_ptr", "ids_ptr"])
def bitonic_kernel(
    # inputs
    logits_ptr,  # [T, E] float32 / bfloat16 / float16, unit column stride
    bias_ptr,  # [E] contiguous, any float dtype; None without bias
    stride_l_row,
    # outputs
    weights_ptr,  # [T, K] float32
    ids_ptr,  # [T, K] int32
    stride_w_row,
    stride_w_col,
    stride_i_row,
    stride_i_col,
    # scalars
    num_rows,
    scale,  # routed_scaling_factor, float32
    padding_ptr,  # [T] uint8, nonzero on a padded row (ids -1, weights 0); None without
    # problem
    TOPK: tl.constexpr,
    SCORING: tl.constexpr,  # _common.SIGMOID, SOFTMAX (flat, no bias: rules.bitonic_supported) or SQRTSOFTPLUS
    RENORMALIZE: tl.constexpr,
    NUM_EXPERTS: tl.constexpr,
    BLOCK_EXPERTS: tl.constexpr,  # next power of two
    NUM_GROUPS: tl.constexpr,  # 1 on the flat path
    GROUP_SIZE: tl.constexpr,
    TOPK_GROUP: tl.constexpr,
    BLOCK_GROUPS: tl.constexpr,
    BLOCK_GROUP_SIZE: tl.constexpr,
    # tunable parameters
    ROWS: tl.constexpr,
    LANES: tl.constexpr,
    CHUNK: tl.constexpr,
    LOG2_CHUNK: tl.constexpr,
    GROUP: tl.constexpr,  # run length of the filter (divides GROUP_SIZE on the grouped path)
    GROUPS_PER_LOAD: tl.constexpr,  # group stage: groups read at once
    PREFETCH: tl.constexpr,  # load each step's logits one step ahead
    WORDS: tl.constexpr,  # 16-bit logits read as 64-bit words (rows 16-byte aligned, runs of 4; launch.words_ok)
    ONE_PASS: tl.constexpr,  # grouped, window keys: groups ranked and experts keyed in one read of the row
    ROUNDS: tl.constexpr = False,  # one row on one warp, <= 512 experts, 32-bit keys: _select_rounds
    HANDOVER: tl.constexpr = False,  # ROUNDS: the weights from the scores the rounds hand over
    DENSE_OUT: tl.constexpr = False,  # outputs [T, K] with strides (K, 1), 16-byte aligned (launch.dense_outputs)
    CHECKED_STREAM: tl.constexpr = True,  # window keys of runs checked finite in the stream, else in the tail
    STORE_FIRST: tl.constexpr = False,  # the window's rows stored before the exact redo, not after it
    GRID_WAIT: tl.constexpr = False,  # launched with PDL: wait for the stream's previous kernel first
):
    if GRID_WAIT:  # nothing is read before the previous kernel has completed and its writes are visible
        tl.extra.cuda.gdc_wait()
    if ROUNDS:  # one row on one warp
        _route_in_rounds(logits_ptr, bias_ptr, stride_l_row, weights_ptr, ids_ptr, padding_ptr, stride_w_row, stride_w_col,
                         stride_i_row, stride_i_col, num_rows, scale, TOPK, SCORING, RENORMALIZE, NUM_EXPERTS,
                         BLOCK_EXPERTS, NUM_GROUPS, GROUP_SIZE, TOPK_GROUP, BLOCK_GROUPS, BLOCK_GROUP_SIZE, LANES,
                         CHUNK, LOG2_CHUNK, GROUPS_PER_LOAD, PREFETCH, WORDS, HANDOVER, DENSE_OUT)
    else:
        _route_streaming(logits_ptr, bias_ptr, stride_l_row, weights_ptr, ids_ptr, padding_ptr, stride_w_row, stride_w_col,
                         stride_i_row, stride_i_col, num_rows, scale, TOPK, SCORING, RENORMALIZE, NUM_EXPERTS,
                         BLOCK_EXPERTS, NUM_GROUPS, GROUP_SIZE, TOPK_GROUP, BLOCK_GROUPS, BLOCK_GROUP_SIZE, ROWS,
                         LANES, CHUNK, LOG2_CHUNK, GROUP, GROUPS_PER_LOAD, PREFETCH, WORDS, ONE_PASS, DENSE_OUT,
                         CHECKED_STREAM, STORE_FIRST)


@triton.jit
def _route_streaming(logits_ptr, bias_ptr, stride_l_row, weights_ptr, ids_ptr, padding_ptr, stride_w_row, stride_w_col,
                     stride_i_row, stride_i_col, num_rows, scale, TOPK: tl.constexpr, SCORING: tl.constexpr,
                     RENORMALIZE: tl.constexpr, NUM_EXPERTS: tl.constexpr, BLOCK_EXPERTS: tl.constexpr,
                     NUM_GROUPS: tl.constexpr, GROUP_SIZE: tl.constexpr, TOPK_GROUP: tl.constexpr,
                     BLOCK_GROUPS: tl.constexpr, BLOCK_GROUP_SIZE: tl.constexpr, ROWS: tl.constexpr,
                     LANES: tl.constexpr, CHUNK: tl.constexpr, LOG2_CHUNK: tl.constexpr, GROUP: tl.constexpr,
                     GROUPS_PER_LOAD: tl.constexpr, PREFETCH: tl.constexpr, WORDS: tl.constexpr,
                     ONE_PASS: tl.constexpr, DENSE_OUT: tl.constexpr, CHECKED_STREAM: tl.constexpr,
                     STORE_FIRST: tl.constexpr):
    """ROWS rows a program, LANES lanes a row: the lanes' lists (module docstring).

    ``STORE_FIRST``: the rows the window keys settle are stored before the exact redo of the others
    (which then store their own), so that the common path runs straight on from the selection to its stores; the
    redo's ~2800 instructions otherwise lie between them, and every warp, reaching its stores at about the same
    time, waits on fetching their code (docs/kernel-design-log.md). Each row is stored once either way."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < num_rows
    rows64 = rows.to(tl.int64)

    # grouped: rank the groups first, then select among the kept groups' experts
    kept = None
    if TOPK_GROUP < NUM_GROUPS and not ONE_PASS:
        kept = _kept_group_bits(logits_ptr, bias_ptr, rows64, row_ok, stride_l_row, NUM_GROUPS, GROUP_SIZE,
                                TOPK_GROUP, BLOCK_GROUPS, BLOCK_GROUP_SIZE, GROUPS_PER_LOAD, ROWS, PREFETCH)

    # PREFETCH: the first step's logits are loaded before the bias window is formed, not after (the
    # selection below depends on the window, and its loads would otherwise wait for it). Both key
    # encodings read the same step when their runs are alike (GROUP = 1).
    x_first = None
    if PREFETCH:
        x_first = _step_load(logits_ptr + rows64[:, None, None, None] * stride_l_row, row_ok, tl.arange(0, LANES),
                             tl.arange(0, CHUNK), tl.arange(0, GROUP), 0, kept, NUM_EXPERTS, GROUP_SIZE, LANES,
                             CHUNK, GROUP, WORDS)
    x_exact = x_first if GROUP == 1 else None
    # ranked by the logits themselves: softmax, and flat sigmoid without bias beyond the window keys' 512
    # experts (exact keys of the logit instead of the sigmoid's: no sigmoid per expert). No window, nothing
    # to redo. Window keys stay faster than the 16-bit logit keys for sigmoid without bias (docs/kernel-design-log.md).
    LOGIT16: tl.constexpr = logits_ptr.dtype.element_ty.primitive_bitwidth == 16 and NUM_EXPERTS <= WINDOW_EXPERTS
    # Sqrt-softplus without bias likewise (strictly increasing); with a bias, window keys certified by the tail
    # (``_certify_sqrt``: its lists must hold more than TOPK keys), else exact keys.
    tl.static_assert(SCORING == SIGMOID or TOPK_GROUP >= NUM_GROUPS)  # (rules.bitonic_supported)
    BY_LOGIT: tl.constexpr = SCORING == SOFTMAX or (bias_ptr is None and TOPK_GROUP >= NUM_GROUPS
                                                   and (SCORING == SQRTSOFTPLUS or NUM_EXPERTS > WINDOW_EXPERTS))
    EXACT: tl.constexpr = SQRTSOFTPLUS_KEYS if SCORING == SQRTSOFTPLUS else EXACT_KEYS
    # (sqrt-softplus window keys need lists longer than TOPK: at TOPK = CHUNK exact keys, in the branch ``usable`` never
    # takes, which Triton compiles all the same)
    WINDOW: tl.constexpr = (WINDOW_KEYS if SCORING != SQRTSOFTPLUS else
                            SQRT_WINDOW_KEYS if TOPK < CHUNK else SQRTSOFTPLUS_KEYS)
    offset, steps, usable, above = 0.0, 1.0, False, 0.0
    if NUM_EXPERTS <= WINDOW_EXPERTS and not BY_LOGIT and SCORING == SIGMOID:
        offset, steps, usable = _window(bias_ptr, NUM_EXPERTS, BLOCK_EXPERTS)
    elif NUM_EXPERTS <= WINDOW_EXPERTS and not BY_LOGIT and TOPK < CHUNK:  # sqrt-softplus with a bias
        offset, steps, usable, above = _sqrt_window(bias_ptr, NUM_EXPERTS, BLOCK_EXPERTS)
    if BY_LOGIT:
        tl.static_assert(bias_ptr is None and TOPK_GROUP >= NUM_GROUPS)
        if LOGIT16:
            expert, valid, _ = _select(logits_ptr, None, rows64, row_ok, stride_l_row, 0.0, 1.0, None, NUM_EXPERTS,
                                       GROUP_SIZE, TOPK, ROWS, LANES, CHUNK, GROUP, LOGIT16_KEYS, PREFETCH, WORDS,
                                       x_first)
        else:
            expert, valid, _ = _select(logits_ptr, None, rows64, row_ok, stride_l_row, 0.0, 1.0, None, NUM_EXPERTS,
                                       GROUP_SIZE, TOPK, ROWS, LANES, CHUNK, 1, LOGIT_KEYS, PREFETCH, WORDS, x_exact)
    elif usable:
        if ONE_PASS:
            expert, valid, floored, kept_found = _select_one_pass(
                logits_ptr, bias_ptr, rows64, row_ok, stride_l_row, offset, steps, NUM_EXPERTS, GROUP_SIZE,
                NUM_GROUPS, TOPK_GROUP, TOPK, ROWS, LANES, CHUNK, GROUP, PREFETCH, WORDS, x_first)
        else:
            kept_found = kept
            expert, valid, floored = _select(logits_ptr, bias_ptr, rows64, row_ok, stride_l_row, offset, steps, kept,
                                             NUM_EXPERTS, GROUP_SIZE, TOPK, ROWS, LANES, CHUNK, GROUP, WINDOW, PREFETCH,
                                             WORDS, x_first, CHECKED_STREAM, above)
        if STORE_FIRST:
            _store_row(logits_ptr, rows64, row_ok & ~floored, stride_l_row, expert, valid, weights_ptr, ids_ptr, padding_ptr,
                       stride_w_row, stride_w_col, stride_i_row, stride_i_col, scale, TOPK, SCORING, RENORMALIZE,
                       NUM_EXPERTS, ROWS, CHUNK, LOG2_CHUNK, DENSE_OUT)
        if tl.max(floored.to(tl.int32), axis=0) > 0:  # some row has fewer than K experts in the window (or uncertified)
            exact, exact_valid, _ = _select(logits_ptr, bias_ptr, rows64, row_ok, stride_l_row, 0.0, 1.0,
                                            kept_found, NUM_EXPERTS, GROUP_SIZE, TOPK, ROWS, LANES, CHUNK, 1, EXACT,
                                            PREFETCH, WORDS, x_exact)
            if STORE_FIRST:
                _store_row(logits_ptr, rows64, row_ok & floored, stride_l_row, exact, exact_valid, weights_ptr,
                           ids_ptr, padding_ptr, stride_w_row, stride_w_col, stride_i_row, stride_i_col, scale, TOPK, SCORING,
                           RENORMALIZE, NUM_EXPERTS, ROWS, CHUNK, LOG2_CHUNK, DENSE_OUT)
            else:
                expert = tl.where(floored[:, None], exact, expert)
                valid = tl.where(floored[:, None], exact_valid, valid)
    else:
        kept_stage = kept
        if ONE_PASS:  # the window is unusable: the group stage, then the exact stream
            kept_stage = _kept_group_bits(logits_ptr, bias_ptr, rows64, row_ok, stride_l_row, NUM_GROUPS, GROUP_SIZE,
                                          TOPK_GROUP, BLOCK_GROUPS, BLOCK_GROUP_SIZE, GROUPS_PER_LOAD, ROWS, PREFETCH)
        expert, valid, _ = _select(logits_ptr, bias_ptr, rows64, row_ok, stride_l_row, 0.0, 1.0, kept_stage,
                                   NUM_EXPERTS, GROUP_SIZE, TOPK, ROWS, LANES, CHUNK, 1, EXACT, PREFETCH,
                                   WORDS, x_exact)
        if STORE_FIRST:
            _store_row(logits_ptr, rows64, row_ok, stride_l_row, expert, valid, weights_ptr, ids_ptr, padding_ptr, stride_w_row,
                       stride_w_col, stride_i_row, stride_i_col, scale, TOPK, SCORING, RENORMALIZE, NUM_EXPERTS, ROWS,
                       CHUNK, LOG2_CHUNK, DENSE_OUT)

    if not STORE_FIRST or BY_LOGIT:  # (STORE_FIRST: the window's and the exact path's rows are stored above)
        _store_row(logits_ptr, rows64, row_ok, stride_l_row, expert, valid, weights_ptr, ids_ptr, padding_ptr, stride_w_row,
                   stride_w_col, stride_i_row, stride_i_col, scale, TOPK, SCORING, RENORMALIZE, NUM_EXPERTS, ROWS,
                   CHUNK, LOG2_CHUNK, DENSE_OUT)


@triton.jit
def _store_row(logits_ptr, rows64, row_ok, stride_l_row, expert, valid, weights_ptr, ids_ptr, padding_ptr, stride_w_row,
               stride_w_col, stride_i_row, stride_i_col, scale, TOPK: tl.constexpr, SCORING: tl.constexpr,
               RENORMALIZE: tl.constexpr, NUM_EXPERTS: tl.constexpr, ROWS: tl.constexpr, CHUNK: tl.constexpr,
               LOG2_CHUNK: tl.constexpr, DENSE_OUT: tl.constexpr):
    """The rows' weights and ids from the chosen experts [ROWS, CHUNK]: the unbiased scores of the chosen
    (their logits re-read: cache hits), renormalised, scaled, stored."""
    slot = tl.arange(0, CHUNK)
    out_mask = row_ok[:, None] & (slot < TOPK)[None, :]
    x = tl.load(logits_ptr + rows64[:, None] * stride_l_row + expert, mask=out_mask & valid, other=0.0)
    if SCORING == SOFTMAX:  # exp(x - max) of the chosen, over the row's sum of them (which renormalising cancels)
        x = tl.where(out_mask & valid, x.to(tl.float32), float("-inf"))
        top = tl.max(x, axis=1)  # the best chosen logit: the row's largest valid one
        top = tl.where(top == float("-inf"), 0.0, top)
        chosen = tl.where(out_mask & valid, tl.exp(x - top[:, None]), 0.0)
        if not RENORMALIZE:
            total = _softmax_total(logits_ptr, rows64, row_ok, stride_l_row, top, NUM_EXPERTS, ROWS)
            chosen = chosen / tl.where(total > 0.0, total, 1.0)[:, None]
    else:
        chosen = tl.where(out_mask, elementwise_scores(x.to(tl.float32), valid, SCORING), 0.0)
    weights = finish_weights(chosen, slot, TOPK, RENORMALIZE, ROWS, CHUNK, LOG2_CHUNK, scale)
    _store_outputs(weights_ptr, ids_ptr, padding_ptr, stride_w_row, stride_w_col, stride_i_row, stride_i_col, rows64, row_ok,
                   weights, expert, TOPK, CHUNK, DENSE_OUT)


@triton.jit
def _store_outputs(weights_ptr, ids_ptr, padding_ptr, stride_w_row, stride_w_col, stride_i_row, stride_i_col, rows, row_ok, weights,
                   expert, TOPK: tl.constexpr, CHUNK: tl.constexpr, DENSE_OUT: tl.constexpr):
    """Store the first TOPK of each row's ``weights`` and ``expert`` [R, CHUNK] where ``row_ok`` [R].

    ``DENSE_OUT`` (``launch.dense_outputs``: both outputs [T, K] with strides (K, 1) and 16-byte aligned):
    the strides as constants and the rows' alignment told to the compiler, so that a row's values leave in vector
    stores (16 bytes where 4 K is a multiple of 16: K = 8 takes two 16-byte stores a row and output instead of eight
    4-byte ones), under a mask constant along the row where K fills the slots. Otherwise element by element, at
    any strides."""
    slot = tl.arange(0, CHUNK)
    mask = row_ok[:, None] & (slot < TOPK)[None, :]
    if DENSE_OUT:
        ALIGN: tl.constexpr = min(16, (4 * TOPK) & -(4 * TOPK))  # bytes: the largest power of two dividing 4 K
        w_ptrs = tl.multiple_of(weights_ptr + rows[:, None] * TOPK + slot[None, :], [4, ALIGN])
        i_ptrs = tl.multiple_of(ids_ptr + rows[:, None] * TOPK + slot[None, :], [4, ALIGN])
        if TOPK == CHUNK:
            mask = tl.broadcast_to(row_ok[:, None], mask.shape)
    else:
        w_ptrs = weights_ptr + rows[:, None] * stride_w_row + slot[None, :] * stride_w_col
        i_ptrs = ids_ptr + rows[:, None] * stride_i_row + slot[None, :] * stride_i_col
    if padding_ptr is not None:
        padded = tl.load(padding_ptr + rows, mask=row_ok, other=0) != 0
        weights = tl.where(padded[:, None], 0.0, weights)
        expert = tl.where(padded[:, None], -1, expert)
    tl.store(w_ptrs, weights, mask=mask)
    tl.store(i_ptrs, expert, mask=mask)


@triton.jit
def _store_picks(picks, values, row, store, weights_ptr, ids_ptr, padding_ptr, stride_w_row, stride_w_col, stride_i_row,
                 stride_i_col, scale, TOPK: tl.constexpr, SCORING: tl.constexpr, RENORMALIZE: tl.constexpr,
                 CHUNK: tl.constexpr, DENSE_OUT: tl.constexpr):
    """``_store_row`` for one row whose TOPK picks are all valid (``store``: stores nothing otherwise), from the
    rounds' keys and logits (scalars, the same in every thread) with the same arithmetic as
    ``_store_row`` (``sigmoid_scores``, or exp(x - the first pick's x), and ``finish_weights``' pairwise sum
    over CHUNK slots with 0 past TOPK), so the same bits, without re-reading the logits or a reduction across
    threads. Straight-line code (no branch): each pick's score is formed while the later rounds run."""
    slot = tl.arange(0, CHUNK)
    scores = ()
    chosen = tl.zeros((CHUNK,), tl.float32)
    expert = tl.zeros((CHUNK,), tl.int32)
    for r in tl.static_range(TOPK):
        if SCORING == SOFTMAX:  # ``values``: the picks' logits
            score = tl.exp(values[r] - values[0])
        else:  # ``values``: the picks' sigmoid scores
            score = values[r]
        scores = scores + (score,)
        chosen = tl.where(slot == r, score, chosen)
        expert = tl.where(slot == r, ((picks[r] & INDEX_MASK) ^ INDEX_MASK).to(tl.int32), expert)
    if RENORMALIZE:  # ``tree_sum``'s pairs, over scalars (``tree_sum`` of the [CHUNK] tile would shuffle)
        level = scores
        for _ in tl.static_range(CHUNK - TOPK):
            level = level + (tl.zeros((), tl.float32),)
        for b in tl.static_range(5):
            if (1 << b) < CHUNK:
                pairs = ()
                for i in tl.static_range(CHUNK >> (b + 1)):
                    pairs = pairs + (level[2 * i] + level[2 * i + 1],)
                level = pairs
        total = level[0]
        chosen = tl.where(total > 0.0, chosen / tl.where(total > 0.0, total, 1.0), 1.0 / TOPK)
    _store_outputs(weights_ptr, ids_ptr, padding_ptr, stride_w_row, stride_w_col, stride_i_row, stride_i_col, row[None],
                   store[None], tl.reshape(chosen * scale, (1, CHUNK)), tl.reshape(expert, (1, CHUNK)), TOPK, CHUNK,
                   DENSE_OUT)


@triton.jit
def _route_sqrt_exact(logits_ptr, bias_ptr, rows64, rows_ok, stride_l_row, weights_ptr, ids_ptr, padding_ptr,
                      stride_w_row, stride_w_col, stride_i_row, stride_i_col, scale, TOPK: tl.constexpr,
                      RENORMALIZE: tl.constexpr, NUM_EXPERTS: tl.constexpr, GROUP_SIZE: tl.constexpr,
                      LANES: tl.constexpr, CHUNK: tl.constexpr, LOG2_CHUNK: tl.constexpr, PREFETCH: tl.constexpr,
                      WORDS: tl.constexpr, DENSE_OUT: tl.constexpr):
    """A sqrt-softplus row on the one-row tile ranked and stored by exact keys (the streaming path's)."""
    chosen, valid, _floored = _select(logits_ptr, bias_ptr, rows64, rows_ok, stride_l_row, 0.0, 1.0, None,
                                      NUM_EXPERTS, GROUP_SIZE, TOPK, 1, LANES, CHUNK, 1, SQRTSOFTPLUS_KEYS, PREFETCH,
                                      WORDS)
    _store_row(logits_ptr, rows64, rows_ok, stride_l_row, chosen, valid, weights_ptr, ids_ptr, padding_ptr,
               stride_w_row, stride_w_col, stride_i_row, stride_i_col, scale, TOPK, SQRTSOFTPLUS, RENORMALIZE,
               NUM_EXPERTS, 1, CHUNK, LOG2_CHUNK, DENSE_OUT)


@triton.jit
def _route_in_rounds(logits_ptr, bias_ptr, stride_l_row, weights_ptr, ids_ptr, padding_ptr, stride_w_row, stride_w_col,
                     stride_i_row, stride_i_col, num_rows, scale, TOPK: tl.constexpr, SCORING: tl.constexpr,
                     RENORMALIZE: tl.constexpr, NUM_EXPERTS: tl.constexpr, BLOCK_EXPERTS: tl.constexpr,
                     NUM_GROUPS: tl.constexpr, GROUP_SIZE: tl.constexpr, TOPK_GROUP: tl.constexpr,
                     BLOCK_GROUPS: tl.constexpr, BLOCK_GROUP_SIZE: tl.constexpr, LANES: tl.constexpr,
                     CHUNK: tl.constexpr, LOG2_CHUNK: tl.constexpr, GROUPS_PER_LOAD: tl.constexpr,
                     PREFETCH: tl.constexpr, WORDS: tl.constexpr, HANDOVER: tl.constexpr, DENSE_OUT: tl.constexpr):
    """One row on one warp (``ROUNDS``): the row (and bias) in the rounds' layout, the window, the picks by K
    warp-wide maxima (``_select_rounds``) and their weights. ``HANDOVER``: each round's winner also
    hands over its pick's score (sigmoid) or logit (softmax), and a row whose picks are all valid stores weights
    formed from these scalars (``_store_picks``): no re-read of the logits, no reduction across threads, no
    shared-memory round trip before the stores; fewer steps on the row's chain, more instructions per row (the
    rule keeps it where measured faster). Otherwise, and for the rows ``_store_picks`` leaves, the window's
    picks with their logits re-read (``_store_row``); rows with a pick under the window or invalid, and rows
    whose bias window is unusable, take the streaming path's exact keys. Sqrt-softplus rows: K + 1 rounds, the
    certain rows stored from the picks and their lane-formed scores; an uncertain row takes the rest of the CHUNK
    rounds, then one close pair is settled by its exact c (``_swap_close_pair``), then the picks are ranked by exact
    keys (``_certify_sqrt``), then the row by exact keys (``_route_sqrt_exact``)."""
    tl.static_assert(BLOCK_EXPERTS <= WINDOW_EXPERTS)
    PER: tl.constexpr = BLOCK_EXPERTS // 32
    row = tl.program_id(0).to(tl.int64)
    row_ok = row < num_rows
    rows64 = row + tl.zeros((1,), tl.int64)
    rows_ok = rows64 < num_rows
    # grouped: the groups ranked in this tile where each thread's experts lie in one group, else the
    # group stage first
    GROUPS_IN_TILE: tl.constexpr = (TOPK_GROUP < NUM_GROUPS and NUM_EXPERTS == BLOCK_EXPERTS
                                    and GROUP_SIZE % PER == 0)
    kept = None
    if TOPK_GROUP < NUM_GROUPS and not GROUPS_IN_TILE:
        kept = _kept_group_bits(logits_ptr, bias_ptr, rows64, rows_ok, stride_l_row, NUM_GROUPS, GROUP_SIZE,
                                TOPK_GROUP, BLOCK_GROUPS, BLOCK_GROUP_SIZE, GROUPS_PER_LOAD, 1, PREFETCH)
    expert = tl.arange(0, 32)[:, None] * PER + tl.arange(0, PER)[None, :]
    exists = expert < NUM_EXPERTS
    x = _rounds_load(logits_ptr, row * stride_l_row, row_ok, NUM_EXPERTS, PER)
    tl.static_assert(SCORING != SQRTSOFTPLUS or (bias_ptr is not None and TOPK_GROUP >= NUM_GROUPS))  # (rules)
    if SCORING == SOFTMAX:  # ranked by the 16-bit logits' own bits: no window, nothing under it
        tl.static_assert(bias_ptr is None and TOPK_GROUP >= NUM_GROUPS
                         and logits_ptr.dtype.element_ty.primitive_bitwidth == 16)
        HAND_LOGITS: tl.constexpr = HANDOVER and RENORMALIZE  # (unrenormalised: over the row's sum, a second read)
        handed = None
        if HAND_LOGITS:
            handed = x.to(tl.float32)
        picks, logits, _kept, _lists = _select_rounds(x, handed, expert, exists, None, 0.0, 1.0, None, NUM_GROUPS,
                                                      GROUP_SIZE, TOPK_GROUP, TOPK, CHUNK, LOGIT16_KEYS)
        quick = tl.zeros((), tl.int1)
        if HAND_LOGITS:
            quick = _complete_picks(picks, TOPK, LOGIT16_KEYS)
            _store_picks(picks, logits, row, row_ok & quick, weights_ptr, ids_ptr, padding_ptr, stride_w_row, stride_w_col,
                         stride_i_row, stride_i_col, scale, TOPK, SCORING, RENORMALIZE, CHUNK, DENSE_OUT)
        if quick.to(tl.int32) == 0:  # a non-finite logit among the picks (its weight is 0), or unrenormalised
            chosen, valid = _picks_tile(picks, TOPK, CHUNK, LOGIT16_KEYS)
            _store_row(logits_ptr, rows64, rows_ok, stride_l_row, chosen, valid, weights_ptr, ids_ptr, padding_ptr, stride_w_row,
                       stride_w_col, stride_i_row, stride_i_col, scale, TOPK, SCORING, RENORMALIZE, NUM_EXPERTS, 1,
                       CHUNK, LOG2_CHUNK, DENSE_OUT)
    elif SCORING == SQRTSOFTPLUS:  # the bias window's keys, TOPK + 1 rounds, the picks certified
        bias = _rounds_load(bias_ptr, 0, True, NUM_EXPERTS, PER).to(tl.float32)
        # by REDUX: ptxas schedules the bias maximum (for ``above``) just before the gap test, where five float
        # shuffles would sit on the row's chain (static SASS, sm_90)
        lo, hi, finite = _warp_bias_bounds(bias, True)
        offset, steps, usable, above = _sqrt_window_from(lo, hi, finite)
        if TOPK < CHUNK:  # (the certificate needs a pick past the TOPK-th)
            picks, _unused, _kept, lists = _select_rounds(x, None, expert, exists, bias, offset, steps, None,
                                                          NUM_GROUPS, GROUP_SIZE, TOPK_GROUP, TOPK + 1, CHUNK,
                                                          SQRT_WINDOW_KEYS)
            threshold = _sqrt_threshold(offset, steps, above)
            certain = usable & _gaps_certain(_picks_q(picks, TOPK + 1), threshold, TOPK)
            scores = _lane_scores(picks, logits_ptr + row * stride_l_row, row_ok, TOPK, NUM_EXPERTS)
            _store_picks(picks, scores, row, row_ok & certain, weights_ptr, ids_ptr, padding_ptr, stride_w_row,
                         stride_w_col, stride_i_row, stride_i_col, scale, TOPK, SCORING, RENORMALIZE, CHUNK, DENSE_OUT)
            if certain.to(tl.int32) == 0:
                # the rest of the CHUNK picks: they widen the list an uncertain row is ranked from, so that near ties
                # around the TOPK-th pick are ranked rather than redone
                listed = picks
                for _ in tl.static_range(CHUNK - TOPK - 1):
                    top, _won, lists = _round(lists)
                    listed = listed + (top,)
                settled = tl.zeros((), tl.int1)
                if TOPK + 2 <= CHUNK:  # one close pair: ranked by its two exact c
                    keys, ranked, settled = _swap_close_pair(listed, scores, logits_ptr + row * stride_l_row,
                                                             bias_ptr, row_ok, threshold, usable, TOPK)
                    _store_picks(keys, ranked, row, row_ok & settled, weights_ptr, ids_ptr, padding_ptr,
                                 stride_w_row, stride_w_col, stride_i_row, stride_i_col, scale, TOPK, SCORING,
                                 RENORMALIZE, CHUNK, DENSE_OUT)
                if settled.to(tl.int32) == 0:  # the listed picks ranked by exact keys, where that is certain
                    chosen, valid, uncertified = _certify_sqrt(_picks_keys(listed, CHUNK, CHUNK), logits_ptr, bias_ptr,
                                                               rows64, rows_ok, stride_l_row, offset, steps, above,
                                                               TOPK, CHUNK)
                    if usable & (tl.max(uncertified.to(tl.int32), axis=0) == 0):
                        _store_row(logits_ptr, rows64, rows_ok, stride_l_row, chosen, valid, weights_ptr, ids_ptr,
                                   padding_ptr, stride_w_row, stride_w_col, stride_i_row, stride_i_col, scale, TOPK,
                                   SCORING, RENORMALIZE, NUM_EXPERTS, 1, CHUNK, LOG2_CHUNK, DENSE_OUT)
                    else:
                        _route_sqrt_exact(logits_ptr, bias_ptr, rows64, rows_ok, stride_l_row, weights_ptr, ids_ptr,
                                          padding_ptr, stride_w_row, stride_w_col, stride_i_row, stride_i_col, scale,
                                          TOPK, RENORMALIZE, NUM_EXPERTS, GROUP_SIZE, LANES, CHUNK, LOG2_CHUNK,
                                          PREFETCH, WORDS, DENSE_OUT)
        else:
            _route_sqrt_exact(logits_ptr, bias_ptr, rows64, rows_ok, stride_l_row, weights_ptr, ids_ptr, padding_ptr,
                              stride_w_row, stride_w_col, stride_i_row, stride_i_col, scale, TOPK, RENORMALIZE,
                              NUM_EXPERTS, GROUP_SIZE, LANES, CHUNK, LOG2_CHUNK, PREFETCH, WORDS, DENSE_OUT)
    else:
        bias = None
        if bias_ptr is not None:  # the window from the bias read here (the same min and max as ``_window``)
            bias = _rounds_load(bias_ptr, 0, True, NUM_EXPERTS, PER).to(tl.float32)
            offset, steps, usable = _warp_window(bias, PER <= 4 or GROUPS_IN_TILE)  # (measured faster: design log)
        else:
            offset, steps, usable = _window(None, NUM_EXPERTS, BLOCK_EXPERTS)
        # the keys are formed whatever the window (a row whose window is unusable ignores them); the picks' scores
        # handed over are the keys' own sigmoids, ``sigmoid_scores``' bits wherever those are normal floats
        # (``_window_sigmoid``)
        handed = None
        if HANDOVER:
            handed = _window_sigmoid(x.to(tl.float32))
        picks, picked, kept_tile, _lists = _select_rounds(x, handed, expert, exists, bias, offset, steps, kept,
                                                          NUM_GROUPS, GROUP_SIZE, TOPK_GROUP, TOPK, CHUNK, WINDOW_KEYS)
        windowed = usable & _complete_picks(picks, TOPK, WINDOW_KEYS)  # the window's picks stand (as on the lane merge)
        quick = tl.zeros((), tl.int1)
        if HANDOVER:  # every pick's score positive: their smallest, formed as they arrive (a NaN score, which
            # tl.minimum would pass over, comes only from a NaN logit, whose pick is invalid: not ``windowed``)
            lowest_score = picked[0]
            for r in tl.static_range(1, TOPK):
                lowest_score = tl.minimum(lowest_score, picked[r])
            quick = windowed & (lowest_score > 0.0)
            _store_picks(picks, picked, row, row_ok & quick, weights_ptr, ids_ptr, padding_ptr, stride_w_row, stride_w_col,
                         stride_i_row, stride_i_col, scale, TOPK, SCORING, RENORMALIZE, CHUNK, DENSE_OUT)
        if quick.to(tl.int32) == 0:
            if windowed:  # the window's picks, their logits re-read (HANDOVER: a pick's score under 2**-126)
                chosen, valid = _picks_tile(picks, TOPK, CHUNK, WINDOW_KEYS)
            else:  # exact keys: a pick under the window (or invalid), or a window outside (-8, 8) or non-finite
                kept_stage = kept
                if GROUPS_IN_TILE:  # the tile's groups (from the same c), or the group stage
                    if usable:
                        kept_stage = kept_tile
                    else:
                        kept_stage = _kept_group_bits(logits_ptr, bias_ptr, rows64, rows_ok, stride_l_row, NUM_GROUPS,
                                                      GROUP_SIZE, TOPK_GROUP, BLOCK_GROUPS, BLOCK_GROUP_SIZE,
                                                      GROUPS_PER_LOAD, 1, PREFETCH)
                chosen, valid, _ = _select(logits_ptr, bias_ptr, rows64, rows_ok, stride_l_row, 0.0, 1.0, kept_stage,
                                           NUM_EXPERTS, GROUP_SIZE, TOPK, 1, LANES, CHUNK, 1, EXACT_KEYS, PREFETCH,
                                           WORDS)
            _store_row(logits_ptr, rows64, rows_ok, stride_l_row, chosen, valid, weights_ptr, ids_ptr, padding_ptr, stride_w_row,
                       stride_w_col, stride_i_row, stride_i_col, scale, TOPK, SCORING, RENORMALIZE, NUM_EXPERTS, 1,
                       CHUNK, LOG2_CHUNK, DENSE_OUT)
