"""The ``moe-routing`` command line."""

from __future__ import annotations

import contextlib
import math
import os
import sys
import warnings

import click


@contextlib.contextmanager
def _quiet():
    """The commands print their own results. Left out: NumPy's warnings from inside Triton's interpreter (exp
    overflowing to inf, NaN arithmetic on the garbage rows: both intended) and transformers' log lines."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.")
        try:
            import transformers

            verbosity = transformers.logging.get_verbosity()
            transformers.logging.set_verbosity_error()
        except ImportError:
            transformers = None
        try:
            yield
        finally:
            if transformers is not None:
                transformers.logging.set_verbosity(verbosity)


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
    from .measure.check import MODEL_CASES, run_check

    from tqdm import tqdm

    with _quiet(), tqdm(total=len(MODEL_CASES), desc="check", unit="case", file=sys.stderr) as bar:
        rows = run_check(tokens, device, progress=lambda case: bar.update())
    click.echo(f"moe-routing check: {_backend(device)}, {tokens} rows per case "
               "(3/4 ordinary, 1/8 exact ties, 1/8 NaN/inf garbage), bf16 logits, float32 bias\n")
    click.echo(tabulate(rows, headers="keys", tablefmt="github"))
    failed = [row["case"] for row in rows if row["ok"] != "yes"]
    if failed:
        click.echo(f"\nFAILED: {', '.join(failed)}", err=True)
        sys.exit(1)
    click.echo("\nall cases match the float64 semantics (near-tie rows: either answer accepted)")


def _engine_sources(ctx, param, values: tuple[str, ...]) -> dict[str, str]:
    """``--engine-source ENGINE=DIR`` options as {engine: DIR}; DIR must exist."""
    import os

    sources = {}
    for value in values:
        engine, _, directory = value.partition("=")
        if not engine or not directory:
            raise click.BadParameter(f"{value!r}: expected ENGINE=DIR, e.g. vllm=./vllm-0.33.0")
        if not os.path.isdir(directory):
            raise click.BadParameter(f"{value!r}: {directory} is not a directory")
        sources[engine] = directory
    return sources


def _parse_shapes(specs: tuple[str, ...], tokens: str) -> list:
    """``E/K[/G:KEPT][/softmax|/sqrtsoftplus][/nobias][/fp32|/fp16][/bias+SHIFT]`` x every T of ``tokens``."""
    import torch

    from .measure.bench import Shape

    counts = [int(t) for t in tokens.split(",")]
    shapes = []
    for spec in specs:
        parts = spec.split("/")
        try:
            experts, topk = int(parts[0]), int(parts[1])
            groups = topk_group = 1
            options = dict(scoring="sigmoid", bias=True, dtype=torch.bfloat16)
            for part in parts[2:]:
                if ":" in part:
                    groups, topk_group = (int(v) for v in part.split(":"))
                elif part in ("softmax", "sigmoid", "sqrtsoftplus"):
                    options["scoring"] = part
                elif part == "nobias":
                    options["bias"] = False
                elif part in ("fp32", "fp16", "bf16"):
                    options["dtype"] = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[part]
                elif part.startswith(("bias+", "bias-")) and math.isfinite(float(part[4:])):
                    options["bias_shift"] = float(part[4:])
                else:
                    raise ValueError(part)
        except (ValueError, IndexError) as error:
            raise click.BadParameter(f"{spec!r}: expected E/K[/G:KEPT][/softmax|/sqrtsoftplus][/nobias][/fp32]"
                                     f"[/bias+SHIFT] ({error})")
        shapes += [Shape(experts, topk, t, groups, topk_group, **options) for t in counts]
    return shapes


@main.command()
@click.option("--preset", type=click.Choice(["targets", "smoke", "wide", "deepseek-v4", "vllm-sites", "plan",
                                            "moe-layer"]),
              default="targets",
              show_default=True, help="Shape set (ignored when --shape is given).")
@click.option("--shape", "specs", multiple=True,
              help="E/K[/G:KEPT][/softmax|/sqrtsoftplus][/nobias][/fp32|/fp16][/bias+SHIFT], repeatable "
                   "(bias+5: every bias entry shifted by 5).")
@click.option("--tokens", default="1,128,8192,65536", show_default=True, help="Token counts for --shape.")
@click.option("--arms", default=None, help="Comma-separated arm names to keep (default: all available but "
              "'reference (torch.compile)', which compiles for tens of seconds a shape).")
@click.option("--rounds", default=3, show_default=True, help="Interleaved rounds per shape (drift).")
@click.option("--calls-per-graph", default=50, show_default=True)
@click.option("--replays", default=20, show_default=True)
@click.option("--out", type=click.Path(), default="bench-results", show_default=True)
@click.option("--from-json", "from_json", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Re-render the table and plot of a saved bench.json into --out (no measuring).")
@click.option("--engine-source", "engine_sources", multiple=True, callback=_engine_sources, metavar="ENGINE=DIR",
              help="An engine's source tree, for engine arms whose kernels are source files (vllm=DIR: DIR holds "
                   "vllm/...; the engine's sdist unpacked, or a site-packages folder), read at run time.")
@click.option("--host-tokens", type=click.IntRange(min=0), default=128, show_default=True,
              help="Measure eager host time (wall time of back-to-back calls) on rows up to this many tokens.")
def bench(preset, specs, tokens, arms, rounds, calls_per_graph, replays, out, from_json, engine_sources,
          host_tokens) -> None:
    """Time route() against the reference, the floors and importable engine ops, side by side (GPU)."""
    import json
    from pathlib import Path

    import torch

    if from_json:
        from .measure.suite import write_outputs

        paths = write_outputs(json.loads(Path(from_json).read_text()), Path(out))
        click.echo(f"re-rendered {from_json}: wrote {', '.join(str(p) for p in paths.values())}")
        return
    if not torch.cuda.is_available():
        click.echo("moe-routing bench needs a CUDA GPU; none is visible here.", err=True)
        sys.exit(2)
    from .measure.arms import ENGINE_SOURCES
    from .measure.suite import PRESETS, run_suite, write_outputs

    from tqdm import tqdm

    ENGINE_SOURCES.update(engine_sources)
    shapes = _parse_shapes(specs, tokens) if specs else PRESETS[preset]
    click.echo(f"reproduce: moe-routing {' '.join(sys.argv[1:])}")

    def after_shape(shape, result):  # the outputs so far, rewritten after every shape
        write_outputs(result, Path(out))
        bar.update()

    with _quiet(), tqdm(total=len(shapes), desc="bench", unit="shape", file=sys.stderr) as bar:
        result = run_suite(shapes, arms.split(",") if arms else None, rounds, calls_per_graph, replays,
                           host_max_tokens=host_tokens, progress=after_shape)
    paths = write_outputs(result, Path(out))
    click.echo("\n" + paths["markdown"].read_text())
    click.echo(f"wrote {', '.join(str(p) for p in paths.values())}")


@main.command()
@click.option("--out", type=click.Path(), default="report", show_default=True)
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default=None, help="Default: cuda if present.")
@click.option("--check-tokens", type=click.IntRange(min=1), default=None,
              help="Rows per check case [default: 4096 GPU, 16 CPU].")
@click.option("--bench-preset", type=click.Choice(["targets", "smoke", "wide", "none"]), default="targets",
              show_default=True)
def report(out, device, check_tokens, bench_preset) -> None:
    """The main job: check, bench (with a GPU) and shadow, as one Markdown report with plots in OUT."""
    from pathlib import Path

    device = _choose_device(device)
    from .measure.report import write_report
    from .measure.shadow import TINY_FAMILIES

    with _quiet():
        path = write_report(Path(out), device, _backend(device), check_tokens or (4096 if device == "cuda" else 16),
                            None if bench_preset == "none" else bench_preset, TINY_FAMILIES)
    click.echo(path.read_text())
    click.echo(f"wrote {path} and its plots")


_SHADOW_FAMILIES = ("deepseek_v3", "glm4_moe", "qwen3_moe", "mixtral", "gpt_oss", "deepseek_v4", "deepseek_v32",
                    "kimi_linear", "glm4_moe_lite", "glm4v_moe", "glm5_next", "glm_moe_dsa", "hy_v4", "exaone_moe",
                    "mimo_v2_flash", "solar_open", "nemotron_h", "axk1", "dots1", "qwen2_moe", "qwen3_next",
                    "qwen3_5_moe", "qwen3_vl_moe", "olmoe", "flex_olmo", "mellum", "minimax", "hunyuan_v1_moe",
                    "jamba", "granitemoe", "granitemoeshared", "granitemoehybrid", "jetmoe", "aria", "minimax_m2",
                    "minimax_m3_vl", "step3p7", "laguna", "hy_v3", "afmoe", "lfm2_moe")


@main.command()
@click.option("--family", "families", multiple=True, type=click.Choice(_SHADOW_FAMILIES),
              help="Embedded tiny model(s): the real routing shapes of deepseek_v3, glm4_moe, qwen3_moe, mixtral, "
                   "gpt_oss, deepseek_v4 [the default], or any family patch() serves, at small shapes.")
@click.option("--model", "model_path", type=click.Path(exists=True, file_okay=False), default=None,
              help="A local model directory instead of the tiny models.")
@click.option("--prompts", default=4, show_default=True)
@click.option("--prompt-tokens", default=32, show_default=True)
@click.option("--new-tokens", default=8, show_default=True)
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default=None)
def shadow(families, model_path, prompts, prompt_tokens, new_tokens, device) -> None:
    """Run models with route() shadowing their routing; print the comparison table."""
    from tabulate import tabulate

    device = _choose_device(device)
    from .measure.shadow import TINY_FAMILIES, load_model, run_shadow, shadow_table, tiny_model

    models = {model_path: lambda: load_model(model_path, device)} if model_path else {
        f"tiny {f}": (lambda f=f: tiny_model(f, device=device)) for f in (families or TINY_FAMILIES)}
    from tqdm import tqdm

    results = {}
    with _quiet(), tqdm(total=len(models), desc="shadow", unit="model", file=sys.stderr) as bar:
        for name, build in models.items():
            results[name] = run_shadow(build(), prompts, prompt_tokens, new_tokens)
            bar.update()
    click.echo(f"moe-routing shadow: {_backend(device)}; the model keeps its own routing, route() runs on the "
               "identical logits into scratch\n")
    click.echo(tabulate(shadow_table(results), headers="keys", tablefmt="github"))


def _name_value(ctx, param, values):
    for value in values:
        if "=" not in value or not value.split("=", 1)[0]:
            raise click.BadParameter(f"{value!r}: expected NAME=VALUE, e.g. ONE_PASS=True")
    return values


@main.command()
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Processes to split the classes over (compiling dominates).")
@click.option("--only", "families", multiple=True, type=click.Choice(["flat", "one-pass", "two-pass", "rounds"]),
              help="Only these families of classes (repeatable) [default: all].")
@click.option("--where", multiple=True, callback=_name_value, metavar="NAME=VALUE",
              help="Only classes whose plan has this constexpr value, e.g. --where STORE_FIRST=True (repeatable).")
@click.option("--float32", is_flag=True, help="The classes of float32 logits (their plans differ) [default: bf16].")
@click.option("--stride", type=click.IntRange(min=1), default=1, show_default=True, help="Every N-th class only.")
@click.option("--offset", type=click.IntRange(min=0), default=0, show_default=True, help="With --stride: start here.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most N classes.")
@click.option("--count", is_flag=True, help="Only count the classes, by family.")
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default=None, help="Default: cuda if present.")
def census(jobs, families, where, float32, stride, offset, limit, count, device) -> None:
    """Every tile class the rules can choose, one call each with its plan forced, judged against float64.

    Run it on a GPU after changing a kernel, a rule or Triton: Triton's interpreter (CI) runs the kernels'
    semantics, not the compiled code. Exit 1 if any class fails."""
    from collections import Counter

    device = _choose_device(device)
    from tqdm import tqdm

    from .measure.census import run_census, select, tile_classes

    classes = select(tile_classes(float32), families, where, stride, offset, limit)
    click.echo(f"moe-routing census: {len(classes)} tile classes {dict(Counter(c.family for c in classes))}, "
               f"{'float32' if float32 else 'bf16'} logits, {_backend(device)}")
    if count:
        return
    failed = []
    with _quiet(), tqdm(total=len(classes), unit="class", dynamic_ncols=True) as bar:
        for cls, failures in run_census(classes, device, float32, jobs):
            if failures:
                failed.append(cls)
                bar.write(f"FAILED {cls.label} [{cls.fingerprint}] {cls.plan.name} rows={cls.plan.rows} "
                          f"warps={cls.plan.num_warps} {dict(cls.plan.constexprs)}: {'; '.join(failures)}")
            bar.update()
    click.echo(f"{len(classes)} tile classes run, {len(failed)} failed")
    if failed:
        sys.exit(1)


@main.command()
@click.option("--layers", default=4, show_default=True)
@click.option("--hidden", default=512, show_default=True)
@click.option("--batch", default=8, show_default=True)
@click.option("--prompt", default=64, show_default=True)
@click.option("--steps", default=64, show_default=True)
@click.option("--rounds", default=6, show_default=True)
@click.option("--out", type=click.Path(), default=None, help="Write e2e.json and e2e.md here.")
def e2e(layers, hidden, batch, prompt, steps, rounds, out) -> None:
    """Decode tokens/s of a DeepSeek-V3-architecture model: transformers' routing vs route() (GPU)."""
    import json
    from pathlib import Path

    import torch

    if not torch.cuda.is_available():
        click.echo("moe-routing e2e needs a CUDA GPU; none is visible here.", err=True)
        sys.exit(2)
    from .measure.e2e import e2e_markdown, run_e2e

    click.echo(f"reproduce: moe-routing {' '.join(sys.argv[1:])}")
    result = run_e2e(layers, hidden, batch, prompt, steps, rounds, log=click.echo)
    result["command"] = " ".join(["moe-routing"] + sys.argv[1:])
    text = e2e_markdown(result)
    click.echo("\n" + text)
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        Path(out, "e2e.json").write_text(json.dumps(result, indent=1))
        Path(out, "e2e.md").write_text(text)


@main.command()
@click.option("--model", "model_dir", required=True, type=click.Path(exists=True, file_okay=False),
              help="Local model directory (its tokenizer and config.json; nothing is downloaded).")
@click.option("--tokens", type=int, required=True, help="Prompt length in the model's tokens.")
@click.option("--count", type=int, default=64, show_default=True)
@click.option("--output-tokens", type=int, default=None, help="Also write each record's output_tokens.")
@click.option("--out", type=click.Path(dir_okay=False), default="prompts.jsonl", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
def prompts(model_dir, tokens, count, output_tokens, out, seed) -> None:
    """Write a `vllm bench serve --dataset-name custom` file of real-text prompts with valid token ids."""
    from pathlib import Path

    from transformers import AutoConfig, AutoTokenizer

    from .integrations.prompts import make_prompts, write_custom_dataset

    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    vocab_size = getattr(config, "vocab_size", None) or config.get_text_config().vocab_size
    prompt_set = make_prompts(tokenizer, vocab_size, tokens, count, seed)
    write_custom_dataset(Path(out), prompt_set, output_tokens)
    click.echo(f"wrote {len(prompt_set.prompts)} prompts of {tokens} tokens to {out}: max token id "
               f"{prompt_set.max_token_id} < config.vocab_size {vocab_size} (len(tokenizer) = {len(tokenizer)}); "
               f"{prompt_set.rejected} windows rejected")
    click.echo(f"use: vllm bench serve --model {model_dir} --dataset-name custom --dataset-path {out} "
               f"--num-prompts {count}")


_DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def _dtypes(ctx, param, value: str):
    """``bf16,fp32`` as torch dtypes."""
    import torch

    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in _DTYPE_NAMES]
    if unknown or not names:
        raise click.BadParameter(f"{value!r}: expected a comma-separated choice of {', '.join(_DTYPE_NAMES)}")
    return tuple(getattr(torch, _DTYPE_NAMES[n]) for n in names)


def _layouts(ctx, param, value: str) -> tuple[str, ...]:
    """``aligned,unaligned`` as compile_check.LAYOUTS names."""
    from .measure.compile_check import LAYOUTS

    names = tuple(v.strip() for v in value.split(",") if v.strip())
    if not names or any(n not in LAYOUTS for n in names):
        raise click.BadParameter(f"{value!r}: expected a comma-separated choice of {', '.join(LAYOUTS)}")
    return names


def _ids_dtypes(ctx, param, value: str) -> tuple:
    """``int32,int64`` as torch dtypes."""
    import torch

    names = tuple(v.strip() for v in value.split(",") if v.strip())
    if not names or any(n not in ("int32", "int64") for n in names):
        raise click.BadParameter(f"{value!r}: expected a comma-separated choice of int32, int64")
    return tuple(getattr(torch, n) for n in names)


def _token_counts(ctx, param, value):
    """``--tokens``: comma-separated ints >= 1, or None."""
    if value is None:
        return None
    try:
        counts = tuple(int(v) for v in value.split(","))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise click.BadParameter(f"{value!r}: comma-separated token counts >= 1, e.g. 1,16,64")
    return counts


def _model_names() -> list[str]:
    from .precompile import MODEL_SHAPES

    return list(MODEL_SHAPES)


@main.command()
@click.option("--model", "models", multiple=True, type=click.Choice(_model_names()),
              help="A model's routing shape, repeatable [default: deepseek-v3 and kimi-k2].")
@click.option("--dtypes", default="bf16,fp32", show_default=True, callback=_dtypes, help="Logits dtypes.")
@click.option("--int64-ids", is_flag=True, help="Also the launches with int64 ids.")
@click.option("--padded", is_flag=True, help="Also the launches with a padding mask.")
@click.option("--threads", type=click.IntRange(min=1), default=16, show_default=True)
@click.option("--tokens", "token_counts", default=None, callback=_token_counts,
              help="Only the plans of these token counts, comma-separated (an engine's CUDA-graph batch sizes) "
                   "[default: every token class].")
def warmup(models, dtypes, int64_ids, padded, threads, token_counts) -> None:
    """Compile every kernel route() can launch for models' routing shapes (every token class) and time it."""
    import torch

    from tqdm import tqdm

    from . import precompile

    if not torch.cuda.is_available():
        click.echo("moe-routing warmup compiles GPU kernels: no CUDA GPU is visible here.", err=True)
        sys.exit(2)
    models = models or ("deepseek-v3", "kimi-k2")
    ids_dtypes = (torch.int32, torch.int64) if int64_ids else (torch.int32,)
    with tqdm(desc="warmup", unit="kernel", file=sys.stderr) as bar:
        report = precompile.warmup(models, dtypes=dtypes, ids_dtypes=ids_dtypes, padded=padded, threads=threads,
                                progress=bar.update, token_counts=token_counts)
    click.echo(f"{report} ({', '.join(models)}; `moe-routing {' '.join(sys.argv[1:])}`)")


@main.command("compile-check")
@click.option("--target", "targets", multiple=True, type=click.Choice(["sm_90", "gfx942", "gfx950"]),
              help="Repeatable; NVIDIA (sm_90) and AMD targets in separate runs [default: gfx942 and gfx950].")
@click.option("--model", "models", multiple=True, type=click.Choice(_model_names()),
              help="Repeatable [default: deepseek-v3, kimi-k2, moonlight, qwen3-moe, deepseek-v4].")
@click.option("--dtypes", default="bf16,fp16,fp32", show_default=True, callback=_dtypes, help="Logits dtypes.")
@click.option("--layouts", default="aligned,unaligned", show_default=True, callback=_layouts,
              help="Logits rows on 16-byte boundaries (aligned) or not (unaligned).")
@click.option("--ids-dtypes", default="int32,int64", show_default=True, callback=_ids_dtypes,
              help="The ids' dtypes of the dispatch-plan kernel's launches.")
@click.option("--jobs", type=click.IntRange(min=1), default=os.cpu_count() or 1, show_default=True,
              help="Processes compiling at once.")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the table here.")
def compile_check(targets, models, dtypes, layouts, ids_dtypes, jobs, out) -> None:
    """Compile every plan for NVIDIA or AMD GPUs (no GPU needed); exit 1 on a compile error, or a register spill
    on AMD (NVIDIA spills are listed: compile_check.failures says why they do not fail)."""
    import time

    from tabulate import tabulate
    from tqdm import tqdm

    from .measure.compile_check import AMD_TARGETS, DEFAULT_MODELS, failures, run_compile_check

    targets = targets or AMD_TARGETS
    started = time.perf_counter()
    with tqdm(desc="compile", unit="kernel", file=sys.stderr) as bar:
        try:
            rows = run_compile_check(targets, models or DEFAULT_MODELS, dtypes, jobs,
                                     progress=lambda row: bar.update(), layouts=layouts, ids_dtypes=ids_dtypes)
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="--target") from None
    table = tabulate(rows, headers="keys", tablefmt="github")
    bad = failures(rows)
    errors, spills = (sum(r["ok"] == verdict for r in rows) for verdict in ("ERROR", "SPILLS"))
    summary = (f"moe-routing compile-check: {len(rows)} launches compiled for {', '.join(targets)} "
               f"in {time.perf_counter() - started:.0f} s; {errors} with a compile error, {spills} with register "
               f"spills; {len(bad)} failing the check")
    click.echo(table + "\n\n" + summary)
    if out:
        from pathlib import Path

        Path(out).write_text(f"`moe-routing {' '.join(sys.argv[1:])}`\n\n{table}\n\n{summary}\n")
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
