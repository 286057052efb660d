"""``moe-routing report``: check + bench (on a GPU) + shadow, written as one Markdown report with plots.

On a machine without a GPU it runs what can run there (the check through Triton's interpreter, the
shadow comparison on tiny models) and says what it skipped.
"""

from __future__ import annotations

import datetime
import platform
import sys
from pathlib import Path

import torch
from tabulate import tabulate


def write_report(out: Path, device: str, backend: str, check_tokens: int, bench_preset: str | None,
                 shadow_families: tuple[str, ...], log=print) -> Path:
    from .check import run_check
    from .shadow import run_shadow, shadow_table, tiny_model

    out.mkdir(parents=True, exist_ok=True)
    command = " ".join(["moe-routing"] + sys.argv[1:])
    sections = [
        "# moe-routing report",
        "",
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} · `{command}` · "
        f"{platform.node()} · torch {torch.__version__} · {backend}",
    ]

    log("check ...")
    rows = run_check(check_tokens, device)
    failed = [r["case"] for r in rows if r["ok"] != "yes"]
    sections += ["", "## Correctness against float64 (`moe-routing check`)", "",
                 f"{check_tokens} rows per case (3/4 ordinary, 1/8 exact ties, 1/8 NaN/inf garbage), bf16 logits; "
                 "near-tie rows accept either answer.", "", tabulate(rows, headers="keys", tablefmt="github"),
                 "", "All cases match." if not failed else f"**FAILED: {', '.join(failed)}**"]

    if device == "cuda" and bench_preset:
        from .suite import PRESETS, markdown, run_suite, write_outputs

        log(f"bench ({bench_preset}) ...")
        result = run_suite(PRESETS[bench_preset], None, rounds=3, calls_per_graph=50, replays=20, log=log)
        write_outputs(result, out)
        sections += ["", "## Speed (`moe-routing bench`)", "", markdown(result), "![bench](bench.png)"]
    else:
        sections += ["", "## Speed", "",
                     "Skipped: no CUDA GPU here (`moe-routing bench` needs one)." if device != "cuda"
                     else "Skipped (no preset asked for)."]

    log("shadow ...")
    results = {f"tiny {f}": run_shadow(tiny_model(f, device=device)) for f in shadow_families}
    sections += ["", "## Shadow comparison inside live model forwards (`moe-routing shadow`)", "",
                 "Tiny models with random weights and each family's real routing shape; the model keeps its own "
                 "routing while route() runs on the identical logits into scratch.", "",
                 tabulate(shadow_table(results), headers="keys", tablefmt="github")]
    path = out / "report.md"
    path.write_text("\n".join(sections) + "\n")
    return path
