"""Which kernel, tile and variants a call gets: deterministic rules, written as two tables.

Two kernels share one runtime argument list: ``rounds`` (every scoring, grouping and size: K rounds of one
fused max over the row held in registers) and ``bitonic`` (sigmoid scoring, flat or grouped, and flat softmax
without bias; K <= 32, E >= 32: a group stage, then streaming bitonic top-k on packed keys; docs/kernels.md).

A bitonic plan is chosen in two steps:

1. ``TILES``: the tile (lanes a row, rows a program, warps, run filter, groups a load) by *row shape* x
   *token class*. Shapes and classes are named below; the table is read like the one in docs/kernels.md.
2. ``SWITCHES``: the kernel's variants (docs/kernels.md names each), switched on or off in table order, each
   row with the condition under which it was measured faster and the design-log entry that holds the figures
   (docs/kernel-design-log.md). A later row sees the switches of the rows before it.

Rules depend on the shape, the token class and three traits of the tensors (``tensor_traits``), never on
autotuning at call time: that would break CUDA-graph capture and cost seconds on a first call. Every result is
the same bits whichever plan runs (batch invariance); plans differ only in speed.
"""

from __future__ import annotations

import bisect
from typing import Callable, NamedTuple

import torch
import triton

from ..call import SIGMOID, SQRTSOFTPLUS, RoutingCall
from ._bitonic import bitonic_kernel
from ._common import log2
from ._rounds import rounds_kernel

# ---- token classes: token counts every rule treats alike --------------------------------------------------------

LATENCY, SMALL, MEDIUM, MEDIUM_3K, LARGE, LARGE_12K, HUGE, HUGE_32K, HUGE_42K, HUGE_64K = range(10)
CLASS_NAMES = ("latency", "small", "medium", "medium 3k", "large", "large 12k", "huge", "huge 32k", "huge 42k",
               "huge 64k")  # all_plans' keys
# The first token count of each class after LATENCY. 16384 / 32768 / 65536: where a tile's programs stop
# fitting one wave of the GPU; 3072, 12288, 42240: where a variant stops paying (design log: "token classes").
TOKEN_CLASS_STARTS = (257, 2048, 3072, 4096, 12288, 16384, 32768, 42240, 65536)
# registers per thread of the grouped one-pass lane-per-row tile from 65536 tokens (NVIDIA): 128 fits its
# one-warp programs in one wave of the GPU, where ptxas's own choice (148) left a second wave
ONE_WAVE_REGISTERS = 128
MAX_BITONIC_TOPK = 32  # lists of up to 32 keys per lane


def token_class(tokens: int) -> int:
    """The class of a token count: <= 256, < 2048, < 3072, < 4096, < 12288, < 16384, < 32768, < 42240, < 65536,
    more (the C++ host path counts the same ``TOKEN_CLASS_STARTS``)."""
    return bisect.bisect_right(TOKEN_CLASS_STARTS, tokens)


# ---- plans ------------------------------------------------------------------------------------------------------

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
        TOPK=call.topk, SCORING=call.scoring, RENORMALIZE=call.renormalize,
        NUM_GROUPS=call.num_groups, GROUP_SIZE=call.group_size, TOPK_GROUP=call.topk_group,
        ROWS=rows, BLOCK_GROUPS=block_groups, BLOCK_GROUP_SIZE=block_group_size, BLOCK_K=block_k,
        LOG2_BLOCK=log2(block), LOG2_BLOCK_K=log2(block_k),
        GRID_WAIT=False,  # on: launch.with_device
    )
    return Plan("rounds", rounds_kernel, constexprs, rows, num_warps)


def bitonic_plan(call: RoutingCall, lanes: int, rows: int, num_warps: int, group: int = 1,
                 groups_per_load: int = 1, prefetch: bool = False, words: bool = False,
                 one_pass: bool = False, rounds: bool = False) -> Plan:
    """A bitonic tile with every variant at its default (off, but ``DENSE_OUT`` on a lane per row and
    ``CHECKED_STREAM``). ``group`` (runs of the filter) must divide the group size; ``groups_per_load`` is how
    many groups the group stage reads at once; the other arguments switch variants of docs/kernels.md on."""
    chunk = bitonic_chunk(call)
    assert not one_pass or one_pass_ok(call, lanes, group)
    block_groups = triton.next_power_of_2(call.num_groups)
    assert (not call.grouped or call.group_size % group == 0) and block_groups % groups_per_load == 0
    constexprs = dict(TOPK=call.topk, SCORING=call.scoring, RENORMALIZE=call.renormalize, NUM_EXPERTS=call.experts,
                      BLOCK_EXPERTS=triton.next_power_of_2(call.experts), NUM_GROUPS=call.num_groups,
                      GROUP_SIZE=call.group_size, TOPK_GROUP=call.topk_group, BLOCK_GROUPS=block_groups,
                      BLOCK_GROUP_SIZE=triton.next_power_of_2(call.group_size),
                      ROWS=rows, LANES=lanes, CHUNK=chunk, LOG2_CHUNK=log2(chunk), GROUP=group,
                      GROUPS_PER_LOAD=groups_per_load, PREFETCH=prefetch,
                      WORDS=words, ONE_PASS=one_pass, ROUNDS=rounds, HANDOVER=False,
                      # vector stores into dense outputs pay on a lane per row only (a warp's scalar stores
                      # touch 32 rows' lines); on more lanes the values' layout conversion costs more
                      DENSE_OUT=lanes == 1,
                      CHECKED_STREAM=True, STORE_FIRST=False,
                      GRID_WAIT=False)  # on: launch.with_device
    return Plan("bitonic", bitonic_kernel, constexprs, rows, num_warps)


# ---- what a tile or variant needs -------------------------------------------------------------------------------

def bitonic_supported(call: RoutingCall, biased: bool = False) -> bool:
    """K <= 32 and at least 32 experts; sigmoid scoring (flat, or grouped with kept groups of 8+ experts),
    softmax scoring flat and without a bias (``biased``), ranked by the logits themselves, or sqrt-softplus
    flat (with a bias: certified window keys). Softmax with a bias or grouped needs the row's softmax before ranking, and
    the group stage forms sigmoid scores only: the rounds kernel."""
    if (call.softmax and (biased or call.grouped)) or (call.scoring == SQRTSOFTPLUS and call.grouped):
        return False
    return (call.topk <= MAX_BITONIC_TOPK and call.experts >= 32
            and (not call.grouped or call.topk_group * call.group_size >= 8))


def bitonic_chunk(call: RoutingCall) -> int:
    """The length of a lane's sorted list: the top-k rounded up to a power of two, at least 8."""
    return max(8, triton.next_power_of_2(call.topk))


def rounds_ok(call: RoutingCall, rows: int, num_warps: int, float32_logits: bool = False, biased: bool = True) -> bool:
    """Whether a tile may select by rounds (``ROUNDS``): one row on one warp, at most 512 experts (16 a thread),
    K <= 8, and 32-bit keys (all but softmax of float32 logits, ranked by exact 64-bit keys, and sqrt-softplus
    without a bias, ranked by the logits on the streaming tiles)."""
    return (rows == 1 and num_warps == 1 and call.experts <= 512 and call.topk <= 8
            and not (call.softmax and float32_logits) and (call.scoring != SQRTSOFTPLUS or biased))


def one_pass_ok(call: RoutingCall, lanes: int, group: int) -> bool:
    """Whether a grouped bitonic tile can rank the groups and key the experts in one read (``ONE_PASS``):
    grouped, window keys possible (E <= 512), a power-of-two number of power-of-two groups, each lane's
    ``chunk * group`` experts of a step inside one group, and each step of ``lanes * chunk * group`` experts
    made of whole groups."""
    lane_span = bitonic_chunk(call) * group
    span = lanes * lane_span
    size = call.group_size
    return (call.grouped and call.experts <= 512 and call.num_groups & (call.num_groups - 1) == 0
            and size & (size - 1) == 0 and size % lane_span == 0 and span % size == 0 and call.experts % span == 0)


def one_pass_step(plan: Plan, call: RoutingCall) -> tuple[int, int]:
    """(groups per step, lanes per group) of a one-pass plan's tile: a step holding several groups over several
    lanes is the layout whose group scores once came out wrong on the GPU only (tests and the census classify
    tiles by it)."""
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


def tensor_traits(logits: torch.Tensor, bias: torch.Tensor | None) -> dict:
    """What the rule reads from the tensors besides the call (``choose_plan``'s and ``all_plans``' keywords):
    whether the logits may be read as words, whether there is a bias, whether the logits are float32."""
    return dict(wide_loads=wide_loads_ok(logits, logits.stride(0)), biased=bias is not None,
                float32_logits=logits.dtype == torch.float32)


# ---- step 1: the tile, by row shape x token class ---------------------------------------------------------------

class Tile(NamedTuple):
    """A bitonic tile: ``lanes`` share a row, ``rows`` rows a program on ``warps`` warps; runs of ``run``
    experts are filtered by their best key; the group stage reads ``groups_per_load`` groups at once."""

    lanes: int
    rows: int
    warps: int
    run: int
    groups_per_load: int


def _run(call: RoutingCall) -> int:
    """The run filter's length on long rows: 4, unless runs would straddle groups."""
    return 4 if not call.grouped or call.group_size % 4 == 0 else 1


def _lanes(call: RoutingCall, most: int) -> int:
    """Lanes a row, up to ``most``: no more than the row has lists of ``bitonic_chunk`` experts."""
    return min(most, triton.next_power_of_2(triton.cdiv(call.experts, bitonic_chunk(call))))


def _whole_row(call: RoutingCall) -> int:
    """Groups a load when the group stage reads a whole row at once."""
    return triton.next_power_of_2(call.num_groups)


def _two_lanes_or_one(call: RoutingCall, flat_over_128: bool = False) -> Tile:
    """Two lanes a row, 16 rows a warp, where the row reads as whole 64-bit word steps (grouped: in one pass;
    with ``flat_over_128``: flat rows of more than 128 experts only), else a lane a row, 32 rows a warp."""
    run = _run(call)
    two = words_ok(call, 2, run) and (not call.grouped or one_pass_ok(call, 2, run))
    if flat_over_128:
        two = two and not call.grouped and call.experts > 128
    return Tile(2, 16, 1, run, 1) if two else Tile(1, 32, 1, run, 1)


def _two_lanes_if_aligned(call: RoutingCall, wide_loads: bool) -> Tile:
    """Flat rows of 257-512 experts read as 64-bit words (aligned 16-bit logits): two lanes a row, 16 rows a
    warp, merged in one halving; other rows keep the four-lane tile."""
    if not call.grouped and 256 < call.experts <= 512 and wide_loads and words_ok(call, 2, _run(call)):
        return Tile(2, 16, 1, _run(call), 1)
    return Tile(4, 8, 1, _run(call), _whole_row(call))


# The tiles by name, each a function of the call and of whether its logits may be read as words.
TILE_SHAPES: dict[str, Callable[[RoutingCall, bool], Tile]] = {
    # one row a program, its lanes sharing it: the shortest chain (two warps beyond 512 experts)
    "row": lambda call, wide: Tile(_lanes(call, 16), 1, 2 if call.experts > 512 else 1, 1, _whole_row(call)),
    "one row": lambda call, wide: Tile(_lanes(call, 16), 1, 1, 1, _whole_row(call)),
    "two rows": lambda call, wide: Tile(_lanes(call, 8), 2, 1, 1, _whole_row(call)),
    "eight rows": lambda call, wide: Tile(_lanes(call, 4), 8, 1, 1, _whole_row(call)),
    "lane a row, 128 rows": lambda call, wide: Tile(1, 128, 4, 1, 1),
    "four lanes, 4 rows": lambda call, wide: Tile(4, 4, 1, _run(call), _whole_row(call)),
    "four lanes": lambda call, wide: Tile(4, 8, 1, _run(call), _whole_row(call)),
    "two lanes or one": lambda call, wide: _two_lanes_or_one(call),
    "two lanes (flat, E > 128) or one": lambda call, wide: _two_lanes_or_one(call, flat_over_128=True),
    "lane a row": lambda call, wide: Tile(1, 32, 1, _run(call), 1),
    "two lanes if aligned, or four": _two_lanes_if_aligned,
    # K > 16: four lanes of lists of 32, no run filter (its wider lists filled the registers)
    "lists of 32": lambda call, wide: Tile(_lanes(call, 4), 4, 1, 1, _whole_row(call)),
    # more than 16 groups: 16 groups a load (a whole row spilled on 8 rows; a lane a row held every score)
    "many groups": lambda call, wide: Tile(_lanes(call, 4), 4, 1, 1 if bitonic_chunk(call) > 16 else _run(call), 16),
}


def row_shape(call: RoutingCall, tclass: int) -> str:
    """The row-shape class of ``TILES``. More than 16 groups and lists of 32 keys (K > 16) have tiles of their
    own from the MEDIUM class on; below it, and otherwise, rows are classed by their length (sqrt-softplus rows of
    128-256 experts in a row of their own)."""
    if tclass >= MEDIUM and call.num_groups > 16:
        return "more than 16 groups"
    if tclass >= MEDIUM and bitonic_chunk(call) > 16:
        return "K > 16"
    if call.experts < 128:
        return "E < 128"
    if call.experts <= 256:
        return "sqrt-softplus E 128-256" if call.scoring == SQRTSOFTPLUS else "E 128-256"
    return "E > 256"


_R, _1R, _2R, _8R, _128 = "row", "one row", "two rows", "eight rows", "lane a row, 128 rows"
_4x4, _4L, _2or1, _2or1F, _1L, _2or4 = ("four lanes, 4 rows", "four lanes", "two lanes or one",
                                        "two lanes (flat, E > 128) or one", "lane a row",
                                        "two lanes if aligned, or four")
_32, _G = "lists of 32", "many groups"

# Row shape x token class -> tile (None: not reached, ``row_shape`` classes those rows by length there).
#                      latency small  medium medium3k large large12k huge   huge32k huge42k huge64k
TILES = {
    "E < 128":             (_R, _2R,  _8R,   _8R,     _8R,  _8R,     _128,  _128,   _128,   _128),
    "E 128-256":           (_R, _1R,  _4x4,  _4x4,    _4L,  _4L,     _2or1, _2or1F, _2or1F, _1L),
    # three MUFU approximations a key against sigmoid's two: 4 rows a program measured faster at 4096-12287 tokens
    # (384 experts: faster at 4096 tokens, slower at 8192, so "E > 256" holds them; docs/kernel-design-log.md)
    "sqrt-softplus E 128-256": (_R, _1R, _4x4, _4x4,  _4x4, _4L,     _2or1, _2or1F, _2or1F, _1L),
    "E > 256":             (_R, _1R,  _4x4,  _4x4,    _4L,  _4L,     _4L,   _2or4,  _2or4,  _2or4),
    "K > 16":              (None, None, _32, _32,     _32,  _32,     _32,   _32,    _32,    _32),
    "more than 16 groups": (None, None, _G,  _G,      _G,   _G,      _G,    _G,     _G,     _G),
}


# ---- step 2: the variants, switched in table order --------------------------------------------------------------

class Facts(NamedTuple):
    """What a switch's condition may read: the call, its token class, the tile's name, the plan's constexprs so
    far (``c``: the switches of earlier rows included), the tile's warps and the tensors' traits."""

    call: RoutingCall
    tclass: int
    tile: str
    c: dict
    warps: int
    wide_loads: bool
    biased: bool
    float32_logits: bool

    @property
    def flat(self) -> bool:
        return not self.call.grouped

    @property
    def experts(self) -> int:
        return self.call.experts

    @property
    def lists_of_8(self) -> bool:
        return self.c["CHUNK"] == 8

    @property
    def runs_of_4(self) -> bool:
        return self.c["GROUP"] == 4

    def lanes(self, *counts: int) -> bool:
        return self.c["LANES"] in counts


class Switch(NamedTuple):
    """One row of ``SWITCHES``: set ``constexpr`` to ``value`` where ``when`` holds (docs/kernels.md names the
    variant; docs/kernel-design-log.md holds the measurement behind ``why``)."""

    constexpr: str
    value: bool
    when: Callable[[Facts], bool]
    why: str


# tiles that take the step-ahead loads of their row shape and class (the two-lane tiles, lists of 32 and many
# groups measured slower with them)
_STEP_AHEAD_TILES = {_R, _1R, _2R, _8R, _128, _4x4, _4L, _1L}


def _tile_steps_ahead(f: Facts) -> bool:
    if not (f.tile in _STEP_AHEAD_TILES or (f.tile in (_2or1, _2or1F) and f.lanes(1))
            or (f.tile == _2or4 and f.lanes(4))):
        return False
    e, t = f.experts, f.tclass
    return (t <= SMALL or e < 128 or (e > 256 and t < HUGE) or (e == 256 and t in (LARGE, LARGE_12K))
            or (e <= 256 and t in (MEDIUM, MEDIUM_3K, LARGE, LARGE_12K) and f.flat))


def _sqrt_two_lanes_huge(f: Facts) -> bool:
    """Sqrt-softplus rows on the two-lane tile at 16384-32767 tokens (stored first, with step-ahead loads)."""
    return f.call.scoring == SQRTSOFTPLUS and f.lanes(2) and f.tclass == HUGE


SWITCHES: tuple[Switch, ...] = (
    Switch("PREFETCH", True, _tile_steps_ahead,
           "step-ahead loads: decode sizes, short rows, rows over 256 experts below 16384 tokens, and rows of "
           "128-256 experts on the four-lane tiles (flat; 256 experts grouped too from 4096 tokens)"),
    Switch("PREFETCH", True, lambda f: f.tile == _4L and f.tclass == HUGE and f.flat and f.experts <= 512,
           "step-ahead loads on the four-lane tile for flat rows of up to 512 experts at 16384-32767 tokens"),
    Switch("ONE_PASS", True, lambda f: f.tclass >= MEDIUM and f.call.grouped
           and one_pass_ok(f.call, f.c["LANES"], f.c["GROUP"]),
           "groups ranked in the same read of the row, from 2048 tokens (two passes measured faster below)"),
    Switch("PREFETCH", True, lambda f: f.c["ONE_PASS"] and f.c["LANES"] > 2,
           "one pass on the four-lane tiles with step-ahead loads (the two-lane tile without)"),
    Switch("WORDS", True, lambda f: f.c["LANES"] <= 2 and f.wide_loads and words_ok(f.call, f.c["LANES"], f.c["GROUP"])
           and (f.flat or f.c["ONE_PASS"]),
           "aligned 16-bit logits read as 64-bit words on tiles of one or two lanes a row (flat, or grouped in one "
           "pass: the two-pass stream masks by group); no better on four lanes"),
    Switch("PREFETCH", True, lambda f: f.c["WORDS"] and f.lanes(1) and f.flat
           and ((f.tclass == HUGE_64K and f.experts > 128) or f.tclass in (HUGE_32K, HUGE_42K)
                or (f.tclass == HUGE and f.lists_of_8)),
           "step-ahead loads with the bias read per thread on the flat lane-per-row word tile from 16384 tokens "
           "(128 experts from 65536 tokens measured slower)"),
    Switch("PREFETCH", True, lambda f: f.c["WORDS"] and f.lanes(2) and f.flat and f.experts == 256
           and f.tclass == HUGE and f.lists_of_8 and not f.call.softmax,
           "step-ahead loads for flat sigmoid rows of 256 experts on the two-lane word tile at 16384-32767 tokens"),
    Switch("PREFETCH", True, lambda f: f.tclass == HUGE_32K and f.flat and not f.call.softmax and f.c["WORDS"]
           and f.lanes(2) and f.experts > 256 and f.lists_of_8,
           "step-ahead loads for flat sigmoid rows of 257-512 experts on the two-lane word tile at 32768-42239 "
           "tokens, while its programs fit one wave"),
    Switch("PREFETCH", False, lambda f: f.float32_logits and f.flat and f.experts >= 256 and f.lanes(4)
           and f.lists_of_8 and f.tclass in (LARGE, LARGE_12K, HUGE),
           "no step-ahead loads for float32 rows of 256+ experts on the four-lane tile at 4096-32767 tokens (a "
           "step loaded ahead holds twice the registers of a 16-bit one)"),
    Switch("PREFETCH", False, lambda f: f.tclass == LARGE_12K and not f.call.softmax and not f.float32_logits
           and f.lanes(4) and f.lists_of_8 and (f.experts == 256 or (f.experts in (224, 512) and f.flat)),
           "no step-ahead loads for sigmoid rows of 224, 256 and 512 experts at 12288-16383 tokens"),
    Switch("CHECKED_STREAM", False, lambda f: f.lanes(4) and f.lists_of_8 and f.runs_of_4 and f.flat
           and f.call.scoring == SIGMOID and f.biased and not f.float32_logits
           and ((f.tclass == LARGE and f.experts in (160, 224, 256, 512)) or (f.tclass == LARGE_12K and f.experts == 256)),
           "the four-lane stream without its finite check (the tail checks its candidates) for bf16 sigmoid rows "
           "with a bias where measured faster (384 experts measured 11% slower)"),
    Switch("STORE_FIRST", True, lambda f: f.runs_of_4 and f.lists_of_8 and not f.call.softmax
           and ((f.lanes(4) and f.tclass >= LARGE)
                or (f.tclass == HUGE_64K and ((f.lanes(2) and f.flat) or (f.lanes(1) and f.c["ONE_PASS"])))),
           "the rows the window settles stored before the exact redo: four lanes from 4096 tokens, and the flat "
           "two-lane and grouped one-pass lane-per-row tiles from 65536 tokens"),
    Switch("PREFETCH", True, lambda f: f.call.scoring == SQRTSOFTPLUS and f.tile == _4x4 and f.tclass == LARGE,
           "step-ahead loads for sqrt-softplus rows on the four-lane 4-row tile at 4096-12287 tokens"),
    Switch("STORE_FIRST", True, lambda f: _sqrt_two_lanes_huge(f),
           "sqrt-softplus rows on the two-lane tile at 16384-32767 tokens: the rows the keys settle stored first"),
    Switch("PREFETCH", True, lambda f: _sqrt_two_lanes_huge(f),
           "step-ahead loads for sqrt-softplus rows on the two-lane tile at 16384-32767 tokens"),
    Switch("ROUNDS", True, lambda f: (f.tclass == LATENCY or (f.tclass == SMALL and f.experts >= 128))
           and rounds_ok(f.call, f.c["ROWS"], f.warps, f.float32_logits, f.biased),
           "selection by K warp-wide max reductions at decode sizes, and on the SMALL class's one-row tiles"),
    Switch("HANDOVER", True, lambda f: f.c["ROUNDS"] and f.call.scoring != SQRTSOFTPLUS
           and (f.tclass == LATENCY or (f.flat and f.experts <= 256)),
           "the rounds hand over the picks' scores (no re-read of the logits): decode sizes, and flat rows of up "
           "to 256 experts below 3072 tokens (sqrt-softplus picks are certified from their logits instead)"),
)


def _tile_class(call: RoutingCall, tclass: int, float32_logits: bool, biased: bool = True) -> int:
    """The token class whose tile and switches a call takes: its own, but 2048-3071 tokens of sigmoid rows of
    256 or 512 experts (grouped too, up to 16 groups) on 16-bit logits take the SMALL class's one-row tile with
    rounds, measured faster there than the four-lane tile."""
    if (tclass == MEDIUM and call.experts in (256, 512) and not call.softmax and not float32_logits
            and call.num_groups <= 16 and rounds_ok(call, 1, 1, biased=biased)):
        return SMALL
    return tclass


def bitonic_rule(call: RoutingCall, tclass: int, wide_loads: bool = False, float32_logits: bool = False,
                 biased: bool = False, rocm: bool = False) -> Plan:
    """The bitonic kernel's plan: the ``TILES`` entry, then every ``SWITCHES`` row in order (``rocm``: for an
    AMD GPU, which takes no register cap)."""
    tclass = _tile_class(call, tclass, float32_logits, biased)
    if rocm and call.grouped:  # AMD: the tiles that compile without spills (ROCM_GROUPED)
        tclass = LARGE if tclass == LARGE_12K else min(tclass, HUGE)
    name, tile = _tile(call, tclass, wide_loads)
    plan = bitonic_plan(call, tile.lanes, tile.rows, tile.warps, tile.run, tile.groups_per_load)
    c = dict(plan.constexprs)
    for switch in SWITCHES:
        if switch.when(Facts(call, tclass, name, c, tile.warps, wide_loads, biased, float32_logits)):
            c[switch.constexpr] = switch.value
    maxnreg = None
    if c["ONE_PASS"] and tclass == HUGE_64K and c["LANES"] == 1 and c["CHUNK"] == 8 and not rocm:
        maxnreg = ONE_WAVE_REGISTERS  # ROCm's Triton has no register cap
    plan = plan._replace(constexprs=c, maxnreg=maxnreg)
    return two_passes(plan) if rocm and c["ONE_PASS"] else plan  # ROCM_GROUPED


# On AMD GPUs (gfx942, gfx950) grouped calls take two passes, the 12288 class the 4096 class's tile and from 32768
# tokens the 16384 class's tile: ``moe-routing compile-check`` found SGPR spills in every one-pass grouped plan from
# 4096 tokens, in the 12288 class's tile (gfx950) and in the lane-a-row two-pass tile from 32768, and a compile
# error (tl.bitonic_merge's layouts on 64-lane waves) in the 16-bit lane-a-row tile from 65536; these choices
# compile without spills. Chosen by compiling, not by timing on an AMD GPU (none measured yet).
ROCM_GROUPED = "two passes; the 4096 class's tile for 12288, the 16384 class's from 32768"


def _tile(call: RoutingCall, tclass: int, wide_loads: bool) -> tuple[str, Tile]:
    """The ``TILES`` entry of a call: its name and its Tile."""
    name = TILES[row_shape(call, tclass)][tclass]
    return name, TILE_SHAPES[name](call, wide_loads)


ON_ROCM = torch.version.hip is not None  # this torch is a ROCm build: plans are for an AMD GPU


def choose_plan(call: RoutingCall, tclass: int | None = None, wide_loads: bool = False, biased: bool = False,
                float32_logits: bool = False, rocm: bool = ON_ROCM) -> Plan:
    """The rule. ``tclass`` defaults to the call's token class (tests pass each class explicitly); the traits
    (``tensor_traits``): ``wide_loads``, the logits may be read as 64-bit words; ``biased``, the call has a
    correction bias; ``float32_logits``, the logits are float32; ``rocm``: the plan is for an AMD GPU (this
    torch's build by default; ``moe-routing compile-check`` asks for AMD plans on any machine)."""
    if tclass is None:
        tclass = token_class(call.tokens)
    if bitonic_supported(call, biased):  # every token class, so that a row's result never depends on T
        return bitonic_rule(call, tclass, wide_loads, float32_logits, biased, rocm)
    if call.grouped and tclass >= HUGE:
        return rounds_plan(call, tclass, 8, 8)
    return rounds_plan(call, tclass)


def all_plans(call: RoutingCall, wide_loads: bool = False, biased: bool = False,
              float32_logits: bool = False, rocm: bool = ON_ROCM) -> dict[str, Plan]:
    """Every plan the rule can choose for this call's shape, by token class (tests, the census), and the two-pass
    form of each one-pass plan (tests); with ``wide_loads`` (aligned 16-bit logits) also the plans it chooses for
    unaligned ones; ``biased``: the call has a correction bias; ``float32_logits``: the plans for float32 logits;
    ``rocm``: the plans for an AMD GPU."""
    plans = {}
    for tclass, name in enumerate(CLASS_NAMES):
        plans[name] = choose_plan(call, tclass, wide_loads, biased, float32_logits, rocm)
        unaligned = choose_plan(call, tclass, biased=biased, rocm=rocm) if wide_loads else plans[name]
        if unaligned != plans[name]:
            plans[f"{name}, unaligned"] = unaligned
        if plans[name].constexprs.get("ONE_PASS"):  # the same tile in two passes: both must give the same bits
            plans[f"{name}, two passes"] = two_passes(plans[name])
    return plans


def two_passes(plan: Plan) -> Plan:
    """A one-pass grouped plan's tile in two passes (group stage, then the masked stream; no word loads,
    which that stream cannot take; no register cap, which was measured for one pass)."""
    return plan._replace(constexprs={**plan.constexprs, "ONE_PASS": False, "WORDS": False}, maxnreg=None)


# ---- the variants, by name -------------------------------------------------------------------------------------

class Variant(NamedTuple):
    """A way the kernels can compute the same bits: what it is, and the test that fails when it breaks."""

    what: str
    test: str  # a test function in tests/


VARIANTS: dict[str, Variant] = {
    # switches of the bitonic kernel (constexprs; the rule sets them through SWITCHES)
    "PREFETCH": Variant("each step's logits loaded one step ahead (and the first before the bias window)",
                        "test_variant_switch_keeps_the_bits"),
    "WORDS": Variant("aligned 16-bit logits read as 64-bit words", "test_variant_switch_keeps_the_bits"),
    "ONE_PASS": Variant("grouped rows: the groups ranked and the experts keyed in one read of the row",
                        "test_variant_switch_keeps_the_bits"),
    "ROUNDS": Variant("one row on one warp selecting by K warp-wide 32-bit max reductions",
                      "test_variant_switch_keeps_the_bits"),
    "HANDOVER": Variant("with ROUNDS: each round's winner hands over its pick's score; no re-read of the logits",
                        "test_variant_switch_keeps_the_bits"),
    "DENSE_OUT": Variant("dense [T, K] outputs stored with their layout compiled in (vector stores)",
                         "test_variant_switch_keeps_the_bits"),
    "CHECKED_STREAM": Variant("off: the stream's window keys skip the finite check, the tail checks its candidates",
                              "test_variant_switch_keeps_the_bits"),
    "STORE_FIRST": Variant("the rows the window keys settle stored before the exact redo of the others",
                           "test_variant_switch_keeps_the_bits"),
    "GRID_WAIT": Variant("programmatic dependent launch: griddepcontrol.wait before the first load (sm_90+)",
                         "test_grid_wait_compiles_before_every_load_for_the_gpu"),
    # tiles and their parameters
    "run filter": Variant("GROUP > 1: a lane streams the best key of each run of GROUP experts, the top runs are "
                          "re-read and selected exactly", "test_every_plan_matches_float64"),
    "lanes merged by halving": Variant("LANES lists of a row merged into one by log2(LANES) halvings",
                                       "test_every_plan_matches_float64"),
    "register cap": Variant("ONE_WAVE_REGISTERS on the grouped one-pass lane-per-row tile from 65536 tokens",
                            "test_register_cap_only_on_the_measured_tile"),
    "bias read per thread": Variant("PREFETCH with WORDS on a lane a row: each thread reads its step's bias",
                                    "test_bias_read_per_thread_gives_the_shared_loads_bits"),
    "groups ranked in the rounds' tile": Variant("ROUNDS on grouped rows whose groups are whole threads: the "
                                                 "groups ranked by one reduction each",
                                                 "test_groups_ranked_in_the_rounds_tile_with_tied_scores"),
    "kept groups in rounds": Variant("more than 16 groups on tiles of several rows: the kept groups chosen in "
                                     "TOPK_GROUP rounds instead of all pairs",
                                     "test_many_groups_with_tied_scores_on_every_plan"),
    # key encodings
    "window keys": Variant("32-bit keys: sigmoid choice values quantised in the bias window, rows under it redone",
                           "test_rows_below_the_window_are_redone_exactly"),
    "certified window keys": Variant("sqrt-softplus with a bias: 32-bit keys of an approximate c in the bias window "
                                     "[min b, min b + 8], the row's order certified from the keys' gaps, else the "
                                     "listed experts ranked by exact keys, else the row redone",
                                     "test_sqrt_window_keys_certify_or_rank_exactly"),
    "exact keys": Variant("64-bit keys: float32 choice value bits above the inverted index",
                          "test_windows_outside_the_range_separate_values_one_float32_step_apart"),
    "logit keys": Variant("softmax (and sigmoid without bias beyond 512 experts) ranked by the logits' own bits",
                          "test_softmax_ranked_by_logits_on_every_plan"),
    # the other kernel
    "rounds kernel": Variant("every scoring, grouping and size: the row in registers, K rounds of one fused max",
                             "test_every_plan_matches_float64"),
}
