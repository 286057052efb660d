"""Which kernel and tile a call gets (deterministic rules), and the launch.

Two kernels share one runtime argument list: ``rounds`` (every scoring, grouping and size: K rounds of
one fused max over the row held in registers) and ``bitonic`` (sigmoid scoring, flat or grouped, and
flat softmax without bias; K <= 32, E >= 32: a group stage, then streaming bitonic top-k on packed
keys; see _bitonic.py). Rules depend on the shape and on a *token class*, never on autotuning at call
time (which would break CUDA-graph capture and cost seconds on a first call). Measurements behind the
rules: benchmarks/NOTES.md.

Launching: Triton's ``kernel[grid](...)`` re-derives the specialisation of every argument in Python on
each call (tens of µs of host time for these kernels). The first call of a plan goes through it once;
afterwards the compiled kernel's own C launcher is called directly, from a cache keyed by everything
Triton specialises on (dtypes, constexprs, 16-byte alignment of the logits and bias pointers, the row
stride's divisibility), so the cached binary is always the one Triton itself would have chosen. The
same first call registers the binary with the C++ host path (host_launch.py), which serves later eager
calls of that key before any of this Python runs. Calls take Triton's own path whenever a launch hook
is installed (profilers), on ROCm, and in the interpreter. On NVIDIA GPUs of compute capability 9.0 and later
the rule's plans are launched with programmatic dependent launch (``with_device``, kernel v27).
"""

from __future__ import annotations

import bisect
import os
from typing import NamedTuple

import torch
import triton

from ..call import RoutingCall
from . import host_launch
from ._bitonic import bitonic_kernel
from ._common import log2
from ._rounds import rounds_kernel

LATENCY, SMALL, MEDIUM, MEDIUM_3K, LARGE, LARGE_12K, HUGE, HUGE_32K, HUGE_42K, HUGE_64K = range(10)  # token classes
CLASS_NAMES = ("latency", "small", "medium", "medium 3k", "large", "large 12k", "huge", "huge 32k", "huge 42k",
               "huge 64k")  # all_plans' keys
# the first token count of each class after LATENCY; HUGE_32K and HUGE_64K (session 13) split the prefill sizes
# where a tile's programs stop fitting one wave of the GPU (benchmarks/NOTES.md v11); MEDIUM_3K (session 20) the
# MEDIUM class where v19's one-row rounds tile stops paying (NOTES.md v19); LARGE_12K (session 23) the LARGE class
# where step-ahead loads stop paying for some rows (NOTES.md v22); HUGE_42K (session 25) the HUGE_32K class where
# step-ahead loads stop paying on the two-lane word tile (NOTES.md v24)
TOKEN_CLASS_STARTS = (257, 2048, 3072, 4096, 12288, 16384, 32768, 42240, 65536)
# registers per thread of the grouped one-pass lane-per-row tile from 65536 tokens (NVIDIA): 148 left 12 of its
# one-warp programs per SM, 128 lets 16 in, one wave of 2048 (v11: 29.5 against 31.9 us; slower below 50688
# tokens, where 148 fit one wave)
ONE_WAVE_REGISTERS = 128
MAX_BITONIC_TOPK = 32  # lists of up to 32 keys per lane (kernel v9; 16 before)
# MOE_ROUTING_PDL=0 launches every kernel without programmatic dependent launch (read once, at import)
PDL_ENV_SWITCH = "MOE_ROUTING_PDL"
_PDL_ENABLED = os.environ.get(PDL_ENV_SWITCH, "1") != "0"  # ``programmatic_launch_ok``


def token_class(tokens: int) -> int:
    """Token counts that every rule treats alike: <= 256, < 2048, < 3072, < 4096, < 12288, < 16384, < 32768, < 42240,
    < 65536, more (the C++ host path counts the same ``TOKEN_CLASS_STARTS``)."""
    return bisect.bisect_right(TOKEN_CLASS_STARTS, tokens)


class Plan(NamedTuple):
    """A kernel and its compile-time parameters for one call."""

    name: str  # "rounds" or "bitonic"
    kernel: object  # the @triton.jit function
    constexprs: dict  # in the kernel's parameter order
    rows: int  # tokens per program
    num_warps: int
    maxnreg: int | None = None  # registers per thread ptxas may use (NVIDIA only; None: its own choice)


def rounds_plan(call: RoutingCall, tclass: int, rows: int | None = None, num_warps: int | None = None) -> Plan:
    """The general kernel: whole rows in registers; several rows per program for many tokens."""
    block_groups = triton.next_power_of_2(call.num_groups)
    block_group_size = triton.next_power_of_2(call.group_size)
    block = block_groups * block_group_size
    block_k = triton.next_power_of_2(call.topk)
    if rows is None:
        rows = max(1, min(8, 1024 // block)) if tclass >= LARGE else 1
    if num_warps is None:
        num_warps = max(1, min(8, rows * block // 256))
    constexprs = dict(
        TOPK=call.topk, SOFTMAX=call.softmax, RENORMALIZE=call.renormalize,
        NUM_GROUPS=call.num_groups, GROUP_SIZE=call.group_size, TOPK_GROUP=call.topk_group,
        ROWS=rows, BLOCK_GROUPS=block_groups, BLOCK_GROUP_SIZE=block_group_size, BLOCK_K=block_k,
        LOG2_BLOCK=log2(block), LOG2_BLOCK_K=log2(block_k),
        GRID_WAIT=False,  # (v27) on: ``with_device``
    )
    return Plan("rounds", rounds_kernel, constexprs, rows, num_warps)


def bitonic_supported(call: RoutingCall, biased: bool = False) -> bool:
    """K <= 32 and at least 32 experts; sigmoid scoring (flat, or grouped with kept groups of 8+ experts),
    or softmax scoring flat and without a bias (``biased``), ranked by the logits themselves. Softmax
    with a bias or grouped needs the row's softmax before ranking: the rounds kernel."""
    if call.softmax and (biased or call.grouped):
        return False
    return (call.topk <= MAX_BITONIC_TOPK and call.experts >= 32
            and (not call.grouped or call.topk_group * call.group_size >= 8))


def bitonic_plan(call: RoutingCall, lanes: int, rows: int, num_warps: int, group: int = 1,
                 groups_per_load: int = 1, prefetch: bool = False, words: bool = False,
                 one_pass: bool = False, rounds: bool = False) -> Plan:
    """A bitonic tile. ``group`` (runs of the filter) must divide the group size; ``groups_per_load`` is
    how many groups the group stage reads at once; ``prefetch`` loads each step's logits a step ahead;
    ``words`` reads 16-bit logits as 64-bit words (``words_ok``; only for 16-byte aligned rows, see
    ``wide_loads_ok``; flat or one-pass grouped); ``one_pass`` ranks the groups and keys the experts in
    one read of the row (``one_pass_ok``); ``rounds`` selects by K warp-wide reductions (``rounds_ok``)."""
    chunk = bitonic_chunk(call)
    assert not one_pass or one_pass_ok(call, lanes, group)
    block_groups = triton.next_power_of_2(call.num_groups)
    assert (not call.grouped or call.group_size % group == 0) and block_groups % groups_per_load == 0
    constexprs = dict(TOPK=call.topk, SOFTMAX=call.softmax, RENORMALIZE=call.renormalize, NUM_EXPERTS=call.experts,
                      BLOCK_EXPERTS=triton.next_power_of_2(call.experts), NUM_GROUPS=call.num_groups,
                      GROUP_SIZE=call.group_size, TOPK_GROUP=call.topk_group, BLOCK_GROUPS=block_groups,
                      BLOCK_GROUP_SIZE=triton.next_power_of_2(call.group_size),
                      ROWS=rows, LANES=lanes, CHUNK=chunk, LOG2_CHUNK=log2(chunk), GROUP=group,
                      GROUPS_PER_LOAD=groups_per_load, PREFETCH=prefetch,
                      WORDS=words, ONE_PASS=one_pass, ROUNDS=rounds, HANDOVER=False,
                      # (v23) vector stores into dense outputs on the lane-per-row tiles, where a warp's scalar stores
                      # touched 32 rows' lines each (session 24, run 1: 256 / 8 at 65536 tokens 20.63 us against
                      # 21.40 with strided stores, 128 / 8 13.75 against 14.16, grouped 4 of 8 27.01-27.40 against
                      # 27.80-28.17); on two lanes equal or 0.6% slower, on four up to 3% slower (the values' layout
                      # conversion before the vectors): those keep the strided stores
                      DENSE_OUT=lanes == 1,
                      # (v25) window keys of runs checked finite in the stream (off: in the tail, ``_bitonic_rule``)
                      CHECKED_STREAM=True,
                      # (v26) the window's rows stored before the exact redo (on: ``_bitonic_rule``)
                      STORE_FIRST=False,
                      # (v27) launched with PDL, waiting for the previous kernel first (on: ``with_device``)
                      GRID_WAIT=False)
    return Plan("bitonic", bitonic_kernel, constexprs, rows, num_warps)


def rounds_ok(call: RoutingCall, rows: int, num_warps: int, float32_logits: bool = False) -> bool:
    """Whether a tile may select by rounds (kernel v19, ``_bitonic._select_rounds``): one row on one warp, at
    most 512 experts (16 a thread), K <= 8, and 32-bit keys (all but softmax of float32 logits, ranked by exact
    64-bit keys)."""
    return (rows == 1 and num_warps == 1 and call.experts <= 512 and call.topk <= 8
            and not (call.softmax and float32_logits))


def bitonic_chunk(call: RoutingCall) -> int:
    """The length of a lane's sorted list: the top-k rounded up to a power of two, at least 8."""
    return max(8, triton.next_power_of_2(call.topk))


def one_pass_ok(call: RoutingCall, lanes: int, group: int) -> bool:
    """Whether a grouped bitonic tile can rank the groups and key the experts in one read (kernel v6):
    grouped, window keys possible (E <= 512), a power-of-two number of power-of-two groups, each lane's
    ``chunk * group`` experts of a step inside one group, and each step of ``lanes * chunk * group``
    experts made of whole groups. (v9 refused lists of 32 keys here after wrong ids on the H200; the cause
    was the group scores of steps whose groups span several lanes, fixed in v10: NOTES.md v10.)"""
    lane_span = bitonic_chunk(call) * group
    span = lanes * lane_span
    size = call.group_size
    return (call.grouped and call.experts <= 512 and call.num_groups & (call.num_groups - 1) == 0
            and size & (size - 1) == 0 and size % lane_span == 0 and span % size == 0 and call.experts % span == 0)


def one_pass_step(plan: Plan, call: RoutingCall) -> tuple[int, int]:
    """(groups per step, lanes per group) of a one-pass plan's tile: what decided whether v6-v9's one-pass
    group scores were right on the GPU (NOTES.md v10; tests and probes classify tiles by it)."""
    c = plan.constexprs
    lane_span = c["CHUNK"] * c["GROUP"]
    return c["LANES"] * lane_span // call.group_size, call.group_size // lane_span


def words_ok(call: RoutingCall, lanes: int, group: int) -> bool:
    """Whether a tile's steps can be read as 64-bit words (given 16-bit, aligned logits: ``wide_loads_ok``):
    runs of 4 and no partial step."""
    return group == 4 and call.experts % (lanes * bitonic_chunk(call) * group) == 0


def wide_loads_ok(logits: torch.Tensor, stride: int) -> bool:
    """Whether a row of ``logits`` may be read as 64-bit words: 16-bit values, a 16-byte aligned base and
    a row stride of a multiple of 16 elements (the launcher cache keys on exactly these)."""
    return logits.element_size() == 2 and logits.data_ptr() % 16 == 0 and stride % 16 == 0


def dense_outputs(weights: torch.Tensor, ids: torch.Tensor, topk: int) -> bool:
    """Whether both outputs are [T, K] with strides (K, 1) and 16-byte aligned, so that a bitonic plan may store them
    with the layout compiled in (``DENSE_OUT``, kernel v23: vector stores). What ``route()`` allocates always is; an
    ``out=`` pair usually is. Plans are keyed on it (``launcher_key``; host_launch.cpp's key likewise)."""
    return _dense(weights.stride(), ids.stride(), weights.data_ptr(), ids.data_ptr(), topk)


def _dense(weights_stride: tuple, ids_stride: tuple, weights_ptr: int, ids_ptr: int, topk: int) -> bool:
    return weights_stride == ids_stride == (topk, 1) and (weights_ptr | ids_ptr) & 15 == 0


def with_outputs(plan: Plan, dense: bool) -> Plan:
    """``plan`` for outputs that are dense (``dense_outputs``) or not. A plan with ``DENSE_OUT`` on (the rule's
    lane-per-row plans; tests force it on others) keeps it only where the outputs are dense; a plan with it off keeps
    the strided stores on any outputs."""
    if dense or not plan.constexprs.get("DENSE_OUT", False):
        return plan
    return plan._replace(constexprs={**plan.constexprs, "DENSE_OUT": False})


_pdl_by_device: dict[int, bool] = {}


def programmatic_launch_ok(index: int) -> bool:
    """Whether kernels on CUDA device ``index`` are launched with programmatic dependent launch (PDL): an NVIDIA GPU
    of compute capability 9.0 or later (``griddepcontrol`` is sm_90 PTX), unless ``MOE_ROUTING_PDL=0``."""
    ok = _pdl_by_device.get(index)
    if ok is None:
        ok = _pdl_by_device[index] = (_PDL_ENABLED and torch.version.hip is None
                                      and torch.cuda.get_device_capability(index) >= (9, 0))
    return ok


def with_device(plan: Plan, logits: torch.Tensor) -> Plan:
    """The rule's ``plan`` for the device of ``logits``: ``GRID_WAIT`` on where ``programmatic_launch_ok`` (kernel v27).

    The kernel is then launched with the programmatic-stream-serialization attribute, so that its launch overlaps the
    end of the stream's previous kernel, and its programs execute ``griddepcontrol.wait`` before anything else: no
    input is read and no output written before that kernel has completed and its writes are visible, so results and
    stream order are what a plain launch gives (nothing is triggered early for the kernel after). Session 28 (NOTES.md
    v27): 0.17-0.31 µs a call at 1 and 128 tokens under graph replay, 1.5-3.6% from 1024 to 32768 tokens, equal within
    drift at 65536. Plans a caller forces (``launch(plan=...)``: tests, probes, the census) are launched as given."""
    if not logits.is_cuda or not programmatic_launch_ok(logits.get_device()):
        return plan
    return plan._replace(constexprs={**plan.constexprs, "GRID_WAIT": True})


def tensor_traits(logits: torch.Tensor, bias: torch.Tensor | None) -> dict:
    """What the rule reads from the tensors besides the call (``choose_plan``'s and ``all_plans``' keywords):
    whether the logits may be read as words, whether there is a bias, whether the logits are float32."""
    return dict(wide_loads=wide_loads_ok(logits, logits.stride(0)), biased=bias is not None,
                float32_logits=logits.dtype == torch.float32)


def choose_plan(call: RoutingCall, tclass: int | None = None, wide_loads: bool = False, biased: bool = False,
                float32_logits: bool = False) -> Plan:
    """The rule. ``tclass`` defaults to the call's token class (tests pass each class explicitly);
    ``wide_loads``: the logits may be read as 64-bit words (``wide_loads_ok``); ``biased``: the call has
    a correction bias (softmax with a bias takes the rounds kernel); ``float32_logits``: the logits are
    float32 (a step loaded ahead holds twice the registers of a 16-bit one).

    Tiles from benchmarks/NOTES.md (v3 to v19: plan sweeps and A/B runs of sessions 5 to 20 on the H200).
    """
    if tclass is None:
        tclass = token_class(call.tokens)
    if bitonic_supported(call, biased):  # every token class, so that a row's result never depends on T
        return _bitonic_rule(call, tclass, wide_loads, float32_logits, biased)
    if call.grouped and tclass >= HUGE:
        return rounds_plan(call, tclass, 8, 8)
    return rounds_plan(call, tclass)


def _bitonic_rule(call: RoutingCall, tclass: int, wide_loads: bool = False, float32_logits: bool = False,
                  biased: bool = False) -> Plan:
    """The bitonic kernel's tile, and one read of the row for grouped routing wherever the tile allows it
    (``one_pass_ok``, kernel v6), word loads where aligned (v5-v7); benchmarks/NOTES.md."""
    if (tclass == MEDIUM and call.experts in (256, 512) and not call.softmax and not float32_logits
            and call.num_groups <= 16 and rounds_ok(call, 1, 1)):
        # (v19) 2048-3071 tokens, sigmoid rows of 256 or 512 experts (grouped too) on 16-bit logits: the SMALL
        # class's one-row tile, selecting by rounds (session 20, run 11 against v18's four-lane tile of runs 8-9:
        # 256 / 8 3.45 / 4.17 us at 2048 / 3071 tokens against 3.71 / 4.43 at 2048 / 3072, 512 / 8 4.43 / 5.53
        # against 5.50 / 6.03, grouped 4 of 8 3.84 / 4.67 against 4.01 / 5.07; 384 / 8 mixed, kept off)
        tclass = SMALL
    plan = _bitonic_tile(call, tclass)
    if (tclass >= HUGE_32K and not call.grouped and 256 < call.experts <= 512 and wide_loads
            and words_ok(call, 2, plan.constexprs["GROUP"])):
        # long flat rows, aligned 16-bit logits, from 32768 tokens: two lanes per row (word loads below),
        # merged in one halving (v7: 384 experts at T = 65536 30.1 us against 33.6 on the four-lane tile;
        # below 32768 tokens the four-lane tile is faster, v11)
        plan = bitonic_plan(call, 2, 16, 1, plan.constexprs["GROUP"])
    c = dict(plan.constexprs)
    if tclass >= MEDIUM and call.grouped and one_pass_ok(call, c["LANES"], c["GROUP"]):
        # one pass where measured faster: from the MEDIUM class up (two passes at decode sizes), and
        # with step-ahead loads on the four-lane tiles (NOTES.md v6; the two-lane tile without, v11)
        c["ONE_PASS"] = True
        c["PREFETCH"] = c["PREFETCH"] or c["LANES"] > 2
        if tclass == HUGE_64K and c["LANES"] == 1 and c["CHUNK"] == 8 and torch.version.hip is None:
            plan = plan._replace(maxnreg=ONE_WAVE_REGISTERS)
    if (c["LANES"] <= 2 and wide_loads and words_ok(call, c["LANES"], c["GROUP"])
            and (not call.grouped or c["ONE_PASS"])):
        # 16-bit logits as 64-bit words where aligned, on the tiles of one or two lanes per row, without
        # step-ahead loads (v6, v7; slower or no better on the four-lane tiles); flat rows, or grouped in
        # one pass (the two-pass stream masks by group)
        c["WORDS"] = True
    if (c["WORDS"] and c["LANES"] == 1 and not call.grouped
            and ((tclass == HUGE_64K and call.experts > 128) or tclass in (HUGE_32K, HUGE_42K)
                 or (tclass == HUGE and c["CHUNK"] == 8))):
        # flat rows on the lane-per-row word tile: step-ahead loads, with which the kernel reads each step's
        # bias per thread (v13, session 16, against v12: at 65536 tokens 160 / 8 15.56 us against 16.19,
        # 192 / 8 18.32 against 18.74, 224 / 8 19.72 against 20.59, 256 / 8 22.48 against 22.97; at 32768
        # 128 / 8 9.79 against 10.38, 160 / 8 10.82 against 12.26, 224 / 8 13.30 against 15.15; 128 / 8 at
        # 65536 tokens was slower in two runs, 14.49-14.54 against 14.19-14.30, and is left without), and
        # (v15) in the HUGE class too for lists of 8 keys, where rows that two lanes cannot read as whole word
        # steps take this tile (160 / 8 at 16384-28672 tokens 8.87-10.47 us against 9.79-11.67, 224 / 8
        # 10.78-12.86 against 11.82-14.54; softmax 2-4% faster; 192 / 16 mixed: 6% faster at 16384, 3% slower
        # at 28672)
        c["PREFETCH"] = True
    if (c["WORDS"] and c["LANES"] == 2 and not call.grouped and call.experts == 256 and tclass == HUGE
            and c["CHUNK"] == 8 and not call.softmax):
        # 256 experts, sigmoid, K <= 8 on the flat two-lane word tile below 32768 tokens: step-ahead loads
        # (v15: 9.12-12.99 us against 9.64-13.25 at 16384-28672 tokens). Slower or mixed elsewhere: at 32768,
        # with softmax (1%), with lists of 16 keys (3-10%), and for 128 and 192 experts (faster at
        # 16384-20480 tokens, slower at 24576-28672)
        c["PREFETCH"] = True
    if (tclass == HUGE_32K and not call.grouped and not call.softmax and c["WORDS"] and c["LANES"] == 2
            and call.experts > 256 and c["CHUNK"] == 8):
        # (v24) 32768-42239 tokens, flat sigmoid rows of 257-512 experts with K <= 8 on the two-lane word tile:
        # step-ahead loads, measured faster while the tile's programs fit one wave (with them 78 -> 93 registers a
        # thread: 21 programs of 16 rows an SM, 44352 tokens on 132 SMs). Session 25, run 6 (the rule against the
        # same tile without them): 512 / 8 19.32 / 22.37 / 23.26 us at 32768 / 36864 / 42239 tokens against
        # 20.18 / 23.19 / 23.78, 384 / 8 16.17 / 18.71 / 19.54 against 16.51 / 19.07 / 19.76; still faster at 42240
        # (19.40 against 19.66, 23.25 against 23.72: the class could reach higher, unmeasured from there to 49152),
        # slower from 49152 (run 5: 384 / 8 22.41 against 22.19, 57344 28.38 against 27.43, 65535 30.62 against
        # 28.68). Not for softmax rows (run 5: 0.5-1.2% faster, small), 256 experts (slower: 13.48 against 12.94 at
        # 32768) or grouped rows (one pass on a lane a row: 14.80 against 15.08 at 32768, 21.85 against 18.91 at 36864)
        c["PREFETCH"] = True
    if (float32_logits and not call.grouped and call.experts >= 256 and c["LANES"] == 4 and c["CHUNK"] == 8
            and tclass in (LARGE, LARGE_12K, HUGE)):
        # float32 rows of 256 experts and more, K <= 8, on the four-lane tile from 4096 to 32767 tokens: no
        # step-ahead loads (v16: a step loaded ahead holds twice the registers of a 16-bit one; 384 / 8 at
        # 12288 tokens 10.99 us against 13.96, 512 / 8 at 16384 16.34 against 19.76, 256 / 8 at 8192 7.48
        # against 7.65; the 16-bit measurements of v5, v7, v11 and v14 chose them. At 2048 tokens they still
        # pay, 384 / 8 4.92 against 5.39, and for 128 experts, 5.49 against 5.72 at 8192)
        c["PREFETCH"] = False
    if (tclass == LARGE_12K and not call.softmax and not float32_logits and c["LANES"] == 4 and c["CHUNK"] == 8
            and (call.experts == 256 or (call.experts in (224, 512) and not call.grouped))):
        # (v22) 12288-16383 tokens, sigmoid rows of 224 / 256 / 512 experts (256 grouped too, in one pass) on the
        # four-lane tile, K <= 8: without step-ahead loads (session 23, run 2: 256 / 8 8.45 / 9.91 / 9.96 us at
        # 12288 / 14336 / 16383 tokens against 8.69 / 10.07 / 10.51, grouped 4 of 8 8.45 / 10.05 / 10.13 against
        # 8.78 / 10.41 / 10.64, 512 / 8 10.76 / 12.20 / 12.53 against 10.96 / 12.36 / 12.99, 224 / 8 equal at 12288
        # and 2-6% faster above; slower below 12288 tokens, and for 128 and 384 experts, which keep them)
        c["PREFETCH"] = False
    if (c["LANES"] == 4 and c["CHUNK"] == 8 and c["GROUP"] == 4 and not call.grouped and not call.softmax and biased
            and not float32_logits and ((tclass == LARGE and call.experts in (160, 224, 256, 512))
                                        or (tclass == LARGE_12K and call.experts == 256))):
        # (v25) the four-lane tile's window keys without the finite check in the stream (the tail checks its
        # candidates): bf16 sigmoid rows with a bias, K <= 8, where measured faster. Session 26, run 3 (the rule against
        # the same tile with the check): 8192 tokens 256 / 8 6.47 us against 6.88 (run 2: 6.38 against 6.76), 160 / 8
        # 6.40 against 7.01, 224 / 8 6.69 against 7.11, 512 / 8 8.84 against 9.07; 256 / 8 4.96 against 5.29 at 4096 and
        # 8.10 against 8.49 at 12288. Not for 384 experts (8.19 against 7.34 at 8192: 11% slower), 128 (equal), the
        # other tiles (lane-per-row and two-lane: -1% to +3%), and unmeasured rows (192, 320, 448 experts, no bias,
        # float32 logits, 160, 224 and 512 experts at 12288-16383 tokens)
        c["CHECKED_STREAM"] = False
    if c["GROUP"] == 4 and c["CHUNK"] == 8 and not call.softmax and (
            (c["LANES"] == 4 and tclass >= LARGE)
            or (tclass == HUGE_64K and ((c["LANES"] == 2 and not call.grouped) or (c["LANES"] == 1 and c["ONE_PASS"])))):
        # (v26) the window's rows stored before the exact redo: the four-lane tile with runs of 4 from 4096 tokens, and
        # from 65536 tokens the flat two-lane tile and the grouped lane-per-row tile in one pass (sigmoid rows; K <= 8).
        # Session 27, run 3 (against the same plans storing after the redo): 256 / 8 4.46 / 6.13 us at 4096 / 8192
        # tokens against 4.84 / 6.25, 384 / 8 6.91 against 7.01 at 8192, 512 / 8 12.25 against 12.47 at 16384, grouped
        # 4 of 8 6.42 against 6.49 at 8192; at 65536 tokens 384 / 8 27.89 against 28.58, grouped 26.58 against 26.93.
        # Run 4 (the rule against it off): 160 / 8 5.94 against 6.26 at 8192, 256 / 8 float32 7.24 against 7.54, 512 / 8
        # at 65536 34.49 against 35.13; 128 / 8 and no-bias rows at 8192 equal, 384 / 8 at 16384 and grouped at 12288
        # 0.6-0.7% slower (within the rows' run-to-run spread; no gain claimed there). Not for the flat lane-per-row
        # tile (256 / 8 at 65536 21.28 against 20.76), nor the flat two-lane tile below 65536 tokens (256 / 8 at 16384
        # equal); 128 / 8 at 65536 equal
        c["STORE_FIRST"] = True
    if ((tclass == LATENCY or (tclass == SMALL and call.experts >= 128))
            and rounds_ok(call, plan.rows, plan.num_warps, float32_logits)):
        # (v19) K rounds of one warp-wide 32-bit max instead of the lanes' sorts and merges, at decode sizes and on
        # the SMALL class's one-row tiles of 128 experts and more (and on the MEDIUM rows sent to them above).
        # Session 20 against v18 on the same tile: T = 1 256 / 8 1.88-1.95 us against 2.14-2.21, 64 / 6 1.65-1.71
        # against 1.84-1.89, 384 / 8 2.08-2.21 against 2.27-2.39, 512 / 8 2.13-2.19 against 2.55-2.61, grouped 4 of
        # 8 (groups ranked in the tile) 2.04-2.16 against 2.50-2.62, without bias 9-16% faster, float32 rows
        # 9-16%, softmax 1-9% but 384 / 8 1% slower (2.07 against 2.05); 257-2047 tokens 256 / 8 2.13 / 2.48 / 3.42
        # against 2.38 / 2.81 / 4.00 at 257 / 1024 / 2047, 512 / 8 2.50 / 3.24 / 4.41 against 2.82 / 3.97 / 5.70,
        # grouped 2.31 / 2.71 / 3.73 against 2.77 / 3.38 / 5.07. Not for 64 / 6 there (its two-row tile: faster
        # at 257 tokens, 16% slower at 2047), nor from 3072 tokens (MEDIUM_3K: 256 / 8 6% slower at 4095)
        c["ROUNDS"] = True
        if tclass == LATENCY or (not call.grouped and call.experts <= 256):
            # (v20) the weights from the scores the rounds hand over: shorter chain, more instructions a row.
            # Session 21 against v19 on the same tile (run 2): T = 1 256 / 8 1.64 us against 1.88, 64 / 6 1.49
            # against 1.67, 384 / 8 1.92 against 2.15, 512 / 8 1.93 against 2.17, grouped 4 of 8 2.03 against 2.05;
            # T = 128 10-12% faster flat, grouped 2.28 against 2.31; 256 / 8 1.87 / 2.31 / 3.39 / 4.15 against
            # 2.12 / 2.45 / 3.42 / 4.16 at 257 / 1024 / 2047 / 3071 tokens. Not for 512 experts or grouped rows
            # beyond decode: 512 / 8 4-13% slower from 1024 tokens (3.37 / 4.80 / 6.22 against 3.23 / 4.41 /
            # 5.52), grouped 3-15% (2.81 / 4.20 / 5.28 against 2.72 / 3.74 / 4.59); faster at 257 (2.17 against
            # 2.41), equal grouped, given up there for one rule
            c["HANDOVER"] = True
    return plan._replace(constexprs=c)


def _bitonic_tile(call: RoutingCall, tclass: int) -> Plan:
    """Tiles of the bitonic kernel, by row length and token class (the grouped path streams every expert
    too, with the eliminated groups masked or, in one pass, their lists dropped). Grouped tiles from the
    session-6 sweep (benchmarks/NOTES.md, v4): the group stage reads a whole row at once except with a
    lane per row, where a group per load keeps the registers down, and with more than 16 groups (16 a load,
    v18)."""
    chunks = triton.next_power_of_2(triton.cdiv(call.experts, bitonic_chunk(call)))
    long_rows = call.experts >= 128
    run = 4 if not call.grouped or call.group_size % 4 == 0 else 1  # runs must not straddle groups
    whole_row = triton.next_power_of_2(call.num_groups)  # the group stage reads a whole row at once
    if call.num_groups > 16 and tclass >= MEDIUM:
        # (v18) more than 16 groups from 2048 tokens: four lanes, 4 rows a warp, 16 groups a load, no step-ahead
        # loads. The group stage's whole-row load on 8 rows spilled (64 groups: 1254 local loads and stores)
        # and a lane per row holds every group score in registers (252 named); 256 / 8 in 64 groups of 4, 8
        # kept (session 19, run 4): 2048 tokens 9.79 us against 10.92, 8192 13.99 against 131, 16384 25.91
        # against 65.8, 65536 82.2 against 148 (the fastest tile at 2048, 8192 and 65536; 4% over the best at
        # 16384). Lists of 32 keys keep no run filter, as below
        return bitonic_plan(call, min(4, chunks), 4, 1, 1 if bitonic_chunk(call) > 16 else run, 16)
    # step-ahead loads (v5) where they measured faster: decode sizes, short rows, long rows of more than
    # 256 experts below the HUGE class, (v7's lane merge) 256 experts in the LARGE class (grouped too; v22 takes
    # them off from 12288 tokens for some rows: _bitonic_rule), and
    # (v14) flat rows of up to 256 experts on the four-lane tiles (2048-16383 tokens: 128 / 8 at 8192 5.01 us
    # against 5.39, 160-224 / 8 4-8% faster at 4096-8192, within drift at 12288, 256 / 8 at 3072 4.40
    # against 4.61; a 128-expert row is one step, whose load then overlaps the bias window); slower or no
    # better elsewhere (benchmarks/NOTES.md v5, v7, v14)
    prefetch = (tclass <= SMALL or not long_rows or (call.experts > 256 and tclass < HUGE)
                or (call.experts == 256 and tclass in (LARGE, LARGE_12K))
                or (call.experts <= 256 and tclass in (MEDIUM, MEDIUM_3K, LARGE, LARGE_12K) and not call.grouped))
    if bitonic_chunk(call) > 16 and tclass >= MEDIUM:
        # lists of 32 keys (K > 16): four lanes, four rows a warp, no run filter, no step-ahead loads (v9: at
        # 1024 / 32 and 256 / 32 the fastest tile from 8192 tokens up; runs of 4 and more rows were slower)
        return bitonic_plan(call, min(4, chunks), 4, 1, 1, whole_row)
    if tclass == LATENCY:  # one row per program, lanes sharing it: shortest dependency chain; one warp up to 512
        # experts since the lanes merge by halving (v7: 384 experts 2.31 us against 2.45 on two warps)
        return bitonic_plan(call, min(16, chunks), 1, 2 if call.experts > 512 else 1, 1, whole_row, prefetch)
    if tclass == SMALL:  # still too few rows to fill the GPU with several per program
        if long_rows:
            return bitonic_plan(call, min(16, chunks), 1, 1, 1, whole_row, prefetch)
        return bitonic_plan(call, min(8, chunks), 2, 1, 1, whole_row, prefetch)
    if not long_rows:  # short rows: no run filter
        if tclass >= HUGE:
            return bitonic_plan(call, 1, 128, 4, 1, 1, prefetch)
        return bitonic_plan(call, min(4, chunks), 8, 1, 1, whole_row, prefetch)
    # long rows: runs of 4 experts filtered by their best key; several rows per warp
    if tclass in (MEDIUM, MEDIUM_3K):
        return bitonic_plan(call, 4, 4, 1, run, whole_row, prefetch)
    if tclass >= HUGE and call.experts <= 256:
        # two lanes per row, 16 rows a warp, where twice the lane-per-row tile's programs still fit the GPU
        # and the lists are long enough to pay for the lanes' merge (v11, T = 16384: 256 / 8 9.80 us against
        # 12.68, 128 / 8 7.01 against 8.87, grouped 256 / 8 in one pass 10.48 against 13.97; 256 / 8 also at
        # 32768 and 49152: 13.67 and 17.98 against 15.87 and 19.27; at 32768 128 / 8 is equal and grouped
        # slower; equal at 65536), on rows that two lanes read as 64-bit words (as the lane-per-row tile
        # does); else a lane per row, 32 rows on one warp, a group per load
        two_lanes = (tclass == HUGE or (tclass in (HUGE_32K, HUGE_42K) and call.experts > 128 and not call.grouped))
        if two_lanes and words_ok(call, 2, run) and (not call.grouped or one_pass_ok(call, 2, run)):
            return bitonic_plan(call, 2, 16, 1, run, 1)
        return bitonic_plan(call, 1, 32, 1, run, 1, prefetch)
    # the four-lane tile; for flat rows of 257-512 experts below 32768 tokens with step-ahead loads (v11:
    # 384 / 8 11.20 us against 12.57 on two lanes a row at T = 16384, 512 / 8 13.14 against 15.04)
    prefetch = prefetch or (tclass == HUGE and not call.grouped and call.experts <= 512)
    return bitonic_plan(call, 4, 8, 1, run, whole_row, prefetch)


def all_plans(call: RoutingCall, wide_loads: bool = False, biased: bool = False,
              float32_logits: bool = False) -> dict[str, Plan]:
    """Every plan the rule can choose for this call's shape, by token class (for tests); with
    ``wide_loads`` (aligned 16-bit logits) also the plans it chooses for unaligned ones; ``biased``: the
    call has a correction bias; ``float32_logits``: the plans for float32 logits."""
    plans = {}
    for tclass, name in enumerate(CLASS_NAMES):
        plans[name] = choose_plan(call, tclass, wide_loads, biased, float32_logits)
        unaligned = choose_plan(call, tclass, biased=biased) if wide_loads else plans[name]
        if unaligned != plans[name]:
            plans[f"{name}, unaligned"] = unaligned
        if plans[name].constexprs.get("ONE_PASS"):  # the same tile in two passes: both must give the same bits
            plans[f"{name}, two passes"] = two_passes(plans[name])
    return plans


def two_passes(plan: Plan) -> Plan:
    """A one-pass grouped plan's tile in two passes (group stage, then the masked stream; no word loads,
    which that stream cannot take; no register cap, which was measured for one pass)."""
    return plan._replace(constexprs={**plan.constexprs, "ONE_PASS": False, "WORDS": False}, maxnreg=None)


class _DirectLaunch:
    """A compiled kernel and its C launcher, called without Triton's per-call Python binder."""

    __slots__ = ("launch", "function", "metadata", "cooperative", "pdl", "constexprs", "rows")

    def __init__(self, compiled, plan: Plan):
        runner = compiled.run  # the CudaLauncher: loads the module on first access
        self.launch = runner.launch
        self.function = compiled.function
        self.metadata = compiled.packed_metadata
        self.cooperative = runner.launch_cooperative_grid
        self.pdl = runner.launch_pdl
        self.constexprs = tuple(plan.constexprs.values())
        self.rows = plan.rows


_runtime_knobs = triton.knobs.runtime


def _hooks_installed() -> bool:
    """Whether a launch hook (e.g. a profiler's) is installed: then calls take Triton's own path."""
    enter, leave = _runtime_knobs.launch_enter_hook, _runtime_knobs.launch_exit_hook
    return bool(getattr(enter, "calls", enter)) or bool(getattr(leave, "calls", leave))


def _direct_launch_supported(compiled) -> bool:
    """True for a CUDA launcher of the Triton 3.x layout that needs no scratch memory."""
    runner = getattr(compiled, "run", None)
    return (
        torch.version.hip is None
        and all(hasattr(runner, a) for a in ("launch", "launch_cooperative_grid", "launch_pdl"))
        and not getattr(runner, "global_scratch_size", 0)
        and not getattr(runner, "profile_scratch_size", 0)
    )


_launchers: dict[tuple, _DirectLaunch | None] = {}

try:  # the current stream as a raw handle and the current device, as Triton's own launch path gets them
    _raw_stream = torch._C._cuda_getCurrentRawStream
    _current_device = torch._C._cuda_getDevice
except AttributeError:  # pragma: no cover - builds of torch without CUDA
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream

    _current_device = torch.cuda.current_device


def _int_class(value: int) -> int:
    """What Triton specialises an int argument on: == 1, divisible by 16, or neither."""
    return 1 if value == 1 else (16 if value % 16 == 0 else 0)


def launcher_key(call: RoutingCall, logits, bias, index: int, logits_ptr: int, bias_ptr: int | None,
                 stride: int, dense: bool) -> tuple:
    """The launcher cache's key: everything the rule and Triton's specialisation depend on (the
    normalised call but its token count and scale, the token class, the dtypes, the device, the
    16-byte alignment of the logits and bias, the row stride's class, whether the outputs are dense:
    ``dense_outputs``). host_launch.cpp keys the same."""
    return (
        call[1:7], token_class(call.tokens), logits.dtype, None if bias is None else bias.dtype, index,
        logits_ptr & 15 == 0, None if bias_ptr is None else bias_ptr & 15 == 0, _int_class(stride), dense,
    )


def launch(
    call: RoutingCall,
    logits: torch.Tensor,
    bias: torch.Tensor | None,
    weights: torch.Tensor,
    ids: torch.Tensor,
    plan: Plan | None = None,
) -> None:
    """Route ``logits`` into ``weights`` and ``ids`` with a Triton kernel (GPU or interpreter).

    ``plan`` forces a kernel and tile (tests use it to cover every plan a rule can choose).
    """
    stride = logits.stride(0)
    w_stride, i_stride = weights.stride(), ids.stride()
    w_ptr, i_ptr = weights.data_ptr(), ids.data_ptr()
    dense = _dense(w_stride, i_stride, w_ptr, i_ptr, call.topk)
    key = None
    if plan is None and logits.is_cuda:
        index = logits.get_device()
        logits_ptr = logits.data_ptr()
        bias_ptr = None if bias is None else bias.data_ptr()
        key = launcher_key(call, logits, bias, index, logits_ptr, bias_ptr, stride, dense)
        direct = _launchers.get(key)
        if direct is not None and not _hooks_installed():
            if index != _current_device():  # kernels launch on the current device
                with torch.cuda.device(index):
                    return launch(call, logits, bias, weights, ids)
            direct.launch(
                (call.tokens + direct.rows - 1) // direct.rows, 1, 1, _raw_stream(index),
                direct.function, direct.cooperative, direct.pdl, None, None, direct.metadata, None, None, None,
                logits_ptr, bias_ptr, stride, w_ptr, i_ptr, w_stride[0], w_stride[1],
                i_stride[0], i_stride[1], call.tokens, call.scale, *direct.constexprs,
            )
            return
        if index != _current_device():
            with torch.cuda.device(index):
                return launch(call, logits, bias, weights, ids)

    plan = with_outputs(plan or with_device(choose_plan(call, **tensor_traits(logits, bias)), logits), dense)
    options = {} if plan.maxnreg is None else {"maxnreg": plan.maxnreg}  # ROCm's Triton refuses the option
    if plan.constexprs.get("GRID_WAIT"):
        options["launch_pdl"] = True
    compiled = plan.kernel[(triton.cdiv(call.tokens, plan.rows),)](
        logits, bias, stride,
        weights, ids, weights.stride(0), weights.stride(1), ids.stride(0), ids.stride(1),
        call.tokens, call.scale,
        num_warps=plan.num_warps, **options, **plan.constexprs,
    )
    if key is not None and key not in _launchers:
        direct = _DirectLaunch(compiled, plan) if _direct_launch_supported(compiled) else None
        _launchers[key] = direct
        if direct is not None and host_launch.enabled_by_environment() and host_launch.load() is not None:
            host_launch.register(call, logits, bias, weights, ids, compiled, plan.rows)


def forget_launchers() -> None:
    """Drop every cached launcher, Python and C++ (tests; the next call of each plan goes through Triton)."""
    _launchers.clear()
    if host_launch.loaded() is not None:
        host_launch.loaded().clear()
