"""The package's shape and its main job: imports point down the layers, the report leads with its verdict and
leaks no warnings, the census judges tile classes."""

import ast
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import DEVICE

from moe_routing.cli import main

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "moe_routing"
# Each part may import only the parts of lower layers (and itself): the checks and the reference at the bottom,
# then the kernels, the op, the dispatch plans (route_plan calls the op), dispatch, the integrations, the measuring
# tools, the command line.
LAYERS = {"call": 0, "plan_call": 0.5, "reference": 1, "verify": 2, "kernels": 2, "op": 3, "precompile": 3,
          "plan": 3.5, "dispatch": 4, "integrations": 5, "measure": 6, "cli": 7}


def _part(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0].removesuffix(".py") if relative.parts[0] != "__init__.py" else "__init__"


def _imported_parts(path: Path) -> set[str]:
    """The package's parts ``path`` imports (relative imports resolved against its own folder)."""
    tree = ast.parse(path.read_text())
    depth = len(path.relative_to(PACKAGE).parts) - 1  # 0: a module of the package itself
    parts = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(path.relative_to(PACKAGE).parts[:-1])[:depth - node.level + 1]
                names = base + (node.module.split(".") if node.module else [])
                if not names:  # from . import x (in the package itself)
                    parts |= {alias.name for alias in node.names}
                else:
                    parts.add(names[0])
            elif node.module and node.module.startswith("moe_routing."):
                parts.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            parts |= {a.name.split(".")[1] for a in node.names if a.name.startswith("moe_routing.")}
    return parts


def test_imports_point_down_the_layers():
    for path in PACKAGE.rglob("*.py"):
        part = _part(path)
        if part == "__init__":
            continue
        for imported in _imported_parts(path) - {part}:
            assert imported in LAYERS, f"{path}: imports {imported!r}, a part LAYERS does not know"
            assert LAYERS[imported] < LAYERS[part], \
                f"{path.relative_to(PACKAGE)} ({part}) imports {imported}: an arrow up the layers"


def test_report_leads_with_the_verdict_and_leaks_no_warning(tmp_path, monkeypatch):
    from moe_routing.measure import check

    # two cases of few experts: the plans' kernel runs a program an expert, in Triton's interpreter here
    monkeypatch.setattr(check, "MODEL_CASES", [c for c in check.MODEL_CASES if c.name in ("Moonlight", "Mixtral")])
    monkeypatch.setattr("moe_routing.measure.shadow.TINY_FAMILIES", ("mixtral",))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CliRunner().invoke(main, ["report", "--out", str(tmp_path), "--device", "cpu", "--check-tokens",
                                           "8"])
    assert result.exit_code == 0, result.output
    assert not caught, [str(w.message) for w in caught]
    assert "warn" not in result.output.lower(), result.output  # logging too (transformers' configuration notes)
    text = (tmp_path / "report.md").read_text()
    lines = [line for line in text.splitlines() if line]
    assert lines[0] == "# moe-routing report"
    assert lines[1].startswith("**Exact: yes.** 2 model shapes (16 rows")
    assert lines[2].startswith("**Speed: not measured**")
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_report_says_no_when_a_case_fails():
    from moe_routing.measure.report import _verdict

    rows = [{"case": "A", "ok": "yes", "rows": 8}, {"case": "B", "ok": "NO", "rows": 8}]
    assert _verdict(rows, {}, None)[0] == "**Exact: NO.** Failed: B (tables below)."


def test_speedups_compare_every_other_arm_with_route():
    from moe_routing.measure.suite import speedups

    rows = [{"label": s, "tokens": 1, "arm": arm, "device_median": us} for s, arm, us in [
        ("a", "moe_routing.route(out=)", 1.0), ("a", "torch.max(dim=-1)", 2.5), ("a", "empty kernel", 0.7),
        ("b", "moe_routing.route(out=)", 2.0), ("b", "torch.max(dim=-1)", 3.0), ("b", "bytes floor", 0.1),
        ("b", "moe_routing.route", 2.0)]]
    assert speedups({"rows": rows}) == {"torch.max(dim=-1)": (1.5, 2.5, 2)}


def test_census_counts_and_judges_tile_classes(monkeypatch):
    """The command counts the tile classes and runs the ones its filters select. Its three runs enumerate the same
    classes (a few seconds of rules over the census grid): they enumerate them once."""
    from functools import cache

    from moe_routing.measure import census

    monkeypatch.setattr(census, "tile_classes", cache(census.tile_classes))
    runner = CliRunner()
    counted = runner.invoke(main, ["census", "--count", "--device", "cpu"])
    assert counted.exit_code == 0, counted.output
    assert "3528 tile classes" in counted.output
    ran = runner.invoke(main, ["census", "--device", DEVICE, "--only", "one-pass", "--where", "LANES=4", "--limit", "2"])
    assert ran.exit_code == 0, ran.output
    assert "2 tile classes run, 0 failed" in ran.output
    sqrt = runner.invoke(main, ["census", "--device", DEVICE, "--only", "flat", "--where", "SCORING=2", "--where",
                                "LANES=1", "--limit", "2"])  # sqrt-softplus classes, with and without a bias
    assert sqrt.exit_code == 0, sqrt.output
    assert "2 tile classes run, 0 failed" in sqrt.output


@pytest.mark.parametrize("where", ["LANES", "=4"])
def test_census_refuses_a_malformed_where(where):
    result = CliRunner().invoke(main, ["census", "--count", "--where", where])
    assert result.exit_code == 2 and "expected NAME=VALUE" in result.output
