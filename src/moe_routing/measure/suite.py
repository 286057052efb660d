"""``moe-routing bench``: run the arms side by side over a set of shapes; write table, JSON and plot.

Everything is measured in one run, interleaved per shape (see bench.py). Outputs, under ``--out``:
``bench.md`` (Markdown tables: device time per call under graph replay, eager host time per call),
``bench.json`` (every measurement, with GPU, versions, date and the command that made them) and
``bench.png`` (µs against T, log-log, one line per arm, one panel per expert configuration).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import sys
from pathlib import Path

import torch

from . import arms as arm_factories
from . import moe_layer
from . import stage_arms as stage_arm_factories
from .bench import Shape, copy_bandwidth_bytes_per_s, make_inputs, run_interleaved

# Device-time targets (H200, bf16 logits, fp32 bias, renormalise), µs per call under graph replay: the bench
# marks each row's target beside it.
TARGETS_US = {
    (64, 6, 1, 1, 1): 1.3, (64, 6, 1, 1, 128): 1.3,
    (256, 8, 1, 1, 1): 1.5, (256, 8, 1, 1, 128): 1.5, (256, 8, 1, 1, 8192): 4.0, (256, 8, 1, 1, 65536): 18.0,
    (384, 8, 1, 1, 1): 1.8, (384, 8, 1, 1, 128): 1.8, (384, 8, 1, 1, 65536): 26.0,
    (256, 8, 8, 4, 1): 1.6, (256, 8, 8, 4, 128): 1.6, (256, 8, 8, 4, 65536): 20.0,
}

VLLM_SITE_TOKENS = (1, 8, 64, 256, 2048, 8192)
PLAN_TOKENS = (1, 4, 16, 64, 256, 1024, 8192, 65536)
REPORT_STAGE_TOKENS = (16, 256, 8192)  # the routing-stage rows of ``moe-routing report``

PRESETS = {
    "targets": [Shape(e, k, t, g, kg) for (e, k, g, kg, t) in TARGETS_US],
    "smoke": [Shape(256, 8, t, 8, 4) for t in (1, 128)] + [Shape(256, 8, t) for t in (1, 4096)],
    "wide": [Shape(e, k, t) for e, k in ((64, 6), (128, 8), (160, 8), (256, 8), (384, 8), (512, 8))
             for t in (1, 128, 1024, 8192, 16384, 32768, 65536)]
    + [Shape(128, 8, t, scoring="softmax", bias=False) for t in (1, 128, 8192, 65536)]
    + [Shape(256, 8, t, dtype=torch.float32) for t in (1, 128, 8192, 65536)]
    + [Shape(1024, 32, t) for t in (1, 128, 8192)]
    + [Shape(256, 8, t, 8, 4) for t in (1, 128, 1024, 8192, 16384, 32768, 65536)],
    # DeepSeek-V4's routed layers (float32 logits, as vLLM's fast path takes them; scale 1.5), sqrt-softplus beside
    # sigmoid on the same shape
    "deepseek-v4": [Shape(e, 6, t, scoring=scoring, dtype=torch.float32, scale=1.5) for e in (256, 384)
                    for scoring in ("sqrtsoftplus", "sigmoid")
                    for t in (1, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536)],
    # the shapes the vLLM plugin serves, beside the vLLM op each site replaces, decode and prefill sizes; with
    # --host-tokens 8192 every row gets its eager time too (the eager-default decision: docs/integrations.md)
    # the routing stage (top-k + the blocks plan) beside vLLM's top-k op + its moe_align_block_size, where vLLM
    # aligns; DeepSeek-V3 also as an expert-parallel rank holding 32 of its 256 experts
    "plan": [Shape(e, k, t, g, kg, scoring=scoring, bias=scoring != "softmax", dtype=dtype, scale=scale, stage=True,
                   local_experts=local)
             for e, k, g, kg, scoring, dtype, scale, local in (
                 (256, 8, 8, 4, "sigmoid", torch.bfloat16, 2.5, 0), (256, 8, 8, 4, "sigmoid", torch.bfloat16, 2.5, 32),
                 (384, 8, 1, 1, "sigmoid", torch.bfloat16, 2.827, 0), (64, 6, 1, 1, "sigmoid", torch.bfloat16, 2.446, 0),
                 (128, 8, 1, 1, "softmax", torch.bfloat16, 1.0, 0), (256, 6, 1, 1, "sqrtsoftplus", torch.float32, 1.5, 0))
             for t in PLAN_TOKENS if local or stage_arm_factories.vllm_aligns(t, k, e, False)],
    # one MoE layer end to end, vLLM's routing stage against route_plan, vLLM's fused_moe_kernel GEMMs after each
    # (measure/moe_layer.py; --engine-source vllm=DIR)
    "moe-layer": moe_layer.LAYER_SHAPES,
    "vllm-sites": [Shape(e, k, t, scale=s) for e, k, s in ((64, 6, 2.446), (256, 8, 2.5), (384, 8, 2.827))
                   for t in VLLM_SITE_TOKENS]
    + [Shape(128, 8, t, scoring="softmax", bias=False, scale=1.0) for t in VLLM_SITE_TOKENS]
    + [Shape(256, 6, t, scoring="sqrtsoftplus", dtype=torch.float32, scale=1.5) for t in VLLM_SITE_TOKENS],
}

# The arms of the report: route() beside what a user would otherwise run (engine ops where importable, the
# straightforward kernel, torch.max as the one-ATen-op yardstick, the launch floor); the A/B arms of route()'s
# own variants and the reference arms (minutes of torch.compile) are for ``moe-routing bench --arms``.
REPORT_ARMS = ["moe_routing.route(out=)", "moe_routing.route", "empty kernel", "torch.max(dim=-1)",
               "straightforward Triton"]

# arms run only when named in ``--arms``: torch.compile of the reference takes tens of seconds a shape, which would
# take a preset of forty shapes past minutes
NAMED_ONLY_ARMS = {"reference (torch.compile)"}

HOST_ARMS = {"moe_routing.route(out=)", "moe_routing.route", "moe_routing.route(out=) via Python", "torch.max(dim=-1)",
             "empty kernel", "moe_routing via the vLLM plugin", "moe_routing.route_plan(out=)", "moe_routing.align",
             "vLLM top-k + align", "vLLM moe_align_block_size"} | set(arm_factories.ENGINES)


def _shape_fields(shape: Shape) -> dict:
    """The fields of a result row that name its shape (every row of that shape repeats them)."""
    return {"experts": shape.experts, "topk": shape.topk, "groups": shape.groups, "topk_group": shape.topk_group,
            "tokens": shape.tokens, "scoring": shape.scoring, "bias": shape.bias, "bias_shift": shape.bias_shift,
            "dtype": str(shape.dtype).removeprefix("torch."), "local_experts": shape.local_experts,
            "label": shape.label}


def compile_ahead(shapes: list[Shape]) -> None:
    """Compile every kernel route() launches for the shapes' routing (the plans of the token counts the shapes time,
    each logits dtype they use) in parallel before anything is timed (``precompile.warmup``), so that no shape waits
    for compiles one at a time; not the plans of token classes no shape times (the slowest to compile)."""
    from ..precompile import RoutingShape, warmup

    wanted: dict[RoutingShape, tuple[set, set]] = {}  # a routing shape's logits dtypes and token counts
    for shape in shapes:
        routing_of = getattr(shape, "routing", shape)  # a layer shape's routing stage
        routing = RoutingShape(routing_of.experts, routing_of.topk, routing_of.scoring,
                               torch.float32 if routing_of.bias else None, routing_of.groups, routing_of.topk_group)
        dtypes, tokens = wanted.setdefault(routing, (set(), set()))
        dtypes.add(routing_of.dtype)
        tokens.add(shape.tokens)
    for routing, (dtypes, tokens) in wanted.items():
        warmup(routing, dtypes=sorted(dtypes, key=str), token_counts=sorted(tokens))
    staged = [shape for shape in shapes if getattr(shape, "stage", False) or isinstance(shape, moe_layer.LayerShape)]
    compile_plan_kernels_ahead([(shape.tokens, shape.topk, shape.experts, shape.local_experts, (16,))
                                for shape in staged])
    if torch.cuda.is_available():
        compile_route_plans_ahead([getattr(shape, "routing", shape) for shape in staged])


def compile_route_plans_ahead(shapes: list[Shape], threads: int = 16) -> int:
    """Compile, in parallel, the one-launch route_plan kernels (kernels/route_plan_launch.py) the stage shapes take:
    the one-program kernel by a call of one token of each distinct routing shape, the grid kernel by a call of a
    shape whose token count takes it (one binary a routing shape: the token count, the map's role and the block size
    are runtime arguments), each on its own inputs (a GPU); returns how many calls that was."""
    from concurrent.futures import ThreadPoolExecutor

    from ..plan_call import may_take_one_launch

    distinct = {}
    for shape in shapes:
        key = (shape.experts, shape.topk, shape.scoring, shape.bias, shape.groups, shape.topk_group, shape.dtype)
        distinct.setdefault(key + (False,), dataclasses.replace(shape, tokens=1, local_experts=0))
        if shape.tokens > 1 and may_take_one_launch(shape.tokens, shape.experts, bool(shape.local_experts)):
            distinct.setdefault(key + (True,), shape)

    def compile_one(shape: Shape) -> None:
        stage_arm_factories.arm_route_plan(make_inputs(shape))(0)

    with ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(compile_one, shape) for shape in distinct.values()]:
            future.result()
    return len(distinct)


def compile_plan_kernels_ahead(plans: list[tuple[int, int, int, int, tuple]], threads: int = 16,
                               device=None) -> int:
    """Compile, in parallel, the dispatch-plan kernels of ``plans``: (tokens, topk, experts, experts this rank holds
    (0: no map), block sizes (None: the grouped layout)), each with the slot class and launches its token count
    takes (the map's role and the scatter index are runtime arguments), int32 ids; so that nothing timed or
    checked waits for them one at a time. Returns how many distinct kernels that is. ``device``: the CUDA device
    (default: the current one); in Triton's interpreter (CPU tensors) nothing compiles and the count is the same."""
    from concurrent.futures import ThreadPoolExecutor

    from ..kernels._plan import plan_kernel
    from ..kernels.launch import programmatic_launch_ok
    from ..kernels.plan_launch import counting, plan_arguments, plan_launch
    from ..plan_call import check_plan_call

    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    programmatic = device.type == "cuda" and programmatic_launch_ok(device.index)
    dummy = torch.empty(64, dtype=torch.int32, device=device)  # outputs: never written (nothing is launched)
    jobs: dict = {}
    for tokens, topk, experts, local, block_sizes in plans:
        ids = torch.empty(tokens, topk, dtype=torch.int32, device=device)
        expert_map = None
        if local:  # a map reaches the binary by its dtype alone: this rank's share holds the first experts
            expert_map = torch.full((experts,), -1, dtype=torch.int32, device=device)
            expert_map[:local] = torch.arange(local, dtype=torch.int32, device=device)
        for block_size in block_sizes:  # (a map's role is a runtime argument: one role compiles them all)
            call = check_plan_call(ids, experts, block_size, expert_map)
            launch = plan_launch(call, programmatic=programmatic)
            args, constexprs = plan_arguments(call, ids, expert_map, dummy, dummy, dummy, None, dummy, dummy,
                                              launch)
            options = dict(num_warps=launch.num_warps, **(dict(launch_pdl=True) if programmatic else {}))
            for stage in ([counting(constexprs)] if launch.launches == 2 else []) + [constexprs]:
                jobs.setdefault(tuple(sorted(stage.items())) + (launch.num_warps, args[1].dtype),
                                (args, {**options, **stage}))

    def compile_one(job) -> None:
        args, kwargs = job
        plan_kernel.warmup(*args, grid=(1,), **kwargs)

    with ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(compile_one, job) for job in jobs.values()]:
            future.result()
    return len(jobs)


def run_suite(shapes: list[Shape], arm_names: list[str] | None, rounds: int, calls_per_graph: int,
              replays: int, host_max_tokens: int = 128, progress=None) -> dict:
    """Measure every arm on every shape; return the JSON-able result. ``progress(shape, result)`` is called after
    each shape with the result so far (the CLI writes it out, so that a run stopped early keeps what it measured)."""
    layers = [shape for shape in shapes if isinstance(shape, moe_layer.LayerShape)]
    # (started first: it builds vLLM's CUDA routing ops in the background while route()'s kernels compile)
    layer_bench = moe_layer.LayerBench(layers, rounds, calls_per_graph, replays) if layers else None
    compile_ahead(shapes)
    bandwidth = copy_bandwidth_bytes_per_s()
    checked = {**arm_factories.PEERS, **arm_factories.ENGINES}
    factories = {**arm_factories.OURS, **arm_factories.BASELINES, **checked}
    if arm_names:
        factories = {name: f for name, f in factories.items() if name in arm_names}
    else:
        factories = {name: f for name, f in factories.items() if name not in NAMED_ONLY_ARMS}
    stage_factories = {**stage_arm_factories.OURS, **stage_arm_factories.ENGINES, "moe_routing.route(out=)":
                       arm_factories.arm_route}
    if arm_names:
        stage_factories = {name: f for name, f in stage_factories.items() if name in arm_names}
    rows, notes = [], {}
    result = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "moe_routing": __import__("moe_routing").__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["moe-routing"] + sys.argv[1:]),
        "copy_bandwidth_TBps": bandwidth / 1e12,
        "calls_per_graph": calls_per_graph, "replays": replays, "rounds": rounds,
        "engine_notes": {}, "engines_present": [], "rows": rows,
    }
    engines = set(arm_factories.ENGINES) | set(stage_arm_factories.ENGINES)
    for shape in shapes:
        if isinstance(shape, moe_layer.LayerShape):
            layer_rows, layer_notes = layer_bench.measure(shape)
            rows += layer_rows
            notes.setdefault("moe-layer", set()).update(layer_notes)
            result["engine_notes"] = {name: sorted(n) for name, n in notes.items()}
            if progress is not None:
                progress(shape, result)
            continue
        inputs = make_inputs(shape)
        calls = {}
        for name, factory in (stage_factories if shape.stage else factories).items():
            if name in checked and not shape.stage:
                call, note = arm_factories.checked_engine_arm(name, factory, inputs,
                                                              bias_cast=name in arm_factories.ENGINES)
                notes.setdefault(name, set()).add(note)
            else:
                try:  # an arm that cannot run a shape (or disagrees with the reference) is reported, not fatal
                    call = factory(inputs)
                    if call is None:
                        raise ValueError("does not support this shape")
                    call(0)
                    torch.cuda.synchronize()
                    if name in engines:
                        notes.setdefault(name, set()).add("checked against the reference")
                except Exception as error:
                    notes.setdefault(name, set()).add(f"{shape.label} T={shape.tokens}: {type(error).__name__}: "
                                                      f"{str(error)[:120]}")
                    call = None
            if call is not None:
                calls[name] = call
        host = HOST_ARMS if shape.tokens <= host_max_tokens else set()
        for m in run_interleaved(shape, calls, len(inputs.logits), rounds, calls_per_graph, replays, host):
            summary = m.summary()
            rows.append({**_shape_fields(shape), "arm": m.arm, "device_us": m.device_us, "host_us": m.host_us,
                         **{f"{kind}_{stat}": value for kind in ("device", "host")
                            for stat, value in summary[kind].items()}})
        floor = shape.bytes_moved() / bandwidth * 1e6
        rows.append({**_shape_fields(shape), "arm": "bytes floor", "device_median": floor, "device_min": floor,
                     "device_max": floor, "device_drift": 0.0})
        result["engine_notes"] = {name: sorted(n) for name, n in notes.items()}
        result["engines_present"] = sorted({r["arm"] for r in rows if r["arm"] in engines})
        if progress is not None:
            progress(shape, result)
    return result


def speedups(result: dict, ours: str = "moe_routing.route(out=)") -> dict[str, tuple[float, float, int]]:
    """For every other arm that ran beside ``ours`` (not the floors): (lowest, highest) ratio of its device time
    to ours over the shapes both ran, and how many shapes that is."""
    index = {(r["label"], r["tokens"], r["arm"]): r.get("device_median") for r in result["rows"]}
    ratios: dict[str, list[float]] = {}
    for (label, tokens, arm), median in index.items():
        mine = index.get((label, tokens, ours))
        if arm.startswith("moe_routing") or arm in ("bytes floor", "empty kernel") or not median or not mine:
            continue
        ratios.setdefault(arm, []).append(median / mine)
    return {arm: (min(r), max(r), len(r)) for arm, r in ratios.items()}


def _cell(row: dict | None, kind: str = "device") -> str:
    if row is None or f"{kind}_median" not in row:
        return "–"
    return f"{row[f'{kind}_median']:.2f} ±{100 * row[f'{kind}_drift']:.0f}%"


def markdown(result: dict) -> str:
    """The device-time table (median over rounds, ± same-arm drift) and the eager host-time table; the layer rows
    (``moe-layer``) in their own table."""
    rows = [r for r in result["rows"] if not r.get("layer")]
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    shapes = list(dict.fromkeys((r["label"], r["tokens"]) for r in rows))
    index = {(r["label"], r["tokens"], r["arm"]): r for r in rows}
    lines = [
        f"GPU: {result['gpu']} · torch {result['torch']} · triton {result['triton']} · moe-routing "
        f"{result['moe_routing']} · {result['date']}",
        f"Command: `{result['command']}`",
        f"Copy bandwidth (read + write): {result['copy_bandwidth_TBps']:.2f} TB/s. Device time: µs per call under "
        f"CUDA-graph replay ({result['calls_per_graph']} calls per graph, median of {result['replays']} replays), "
        f"median of {result['rounds']} interleaved rounds, ± the arm's own drift across rounds.",
    ]
    if rows:
        lines += ["", "| experts / top-k / groups kept | T | " + " | ".join(arms) + " | target |",
                  "|---|---|" + "---|" * (len(arms) + 1)]
    for label, tokens in shapes:
        first = next(r for r in rows if r["label"] == label)
        target = TARGETS_US.get((first["experts"], first["topk"], first["groups"], first["topk_group"], tokens))
        if (first["scoring"] != "sigmoid" or not first["bias"] or first.get("bias_shift", 0.0)
                or first["dtype"] != "bfloat16"):
            target = None
        cells = [_cell(index.get((label, tokens, arm))) for arm in arms]
        lines.append(f"| {label} | {tokens} | " + " | ".join(cells) + f" | {'≤ ' + str(target) if target else ''} |")
    host_arms = [a for a in arms if any(r.get("host_median") for r in rows if r["arm"] == a)]
    if host_arms:
        lines += ["", "Eager host time per call (µs; wall time of back-to-back calls), median of rounds ± drift:", "",
                  "| experts / top-k / groups kept | T | " + " | ".join(host_arms) + " |",
                  "|---|---|" + "---|" * len(host_arms)]
        for label, tokens in shapes:
            cells = [_cell(index.get((label, tokens, arm)), "host") for arm in host_arms]
            if any(c != "–" for c in cells):
                lines.append(f"| {label} | {tokens} | " + " | ".join(cells) + " |")
    lines += scoring_comparison(result)
    lines += stage_comparison(result)
    lines += moe_layer.layer_comparison(result)
    for name, notes in result.get("engine_notes", {}).items():
        lines.append(f"\n{name}: {'; '.join(notes)}")
    return "\n".join(lines) + "\n"


def scoring_comparison(result: dict, ours: str = "moe_routing.route(out=)") -> list[str]:
    """Markdown lines comparing route()'s sqrt-softplus rows with its sigmoid rows of the same shape (and with
    vLLM's dsv4_topk where it ran): device-time ratios; empty when the run has no such pairs."""
    index = {(r["experts"], r["topk"], r["groups"], r["topk_group"], r["tokens"], r["bias"], r["dtype"],
              r.get("bias_shift", 0.0), r["scoring"], r["arm"]): r for r in result["rows"] if "device_median" in r}
    pairs = sorted({key[:8] for key in index if key[8] == "sqrtsoftplus" and key[9] == ours
                    and key[:8] + ("sigmoid", ours) in index})
    if not pairs:
        return []
    lines = ["", f"Sqrt-softplus against sigmoid, {ours} device time (µs, median ± drift), same shape, same run:", "",
             "| experts / top-k | T | logits | sqrt-softplus | sigmoid | ratio | vLLM dsv4_topk | dsv4_topk / ours |",
             "|---|---|---|---|---|---|---|---|"]
    for key in pairs:
        mine, sigmoid = index[key + ("sqrtsoftplus", ours)], index[key + ("sigmoid", ours)]
        engine = index.get(key + ("sqrtsoftplus", "vLLM dsv4_topk"))
        engine_cells = (_cell(engine), f"{engine['device_median'] / mine['device_median']:.2f}x") if engine else ("–", "–")
        shift = f" (bias{key[7]:+g})" if key[7] else ""
        lines.append(f"| {key[0]} / {key[1]}{shift} | {key[4]} | {key[6]} | {_cell(mine)} | {_cell(sigmoid)} | "
                     f"{mine['device_median'] / sigmoid['device_median']:.2f} | {engine_cells[0]} | {engine_cells[1]} |")
    return lines


# The routing stage's targets: route_plan against route() (at most 1.3x up to 256 tokens, 2x beyond); the whole
# stage against vLLM's top-k + align (at least 3x faster); align alone against vLLM's (at least 2x).
PLAN_OVER_ROUTE = ((256, 1.3), (65536, 2.0))
STAGE_SPEEDUP, ALIGN_SPEEDUP = 3.0, 2.0


def stage_comparison(result: dict) -> list[str]:
    """Markdown lines for the routing-stage rows (the ``plan`` preset): each arm's device time and the ratios the
    targets name, with each ratio marked met or not; empty when the run has no stage rows."""
    index = {(r["label"], r["tokens"], r["arm"]): r for r in result["rows"] if "device_median" in r}
    shapes = list(dict.fromkeys((r["label"], r["tokens"]) for r in result["rows"]
                                if r["arm"] == "moe_routing.route_plan(out=)"))
    if not shapes:
        return []
    lines = ["", "The routing stage (top-k + blocks plan at vLLM's default block size), device time (µs, median ± "
             "drift) and the targets' ratios (✓ met, ✗ not):", "",
             "| shape | T | route(out=) | route_plan(out=) | plan / route | vLLM top-k + align | vLLM / route_plan "
             "| align | vLLM align | vLLM align / align |", "|---|---|---|---|---|---|---|---|---|---|"]

    def ratio(numerator, denominator, bound, at_most):
        if numerator is None or denominator is None:
            return "–"
        value = numerator["device_median"] / denominator["device_median"]
        return f"{value:.2f}x {'✓' if (value <= bound if at_most else value >= bound) else '✗'}"

    for label, tokens in shapes:
        get = lambda arm: index.get((label, tokens, arm))  # noqa: E731
        route_row, plan_row = get("moe_routing.route(out=)"), get("moe_routing.route_plan(out=)")
        vllm_stage, ours_align, vllm_align = get("vLLM top-k + align"), get("moe_routing.align"), \
            get("vLLM moe_align_block_size")
        bound = next(b for t, b in PLAN_OVER_ROUTE if tokens <= t) if tokens <= PLAN_OVER_ROUTE[-1][0] else None
        lines.append(f"| {label} | {tokens} | {_cell(route_row)} | {_cell(plan_row)} | "
                     f"{ratio(plan_row, route_row, bound, True) if bound else '–'} | {_cell(vllm_stage)} | "
                     f"{ratio(vllm_stage, plan_row, STAGE_SPEEDUP, False)} | {_cell(ours_align)} | "
                     f"{_cell(vllm_align)} | {ratio(vllm_align, ours_align, ALIGN_SPEEDUP, False)} |")
    return lines


def plot(result: dict, path: Path) -> None:
    """µs per call against T, log-log, one line per arm, one panel per expert configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if "device_median" in r]
    panels = list(dict.fromkeys(r["label"] for r in rows))
    cols = min(3, len(panels))
    fig, axes = plt.subplots((len(panels) + cols - 1) // cols, cols, figsize=(5.2 * cols, 4 * ((len(panels) + cols - 1) // cols)),
                             squeeze=False)
    for ax, label in zip(axes.flat, panels):
        for arm in dict.fromkeys(r["arm"] for r in rows if r["label"] == label):
            points = sorted((r["tokens"], r["device_median"]) for r in rows if r["label"] == label and r["arm"] == arm)
            if len(points) < 2 and arm != "moe_routing.route(out=)":
                continue
            style = dict(linewidth=2.5) if arm.startswith("moe_routing") else dict(linewidth=1.2, alpha=0.8)
            if arm in ("bytes floor", "empty kernel"):
                style.update(linestyle="--", color="gray" if arm == "bytes floor" else "black")
            ax.plot(*zip(*points), marker="o", markersize=3, label=arm, **style)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_ylim(bottom=0.3)  # below any launch: the bytes floor of small T is off the chart
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("tokens T")
        ax.set_ylabel("µs per call (graph replay)")
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"moe-routing vs baselines on {result['gpu']} ({result['date'][:10]})", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(result: dict, out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "bench.json", "markdown": out / "bench.md", "plot": out / "bench.png"}
    paths["json"].write_text(json.dumps(result, indent=1))
    paths["markdown"].write_text(markdown(result))
    plot(result, paths["plot"])
    return paths

