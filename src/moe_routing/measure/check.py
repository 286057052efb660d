"""``moe-routing check``: a correctness sweep over the routing shapes of real models.

Every case routes a batch that mixes ordinary rows, rows full of exact ties, and garbage rows
(NaN / inf, as CUDA-graph padding can hold) through ``route()`` and judges the result against the
float64 semantics (:mod:`moe_routing.verify`); then builds the dispatch plans of its ids (``align`` at two block
sizes, with and without an expert-parallel map in both of its roles, and ``group``) and compares each with the
reference's, entry for entry; and runs ``route_plan`` on its first rows at the sizes that route and plan in one
launch (one token; the grid kernel's first token count where the case's experts take it) and on the whole batch,
in both layouts, against route() and the reference's plans of route()'s ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import reference
from ..call import check_call
from ..op import route, route_hash
from ..plan import align, group, route_plan, uses_kernel
from ..plan_call import one_launch_from
from ..reference import evaluate_hash
from ..verify import WEIGHT_TOL, Verdict, verify

HASH_VOCABULARY = 1000  # token ids of the hash case's table


@dataclass(frozen=True)
class Case:
    """One routing configuration, named after the model that uses it."""

    name: str
    experts: int
    topk: int
    groups: int = 1
    topk_group: int = 1
    scoring: str = "sigmoid"
    bias: bool = True
    scale: float = 1.0
    hashed: bool = False  # a hash layer: experts from a table (route_hash), only the weights computed

    def kwargs(self, bias: torch.Tensor | None) -> dict:
        return dict(scoring_func=self.scoring, correction_bias=bias, num_expert_group=self.groups,
                    topk_group=self.topk_group, routed_scaling_factor=self.scale)


MODEL_CASES = [
    Case("DeepSeek-V3/R1", 256, 8, 8, 4, scale=2.5),
    Case("DeepSeek-V3, engine 8:8", 256, 8, 8, 8, scale=2.5),
    Case("Kimi-K2", 384, 8, scale=2.827),
    Case("Moonlight", 64, 6, scale=2.446),
    Case("DeepSeek-V4", 256, 6, scoring="sqrtsoftplus", scale=1.5),
    Case("DeepSeek-V4, 384 experts", 384, 6, scoring="sqrtsoftplus", scale=1.5),
    Case("DeepSeek-V4 hash layer", 256, 6, scoring="sqrtsoftplus", bias=False, scale=1.5, hashed=True),
    Case("GLM-4.5", 160, 8, scale=2.5),
    Case("Qwen3-MoE", 128, 8, scoring="softmax", bias=False),
    Case("gpt-oss-120b", 128, 4, scoring="softmax", bias=False),
    Case("Mixtral", 8, 2, scoring="softmax", bias=False),
    Case("odd 131 top-5", 131, 5),
    Case("prime 1021 top-31", 1021, 31),
    Case("160 groups 8:3", 160, 6, 8, 3),
    Case("96 groups 32:2", 96, 3, 32, 2, scoring="softmax"),
]


def case_inputs(case: Case, tokens: int, device: str, seed: int = 0):
    """bf16 logits for ``tokens`` rows (3/4 ordinary, 1/8 exact ties, 1/8 garbage) and a float32 bias."""
    gen = torch.Generator().manual_seed(seed + case.experts)
    logits = torch.randn(tokens, case.experts, generator=gen) * 2.0
    ties = torch.arange(tokens) % 8 == 5
    logits[ties] = torch.randint(-2, 3, (int(ties.sum()), case.experts), generator=gen).float()
    garbage = torch.arange(tokens) % 8 == 7
    specials = torch.tensor([float("nan"), float("inf"), float("-inf"), 0.0, 3.0])
    logits[garbage] = specials[torch.randint(0, 5, (int(garbage.sum()), case.experts), generator=gen)]
    bias = (torch.randn(case.experts, generator=gen) * 0.5).to(device) if case.bias else None
    return logits.to(torch.bfloat16).to(device), bias


def run_check(tokens: int, device: str, cases=MODEL_CASES, progress=None) -> list[dict]:
    """Route and judge every case; one result row per case. ``progress(case)`` is called after each case."""
    rows = []
    for case in cases:
        logits, bias = case_inputs(case, tokens, device)
        kwargs = case.kwargs(bias)
        if case.hashed:
            verdict, ids = _check_hashed(case, logits)
        else:
            weights, ids = route(logits, case.topk, **kwargs)
            verdict = verify(weights, ids, logits, case.topk, **kwargs)
        # (without a kernel the plans are the reference's: comparing it with itself would prove nothing)
        plans = plans_equal = 0
        if uses_kernel(ids):
            plans, plans_equal = check_plans(ids, case.experts)
            if not case.hashed:
                stages, stages_equal = check_route_plans(logits, case, kwargs)
                plans, plans_equal = plans + stages, plans_equal + stages_equal
        call = check_call(logits, case.topk, case.scoring, bias, case.groups, case.topk_group, True, case.scale, None)
        rows.append({
            "case": case.name,
            "experts": case.experts,
            "topk": case.topk,
            "groups": f"{case.groups}:{case.topk_group}",
            "scoring": case.scoring + ("+bias" if case.bias else ""),
            "path": "hash" if case.hashed else "grouped" if call.grouped else "flat",
            "rows": verdict.rows,
            "equal to reference": verdict.rows_equal,
            "exact-tie rows": verdict.exact_tie_rows,
            "near-tie rows": verdict.near_tie_rows,
            "max weight error": f"{verdict.max_weight_error:.1e}",
            "plans equal to reference": f"{plans_equal}/{plans}" if plans else "no kernel here",
            "ok": "yes" if verdict.ok and plans_equal == plans else "NO",
        })
        if progress is not None:
            progress(case)
    return rows


PLAN_BLOCK_SIZES = (16, 64)


def check_plans(ids: torch.Tensor, experts: int) -> tuple[int, int]:
    """The dispatch plans of ``ids`` against the reference's: ``align`` at each of ``PLAN_BLOCK_SIZES`` without a
    map and with a map of a rank holding every fourth expert (dropping other ranks' slots, and relabelling their
    blocks), and ``group`` without and with that map. Returns (plans built, plans equal in every entry)."""
    expert_map = torch.full((experts,), -1, dtype=torch.int32, device=ids.device)
    expert_map[1::4] = torch.arange(len(range(1, experts, 4)), dtype=torch.int32, device=ids.device)
    built = equal = 0
    for block_size in PLAN_BLOCK_SIZES:
        for table, ignore in ((None, False), (expert_map, True), (expert_map, False)):
            got = align(ids, block_size, experts, table, False, ignore)
            expected = reference.align(ids, block_size, experts, table, False, ignore)
            built += 1
            equal += all(torch.equal(a, b) for a, b in zip(got, expected))
    for table in (None, expert_map):
        got = group(ids, experts, expert_map=table)
        expected = reference.group(ids, experts, expert_map=table)
        built += 1
        equal += all(torch.equal(a, b) for a, b in zip(got, expected))
    return built, equal


def route_plan_sizes(tokens: int, experts: int) -> list[int]:
    """The token counts ``check_route_plans`` runs for a batch of ``tokens`` rows of ``experts`` experts: one, the
    grid kernel's first (plan_call.ONE_LAUNCH_FROM) where the batch holds it, and the whole batch."""
    first = one_launch_from(experts)
    return sorted({1, tokens} | ({first} if first is not None and first <= tokens else set()))


def check_route_plans(logits: torch.Tensor, case: Case, kwargs: dict) -> tuple[int, int]:
    """``route_plan`` on the first rows of ``logits`` (``route_plan_sizes``), blocks layout at block 16 and grouped
    layout: its weights and ids against route()'s, bitwise, and its plan against the reference's of those ids.
    Returns (stages built, stages equal in every entry)."""
    built = equal = 0
    for tokens in route_plan_sizes(logits.shape[0], case.experts):
        rows = logits[:tokens]
        weights, ids = route(rows, case.topk, **kwargs)
        for block_size in (16, None):
            plan = route_plan(rows, case.topk, block_size=block_size, **kwargs)
            if block_size is None:
                expected, got = reference.group(ids, case.experts), (plan.permutation, plan.offsets)
            else:
                expected = reference.align(ids, block_size, case.experts)
                got = (plan.sorted_token_ids, plan.expert_ids, plan.num_tokens_post_padded)
            built += 1
            equal += (torch.equal(plan.weights, weights) and torch.equal(plan.ids, ids)
                      and all(torch.equal(a, b) for a, b in zip(got, expected)))
    return built, equal


def _check_hashed(case: Case, logits: torch.Tensor) -> tuple[Verdict, torch.Tensor]:
    """A hash layer: a random table of distinct experts, random token ids; the ids must be the table's and the
    weights float64's of them. Returns the verdict and the ids."""
    gen = torch.Generator().manual_seed(case.experts)
    table = torch.stack([torch.randperm(case.experts, generator=gen)[: case.topk] for _ in range(HASH_VOCABULARY)])
    input_ids = torch.randint(0, HASH_VOCABULARY, (logits.shape[0],), generator=gen)
    weights, ids = route_hash(logits, input_ids.to(logits.device), table.to(logits.device), scoring_func=case.scoring,
                              routed_scaling_factor=case.scale)
    call = check_call(logits, case.topk, case.scoring, None, 1, 1, True, case.scale, None)
    expected_weights, expected_ids, _ = evaluate_hash(logits.cpu(), input_ids, table, call, dtype=torch.float64)
    equal = (ids.cpu().long() == expected_ids).all(dim=-1)
    error = float((weights.cpu().double() - expected_weights).abs().max())
    tolerance = WEIGHT_TOL * max(1.0, case.scale)
    return Verdict(rows=logits.shape[0], rows_equal=int(equal.sum()), exact_tie_rows=0, near_tie_rows=0,
                   near_tie_differing=0, mismatched_rows=int((~equal).sum()), malformed_rows=0, max_weight_error=error,
                   weight_tol=tolerance), ids


def check_rows_plot(rows: list[dict], path, backend: str) -> None:
    """The check's rows per case, by how each was decided (strictly equal, exact ties, near ties), marked by
    whether the case matched float64."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["case"] for r in rows]
    exact_ties = [r["exact-tie rows"] for r in rows]
    near_ties = [r["near-tie rows"] for r in rows]
    ordinary = [r["rows"] - e - n for r, e, n in zip(rows, exact_ties, near_ties)]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.6))
    left = [0] * len(rows)
    for values, label, color in ((ordinary, "rows equal to float64", "#4c72b0"),
                                 (exact_ties, "decided by exact ties (checked strictly)", "#55a868"),
                                 (near_ties, "near ties (either answer accepted)", "#c4ae52")):
        ax.barh(names, values, left=left, label=label, color=color)
        left = [a + b for a, b in zip(left, values)]
    for y, row in enumerate(rows):
        ax.text(left[y], y, "  ok" if row["ok"] == "yes" else "  FAILED", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("rows")
    ax.set_title(f"moe-routing check against float64: {backend}", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
