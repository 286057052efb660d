"""Shared fixtures: the device, input generators, and the float64 judge with near-tie accounting.

Without a GPU the Triton kernels run through Triton's interpreter on CPU tensors: TRITON_INTERPRET
must be set before Triton is first imported, so it is set here, at collection time.
"""

import os
import subprocess
import sys

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import moe_routing  # noqa: E402
from moe_routing.verify import verify  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ON_GPU = DEVICE == "cuda"
# The interpreter runs each program in NumPy: CI keeps token counts small, the GPU runs them larger.
TOKEN_SCALE = 64 if ON_GPU else 1

POISON_WEIGHT = float("nan")
POISON_ID = -7

_TOTALS = {"calls": 0, "rows": 0, "exact_tie_rows": 0, "near_tie_rows": 0, "near_tie_differing": 0}


def poisoned_out(tokens: int, topk: int, device=DEVICE):
    """Output buffers filled with values no correct call leaves behind."""
    weights = torch.full((tokens, topk), POISON_WEIGHT, dtype=torch.float32, device=device)
    ids = torch.full((tokens, topk), POISON_ID, dtype=torch.int32, device=device)
    return weights, ids


def assert_fully_written(weights: torch.Tensor, ids: torch.Tensor) -> None:
    assert not torch.isnan(weights).any(), "some weights were never written (poison left)"
    assert not (ids == POISON_ID).any(), "some ids were never written (poison left)"


def route_every_plan(logits, topk, **kwargs):
    """Launch every plan the rules can choose for this call (kernel and tile of each token class; a plan
    that several classes share once) into poisoned buffers; check each fully written and matching
    float64. Returns {token class: (plan, weights, ids)}."""
    from moe_routing.call import check_call
    from moe_routing.kernels import all_plans, launch
    from moe_routing.kernels.rules import tensor_traits

    call = check_call(logits, topk, kwargs.get("scoring_func", "sigmoid"), kwargs.get("correction_bias"),
                      kwargs.get("num_expert_group", 1), kwargs.get("topk_group", 1), kwargs.get("renormalize", True),
                      kwargs.get("routed_scaling_factor", 1.0), None)
    results = {}
    for tclass, plan in all_plans(call, **tensor_traits(logits, kwargs.get("correction_bias"))).items():
        same = next((name for name, (earlier, _, _) in results.items() if _same_code(earlier, plan)), None)
        if same is not None:  # classes that share a plan run it once (the interpreter is slow)
            results[tclass] = results[same]
            continue
        weights, ids = poisoned_out(logits.shape[0], topk, logits.device)
        launch(call, logits, kwargs.get("correction_bias"), weights, ids, plan=plan)
        assert_fully_written(weights, ids)
        verdict = verify(weights, ids, logits, topk, **kwargs)
        assert verdict.ok, (tclass, plan.name, plan.rows, plan.num_warps, verdict)
        results[tclass] = (plan, weights, ids)
    return results


def _same_code(a, b) -> bool:
    """Whether two plans run the same code here: equal, or (in the interpreter, which ignores both: it runs each
    program's kernel body once on whole blocks) equal but for the warps and the register cap."""
    return a == b or (not ON_GPU and a._replace(num_warps=0, maxnreg=None) == b._replace(num_warps=0, maxnreg=None))


def assert_plans_agree(results):
    """Batch invariance across plans: every plan of ``route_every_plan``'s results gave the same bits."""
    _, first_w, first_i = next(iter(results.values()))
    for tclass, (_, weights, ids) in results.items():
        assert torch.equal(ids, first_i) and torch.equal(weights, first_w), tclass


def route_and_check(logits, topk, **kwargs):
    """Route into poisoned buffers, check every element written and the result against float64.

    Returns the verdict; near-tie rows are counted for the summary line.
    """
    return route_checked(logits, topk, **kwargs)[0]


def route_checked(logits, topk, **kwargs):
    """``route_and_check``, returning (verdict, weights, ids): the checked call's own outputs, for tests that read
    them further without routing again."""
    out = poisoned_out(logits.shape[0], topk, logits.device)
    weights, ids = moe_routing.route(logits, topk, out=out, **kwargs)
    assert weights is out[0] and ids is out[1], "route(out=...) must return the caller's buffers"
    assert_fully_written(weights, ids)
    verdict = verify(weights, ids, logits, topk, **kwargs)
    assert verdict.malformed_rows == 0, verdict
    assert verdict.mismatched_rows == 0, verdict
    assert verdict.max_weight_error <= verdict.weight_tol, verdict
    _TOTALS["calls"] += 1
    _TOTALS["rows"] += verdict.rows
    _TOTALS["exact_tie_rows"] += verdict.exact_tie_rows
    _TOTALS["near_tie_rows"] += verdict.near_tie_rows
    _TOTALS["near_tie_differing"] += verdict.near_tie_differing
    return verdict, weights, ids


def printed_without_interpreter(program: str, cache_dir) -> list[str]:
    """The words ``program`` prints, run in a fresh Python process without Triton's interpreter (so that Triton
    compiles for real, for a named target), with Triton's cache in ``cache_dir``; the process must succeed."""
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    environment["TRITON_CACHE_DIR"] = str(cache_dir)
    done = subprocess.run([sys.executable, "-c", program], env=environment, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


def random_logits(tokens, experts, dtype=torch.float32, seed=0, scale=2.0, device=DEVICE):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(tokens, experts, generator=gen) * scale).to(dtype).to(device)


def random_bias(experts, dtype=torch.float32, seed=1, scale=0.5, device=DEVICE):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(experts, generator=gen) * scale).to(dtype).to(device)


_WORKER_TOTALS: list[dict] = []  # the totals xdist workers sent back (controller only)


def pytest_configure(config):
    """An xdist worker sends its near-tie totals back with its output (read in ``pytest_testnodedown``)."""
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["moe_routing_totals"] = _TOTALS


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist: a worker finished; keep its totals for the summary."""
    totals = getattr(node, "workeroutput", {}).get("moe_routing_totals")
    if totals:
        _WORKER_TOTALS.append(totals)


def pytest_terminal_summary(terminalreporter):
    totals = dict(_TOTALS)
    for part in _WORKER_TOTALS:
        for key, value in part.items():
            totals[key] += value
    if totals["calls"]:
        terminalreporter.write_line(
            f"moe-routing float64 checks on {DEVICE}: {totals['calls']} calls, {totals['rows']} rows, "
            f"{totals['exact_tie_rows']} rows decided by exact ties (checked strictly), "
            f"{totals['near_tie_rows']} near-tie rows (0 < margin < 1e-6), "
            f"{totals['near_tie_differing']} of them answered differently from float64 (accepted)"
        )


@pytest.fixture
def device():
    return DEVICE
