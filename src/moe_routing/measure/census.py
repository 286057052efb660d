"""``moe-routing census``: every tile class the rules can choose, run once and judged against float64.

Why: which code a plan compiles to depends on its tile (the shapes of its tensors), not on the call's exact
sizes, and Triton's interpreter (CI) runs the kernels' semantics, not the compiled code: a one-pass grouped
tile once gave wrong group scores on the H200 only. After a change to a kernel, a rule or Triton, the census
runs one call of every *tile class* on the GPU: a grid of calls (32-1024 experts, K = 1-32, flat and grouped,
sigmoid with and without bias, softmax) goes through ``rules.all_plans`` (every token class, the unaligned and
two-pass plans too), the first call of each class is kept, and 2 x rows + 3 tokens are routed with its plan
forced: ``hard_inputs``, with the bias as
drawn (window keys) and shifted by +8 (exact keys). Outputs start poisoned and must be fully written.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import torch
import triton

from ..call import check_call
from ..kernels.launch import launch
from ..kernels.rules import Plan, all_plans, one_pass_step
from ..verify import verify

EXPERTS = (32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 640, 1024)
GROUPINGS = ((1, 1), (2, 1), (4, 1), (4, 2), (8, 3), (8, 4), (16, 4), (32, 4), (64, 8))
TOPKS = (1, 2, 4, 6, 8, 9, 12, 16, 17, 20, 24, 32)
SCORINGS = (("sigmoid", True), ("sigmoid", False), ("softmax", False), ("sqrtsoftplus", True), ("sqrtsoftplus", False))
# bias shifts per biased scoring: the window keys, then a bias the window cannot take (exact keys)
EXACT_SHIFTS = {"sigmoid": 8.0, "sqrtsoftplus": 20.0}
FAMILIES = ("flat", "one-pass", "two-pass", "rounds")
_SIZES = ("TOPK", "NUM_EXPERTS", "TOPK_GROUP", "NUM_GROUPS", "GROUP_SIZE", "BLOCK_EXPERTS", "LOG2_CHUNK",
          "RENORMALIZE")
_GROUP_STAGE = ("BLOCK_GROUPS", "BLOCK_GROUP_SIZE", "GROUPS_PER_LOAD")


class TileClass(NamedTuple):
    """One class of the census: its key, the first call met in it and the plan that call got."""

    key: tuple
    experts: int
    topk: int
    scoring: str
    biased: bool
    groups: int
    kept: int
    plan_name: str  # all_plans' name of the plan ("huge 64k, two passes", ...)
    plan: Plan

    @property
    def family(self) -> str:
        """"flat", "one-pass", "two-pass" (grouped bitonic) or "rounds"."""
        if self.plan.name == "rounds":
            return "rounds"
        if not self.key[8]:
            return "flat"
        return "one-pass" if self.key[5] else "two-pass"

    @property
    def fingerprint(self) -> str:
        return hashlib.sha1(repr(self.key).encode()).hexdigest()[:10]

    @property
    def label(self) -> str:
        bias = "" if self.biased else " no bias"
        return f"{self.experts}/{self.topk} {self.groups}:{self.kept} {self.scoring}{bias} {self.plan_name}"


def tile_key(call, plan: Plan, biased: bool) -> tuple:
    """What shapes a plan's tensors: its constexprs without the problem's sizes (and without the group stage's
    blocks on flat rows), plus the steps of a row, whether the last step is padded, the key family, whether
    groups can be eliminated and the register cap."""
    c = plan.constexprs
    ignored = _SIZES + (() if call.grouped else _GROUP_STAGE)
    rest = tuple((k, v) for k, v in c.items() if k not in ignored)
    if plan.name == "rounds":
        return ("rounds", rest, plan.num_warps, call.grouped, biased)
    span = c["LANES"] * c["CHUNK"] * c["GROUP"]
    steps = triton.cdiv(call.experts, span)
    per_step = one_pass_step(plan, call)[0] if c["ONE_PASS"] else 0
    return ("bitonic", rest, plan.num_warps, steps if c["ONE_PASS"] else min(steps, 2), call.experts % span != 0,
            per_step, call.experts > 512, biased, call.grouped, call.experts % c["GROUP"] != 0, plan.maxnreg)


def tile_classes(float32: bool = False) -> list[TileClass]:
    """The first call of every tile class, for bf16 logits (aligned and not) or float32 logits."""
    dtype = torch.float32 if float32 else torch.bfloat16
    seen: dict[tuple, TileClass] = {}
    for experts in EXPERTS:
        for groups, kept in GROUPINGS:
            if experts % groups:
                continue
            for topk in TOPKS:
                for scoring, biased in SCORINGS:
                    try:
                        call = check_call(torch.zeros(1, experts, dtype=dtype), topk, scoring,
                                          torch.zeros(experts) if biased else None, groups, kept, True, 1.0, None)
                    except (ValueError, TypeError):
                        continue
                    for name, plan in all_plans(call, not float32, biased, float32).items():
                        key = tile_key(call, plan, biased) + (("float32",) if float32 else ())
                        if key not in seen:
                            seen[key] = TileClass(key, experts, topk, scoring, biased, groups, kept, name, plan)
    return list(seen.values())


def hard_inputs(experts: int, groups: int, tokens: int, device: str, seed: int, dtype: torch.dtype = torch.bfloat16):
    """Random logits (at least 5 rows) with a NaN row, an -inf row, an all-tied row, a row of tied groups and a row
    with +inf among finite logits; a random bias (window keys; EXACT_SHIFTS added for exact keys)."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(tokens, experts, generator=gen) * 2
    size = experts // groups
    logits[0, ::3] = float("nan")
    logits[1] = float("-inf")
    logits[2] = 0.5  # every expert tied
    if groups > 1:
        logits[3, :size] = logits[3, size:2 * size]  # two groups with the same values
    logits[4, 1::4] = float("inf")  # one in every run of four: a run filter keyed on it without a check fails
    bias = torch.randn(experts, generator=gen) * 0.5
    return logits.to(dtype).to(device), bias.to(device)


def run_class(cls: TileClass, device: str, dtype: torch.dtype = torch.bfloat16) -> list[str]:
    """What failed in one class's runs (empty when every run is right)."""
    tokens = 2 * cls.plan.rows + 3
    logits, bias = hard_inputs(cls.experts, cls.groups, tokens, device, cls.experts * 131 + cls.topk, dtype)
    failures = []
    for shift in ((0.0, EXACT_SHIFTS[cls.scoring]) if cls.biased else (None,)):
        b = None if shift is None else bias + shift
        call = check_call(logits, cls.topk, cls.scoring, b, cls.groups, cls.kept, True, 2.5, None)
        weights = torch.full((tokens, cls.topk), float("nan"), device=device)
        ids = torch.full((tokens, cls.topk), -7, dtype=torch.int32, device=device)
        try:
            launch(call, logits, b, weights, ids, plan=cls.plan)
        except Exception as error:  # noqa: BLE001 - a census reports, it does not stop
            failures.append(f"bias+{shift}: {type(error).__name__}: {str(error)[:100]}")
            continue
        if torch.isnan(weights).any() or (ids == -7).any():
            failures.append(f"bias+{shift}: outputs not fully written")
            continue
        verdict = verify(weights, ids, logits, cls.topk, scoring_func=cls.scoring, correction_bias=b,
                         num_expert_group=cls.groups, topk_group=cls.kept, routed_scaling_factor=2.5)
        if not verdict.ok:
            failures.append(f"bias+{shift}: {verdict.mismatched_rows} mismatched, {verdict.malformed_rows} malformed "
                            f"of {verdict.rows} rows, weight error {verdict.max_weight_error:.2e}")
    return failures


def select(classes: list[TileClass], families=(), where=(), stride: int = 1, offset: int = 0,
           limit: int | None = None) -> list[TileClass]:
    """The classes of ``families`` whose plans have every ``NAME=VALUE`` of ``where``; every ``stride``-th from
    ``offset``, at most ``limit``."""
    conditions = [w.split("=", 1) for w in where]
    chosen = [c for c in classes if (not families or c.family in families)
              and all(str(c.plan.constexprs.get(name)) == value for name, value in conditions)]
    return chosen[offset::stride][:limit]


def _run_part(fingerprints: list[str], device: str, float32: bool) -> list[tuple[str, list[str]]]:
    """A worker's share, by fingerprint (plans hold jit functions, which do not pickle)."""
    dtype = torch.float32 if float32 else torch.bfloat16
    mine = set(fingerprints)
    return [(cls.fingerprint, run_class(cls, device, dtype)) for cls in tile_classes(float32) if cls.fingerprint in mine]


def run_census(classes: list[TileClass], device: str, float32: bool = False, jobs: int = 1):
    """Run every class; yields (class, failures) as they finish. ``jobs`` > 1 splits the classes over that many
    processes (compiling dominates; each process compiles its own classes)."""
    dtype = torch.float32 if float32 else torch.bfloat16
    if jobs <= 1:
        for cls in classes:
            yield cls, run_class(cls, device, dtype)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    by_fingerprint = {cls.fingerprint: cls for cls in classes}
    names = list(by_fingerprint)
    parts = [names[i::jobs * 4] for i in range(min(len(names), jobs * 4))]  # small parts finish evenly
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        for future in as_completed([pool.submit(_run_part, part, device, float32) for part in parts]):
            for fingerprint, failures in future.result():
                yield by_fingerprint[fingerprint], failures
