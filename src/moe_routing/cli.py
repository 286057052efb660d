"""The ``moe-routing`` command line."""

from __future__ import annotations

import os
import sys

import click


def _choose_device(device: str | None) -> str:
    """The GPU when there is one; otherwise the CPU, with the kernels run by Triton's interpreter.

    The interpreter must be chosen before Triton is first imported, which is why commands call this
    before they touch a kernel.
    """
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and "triton" not in sys.modules:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return device


def _backend(device: str) -> str:
    from . import kernels

    if device == "cuda":
        import torch

        return f"Triton kernels on {torch.cuda.get_device_name()}"
    return "Triton kernels in Triton's interpreter (CPU)" if kernels.INTERPRETED else "PyTorch reference (CPU)"


@click.group()
@click.version_option(package_name="moe-routing")
def main() -> None:
    """moe-routing: exact, fast router top-k for Mixture-of-Experts models."""


@main.command()
@click.option("--tokens", type=int, default=None, help="Rows per case [default: 4096 on GPU, 24 on CPU].")
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default=None, help="Default: cuda if present.")
def check(tokens: int | None, device: str | None) -> None:
    """Correctness sweep over real models' routing shapes against float64; exit 1 on any defect."""
    from tabulate import tabulate

    device = _choose_device(device)
    tokens = tokens or (4096 if device == "cuda" else 24)
    from .measure.check import run_check

    rows = run_check(tokens, device)
    click.echo(f"moe-routing check: {_backend(device)}, {tokens} rows per case "
               "(3/4 ordinary, 1/8 exact ties, 1/8 NaN/inf garbage), bf16 logits, float32 bias\n")
    click.echo(tabulate(rows, headers="keys", tablefmt="github"))
    failed = [row["case"] for row in rows if row["ok"] != "yes"]
    if failed:
        click.echo(f"\nFAILED: {', '.join(failed)}", err=True)
        sys.exit(1)
    click.echo("\nall cases match the float64 semantics (near-tie rows: either answer accepted)")


if __name__ == "__main__":
    main()
