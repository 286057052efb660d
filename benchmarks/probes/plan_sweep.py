"""Issue-3 tuning sweep on the GPU: forced plans of the shipped kernels, side by side with the rule's choice.

Run: python benchmarks/probes/plan_sweep.py --out DIR [--budget-s 300] [--medium | --grouped | --wide-topk |
     --ab FILE [--ab-common FILE2] [--grouping G:KEPT] [--no-bias | --grouped | --huge [--prefetch-arms]
     [--softmax] [--float32] [--topk K]]] [--tokens T ...] [--experts E ...] [--tile SPEC ...] [--jobs N | --warm I/N]
     (writes plan_sweep.json, prints one line per plan; stops starting new shapes after the budget)

``--ab FILE`` compares kernel versions instead of tiles, at the issue's target shapes: the rule's plan
of the tree, its variants (``ab_arms``), and the same tile run by the bitonic kernel module in FILE
(an earlier version, e.g. ``git show REV:src/moe_routing/kernels/_bitonic.py > FILE``), interleaved
over ``--rounds`` rounds; each line gives the median of the round medians and the same-arm drift (the
spread of that arm's round medians).

Every sigmoid shape is also timed with its bias shifted by +8, which puts the window outside (-4, 4)
and so forces the exact 64-bit keys (kernel v2's selection) on the rule's plan: both encodings side
by side in one run. Grouped shapes also time kernel v1 ("rounds") with its old rule.

With ``--ab``, decode shapes (T <= 256) also time one-warp tiles that hold a whole list per thread
(``decode_tiles``), and ``--tile`` adds any tile of the tree's kernel (``tile_arm``; one equal to the rule's
is timed once). ``--huge`` (kernel v11) times the rule against the baseline kernel on its tile (and,
since session 16, the same with step-ahead loads switched) and the ``--tile`` tiles only, at 16384-65536 tokens
(``--tokens``: those instead; ``--prefetch-arms``: also the tree's kernel on the rule's tile with them switched;
``--softmax``: its flat shapes with softmax scoring and no bias, as Qwen3-MoE and Mixtral route; ``--float32``: with
float32 logits; ``--topk K``: with that K). ``--warm I/N`` only compiles every N-th arm into Triton's cache;
``--jobs N`` runs N such processes first (session 9's scripts ran them from the shell), which turns minutes of
one-by-one compiling on the GPU machine into one. ``--focus`` (session 24) keeps only the rule and the baseline kernel
on its tile at the target shapes; ``--dense-arm`` adds the rule's bitonic plan with ``DENSE_OUT`` switched (kernel v23).
``--no-baseline`` (session 25) leaves the baseline kernel's arms out.
"""

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import triton
from kernel_source import bitonic_kernel_from_source
from moe_routing.call import check_call
from moe_routing.kernels import choose_plan, launch
from moe_routing.kernels.launch import (HUGE, LARGE, LATENCY, MEDIUM, MEDIUM_3K, SMALL, bitonic_chunk, bitonic_plan,
                                        one_pass_ok, rounds_ok, rounds_plan, tensor_traits, token_class, two_passes, words_ok)
from moe_routing.measure.bench import Shape, graph_time_us, make_inputs

GRID = {  # (lanes, rows, warps, group) per token class; the LARGE entry serves HUGE too
    LATENCY: [(16, 1, 1, 1), (16, 1, 2, 1), (8, 1, 1, 1), (32, 1, 2, 1), (16, 1, 1, 2), (8, 1, 1, 2)],
    SMALL: [(8, 8, 2, 4), (4, 8, 1, 4), (4, 8, 1, 1), (2, 16, 1, 4), (8, 4, 1, 4), (4, 16, 2, 4), (4, 8, 1, 2)],
    LARGE: [(1, 256, 8, 4), (1, 64, 2, 4), (1, 32, 1, 4), (4, 8, 1, 4), (2, 16, 1, 4), (4, 16, 2, 4), (2, 32, 2, 4),
        (8, 8, 2, 4), (4, 8, 1, 2)],
}
GRID[MEDIUM] = GRID[MEDIUM_3K] = GRID[SMALL]
GROUPED_GRID = {  # (lanes, rows, warps, group, groups per load) per token class (LARGE serves HUGE), 4 of 8 groups
    LATENCY: [(16, 1, 1, 1, 8), (16, 1, 2, 1, 8), (8, 1, 1, 1, 8), (32, 1, 2, 1, 8), (16, 1, 1, 2, 8)],
    SMALL: [(16, 1, 1, 1, 8), (8, 2, 1, 1, 8), (4, 4, 1, 4, 8), (4, 4, 1, 4, 1), (4, 8, 1, 4, 2)],
    LARGE: [(1, 32, 1, 4, 1), (1, 32, 1, 4, 2), (1, 16, 1, 4, 1), (1, 64, 2, 4, 1), (4, 8, 1, 4, 1), (4, 8, 1, 4, 8),
        (2, 16, 1, 4, 1), (4, 16, 2, 4, 2), (1, 32, 1, 2, 1)],
}
GROUPED_GRID[MEDIUM] = GROUPED_GRID[MEDIUM_3K] = GROUPED_GRID[SMALL]
MEDIUM_GRID = [(16, 1, 1, 1), (8, 2, 1, 1), (4, 4, 1, 4), (4, 8, 1, 4), (8, 4, 1, 4), (16, 2, 2, 1)]
WIDE_TOPK_GRID = {  # (lanes, rows, warps, group) per token class, lists of 32 keys (K > 16); LARGE serves 2-4
    LATENCY: [(16, 1, 1, 1), (16, 1, 2, 1), (8, 1, 1, 1), (32, 1, 2, 1)],
    SMALL: [(16, 1, 1, 1), (16, 1, 2, 1), (8, 2, 1, 1), (4, 4, 1, 1)],
    LARGE: [(4, 8, 1, 1), (8, 4, 1, 1), (2, 16, 1, 1), (4, 4, 1, 1), (8, 2, 1, 1), (16, 1, 1, 1), (16, 2, 2, 1),
        (4, 8, 1, 4)],
}


def candidates(call, medium=False):
    yield "rule", choose_plan(call, wide_loads=True)  # the bench's logits are aligned bf16 rows
    tc = token_class(call.tokens)
    if bitonic_chunk(call) > 16:  # K > 16: kernel v1 (the rule before v9) and tiles of 32-key lists
        yield "v1 rounds (old rule)", rounds_plan(call, tc, 8, 8) if call.grouped and tc == HUGE else rounds_plan(call, tc)
        rule = choose_plan(call, wide_loads=True)
        if call.grouped:  # one pass (v10) against the same tile in two passes (v9's rule)
            if rule.constexprs.get("ONE_PASS"):
                yield "rule's tile, two passes", two_passes(rule)
            return
        for lanes, rows, warps, group in WIDE_TOPK_GRID[tc if tc <= SMALL else LARGE]:
            if lanes <= triton.next_power_of_2(triton.cdiv(call.experts, bitonic_chunk(call))):  # every lane a chunk
                yield f"bitonic L{lanes} R{rows} W{warps} G{group}", bitonic_plan(call, lanes, rows, warps, group)
        return
    if call.grouped and not call.softmax:
        yield "v1 rounds (old rule)", rounds_plan(call, tc, 8, 8) if tc == HUGE else rounds_plan(call, tc)
        for lanes, rows, warps, group, per_load in GROUPED_GRID[min(tc, LARGE)]:
            yield (f"bitonic L{lanes} R{rows} W{warps} G{group} P{per_load}",
                   bitonic_plan(call, lanes, rows, warps, group, per_load))
        return
    if medium:
        for lanes, rows, warps, group in MEDIUM_GRID:
            yield f"bitonic L{lanes} R{rows} W{warps} G{group}", bitonic_plan(call, lanes, rows, warps, group)
        return
    if call.grouped or call.softmax:
        for rows, warps in ((1, 1), (1, 2), (2, 2), (4, 4), (8, 4), (8, 8)):
            yield f"rounds rows={rows} warps={warps}", rounds_plan(call, tc, rows, warps)
        return
    for lanes, rows, warps, group in GRID[min(tc, LARGE)]:
        yield f"bitonic L{lanes} R{rows} W{warps} G{group}", bitonic_plan(call, lanes, rows, warps, group)


def load_kernel_file(path: str, common_path: str | None = None):
    """The ``bitonic_kernel`` of a kernel module file (an earlier version of kernels/_bitonic.py), with the helpers
    of ``common_path`` (an earlier kernels/_common.py) where given."""
    common = None if common_path is None else Path(common_path).read_text()
    return bitonic_kernel_from_source(Path(path).read_text(), "bitonic_baseline", common)


def ab_arms(call, baseline, traits):
    """The rule's plan; the same tile with the step-ahead loads switched, without word loads where it has
    them, and in two passes where it has one; and the rule's tile run by the baseline kernel (its own
    constexprs). ``traits``: the inputs' ``launch.tensor_traits`` (word loads, bias, float32 rows)."""
    plan = choose_plan(call, **traits)
    yield "rule", plan
    if plan.name != "bitonic":
        return
    c = plan.constexprs
    yield f"rule's tile, prefetch={int(not c['PREFETCH'])}", plan._replace(
        constexprs={**c, "PREFETCH": not c["PREFETCH"]})
    if c.get("ROUNDS"):  # (v19) the same tile selecting by the lanes' sorts and merges
        yield "rule's tile, rounds=0", plan._replace(constexprs={**c, "ROUNDS": False})
        # (v20) the rounds' weights from the scores handed over, or from the logits re-read (v19's stores)
        yield f"rule's tile, handover={int(not c['HANDOVER'])}", plan._replace(
            constexprs={**c, "HANDOVER": not c["HANDOVER"]})
    if c["WORDS"]:
        yield "rule's tile, words=0", plan._replace(constexprs={**c, "WORDS": False})
    if c["ONE_PASS"]:  # the same tile in two passes (group stage, then the masked stream: kernel v5)
        for prefetch in (c["PREFETCH"], not c["PREFETCH"]):
            twin = two_passes(plan)
            yield f"rule's tile, two passes, prefetch={int(prefetch)}", twin._replace(
                constexprs={**twin.constexprs, "PREFETCH": prefetch})
    params = set(baseline.arg_names)
    known = {k: v for k, v in c.items() if k in params}  # the baseline kernel's own constexprs
    yield "baseline kernel, rule's tile", plan._replace(kernel=baseline, constexprs=known)
    if "PREFETCH" in params:
        yield f"baseline kernel, rule's tile, prefetch={int(not c['PREFETCH'])}", plan._replace(
            kernel=baseline, constexprs={**known, "PREFETCH": not c["PREFETCH"]})
    if token_class(call.tokens) == LATENCY:  # decode tiles whose lanes each hold a whole list in one thread
        for lanes, rows in decode_tiles(call):
            if (lanes, rows, 1) != (c["LANES"], plan.rows, plan.num_warps):
                tile = bitonic_plan(call, lanes, rows, 1, 1, c["GROUPS_PER_LOAD"], c["PREFETCH"])
                yield f"L{lanes} R{rows} W1", tile


def tile_arm(call, spec: str):
    """``--tile``'s plan for this call, or None where it does not apply: SPEC is words such as
    "L2 R16 W1 G4 words" (lanes, rows, warps, run length, P groups per load (default: a whole row), M registers
    per thread at most (ptxas's maxnreg; default its own choice); flags: words, prefetch, onepass, rounds (v19's
    selection by K warp-wide reductions: one row on one warp, ``launch.rounds_ok``),
    handover (with rounds: v20's weights from the scores the rounds hand over))."""
    numbers = {"L": 1, "R": 1, "W": 1, "G": 1, "P": triton.next_power_of_2(call.num_groups), "M": 0}
    flags = set()
    for word in spec.split():
        if word[0] in numbers and word[1:].isdigit():
            numbers[word[0]] = int(word[1:])
        else:
            flags.add(word)
    unknown = flags - {"words", "prefetch", "onepass", "rounds", "handover"}
    assert not unknown, f"--tile: unknown words {unknown}"
    lanes, group = numbers["L"], numbers["G"]
    if (("onepass" in flags and not one_pass_ok(call, lanes, group)) or (call.grouped and call.group_size % group)
            or ("words" in flags and not (words_ok(call, lanes, group) and (not call.grouped or "onepass" in flags)))
            or ("rounds" in flags and not rounds_ok(call, numbers["R"], numbers["W"]))):
        return None
    plan = bitonic_plan(call, lanes, numbers["R"], numbers["W"], group, numbers["P"], "prefetch" in flags,
                        "words" in flags, "onepass" in flags, "rounds" in flags)
    if "handover" in flags:
        plan = plan._replace(constexprs={**plan.constexprs, "HANDOVER": True})
    return plan._replace(maxnreg=numbers["M"] or None)


def decode_tiles(call):
    """One-warp tiles of one list per thread (lanes x rows x CHUNK = 256), at most four steps a row."""
    chunk = bitonic_chunk(call)
    chunks = triton.next_power_of_2(triton.cdiv(call.experts, chunk))
    lanes = min(32, chunks)
    while lanes >= 4 and lanes * 4 >= chunks:
        yield lanes, 256 // (lanes * chunk)
        lanes //= 2


def warm_all(jobs: int) -> None:
    """Run this sweep's command line in ``jobs`` ``--warm`` processes side by side and wait for them: the
    timed run then finds every kernel in Triton's cache."""
    argv = [a for a in sys.argv[1:] if not a.startswith("--jobs=")]
    if "--jobs" in argv:
        at = argv.index("--jobs")
        del argv[at:at + 2]
    workers = [subprocess.Popen([sys.executable, __file__, *argv, "--warm", f"{i}/{jobs}", "--budget-s", "1e9"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(jobs)]
    for worker in workers:
        worker.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument("--medium", action="store_true", help="token counts 512-4096: the medium class's tiles")
    ap.add_argument("--grouped", action="store_true",
                    help="DeepSeek-V3's 4 of 8 groups, every token class (with --ab: its target shapes)")
    ap.add_argument("--ab", metavar="FILE", help="kernel versions at the target shapes (see the docstring)")
    ap.add_argument("--grouping", metavar="G:KEPT", help="with --ab: the grouped shapes with G groups, KEPT kept "
                    "(instead of DeepSeek-V3's 8:4), e.g. 64:8 for kernel v17's group rounds")
    ap.add_argument("--ab-common", metavar="FILE2", help="with --ab: the baseline kernel's helpers from this copy of "
                    "kernels/_common.py (e.g. kernel v16's, whose kept_groups v17 changed; default: the tree's)")
    ap.add_argument("--wide-topk", action="store_true",
                    help="K = 32 (1024 and 256 experts): tiles of 32-key lists against kernel v1; 512 / 20 "
                    "grouped (8 groups, 4 kept): one pass against two")
    ap.add_argument("--softmax", action="store_true",
                    help="with --ab --huge: its flat shapes with softmax scoring and no bias (Qwen3-MoE, Mixtral)")
    ap.add_argument("--no-bias", action="store_true",
                    help="with --ab: sigmoid without bias (beyond 512 experts ranked by the logits since v9)")
    ap.add_argument("--huge", action="store_true",
                    help="with --ab: token counts 16384-65536 (the HUGE classes) for 64 to 512 experts (every flat count with a "
                    "lane-per-row word tile among them) and grouped "
                    "256 / 8 / 4 of 8 (--tokens: those counts instead); arms: the rule, the baseline kernel on its "
                    "tile (with and without step-ahead loads) and the --tile tiles only")
    ap.add_argument("--prefetch-arms", action="store_true",
                    help="with --ab --huge: also the rule's tile with step-ahead loads switched, by the tree's kernel "
                    "(the baseline kernel's is timed with --huge anyway)")
    ap.add_argument("--float32", action="store_true",
                    help="with --ab --huge: its flat shapes with float32 logits (no word loads: 16-bit only)")
    ap.add_argument("--topk", type=int, help="with --ab --huge: this K for its flat rows instead of theirs (6 or 8)")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds of every arm (--ab: 3)")
    ap.add_argument("--tokens", type=int, nargs="*", help="only shapes with these token counts")
    ap.add_argument("--experts", type=int, nargs="*", help="only shapes with these expert counts")
    ap.add_argument("--progress", action="store_true", help="print every round's median as it is measured")
    ap.add_argument("--focus", action="store_true", help="with --ab: only the rule and the baseline kernel on its tile "
                    "(and --dense-arm's arm)")
    ap.add_argument("--dense-arm", action="store_true", help="with --ab: also the rule's bitonic plan with DENSE_OUT "
                    "switched (kernel v23: vector stores into dense outputs)")
    ap.add_argument("--no-baseline", action="store_true", help="with --ab: leave out the baseline kernel's arms (a FILE "
                    "equal to the tree's kernel, when only the tree's arms are compared)")
    ap.add_argument("--tile", action="append", default=[], metavar="SPEC",
                    help='with --ab: also time this tile of the tree\'s kernel, e.g. "L2 R16 W1 G4 words" (tile_arm)')
    ap.add_argument("--warm", metavar="I/N", help="only compile (launch once) every N-th arm from the I-th, into "
                    "Triton's cache, and exit: N such processes side by side compile a sweep's kernels in parallel")
    ap.add_argument("--jobs", type=int, default=1, help="first compile every arm in this many --warm processes")
    args = ap.parse_args()
    if args.jobs > 1 and not args.warm:
        warm_all(args.jobs)
    baseline = load_kernel_file(args.ab, args.ab_common) if args.ab else None
    rounds = args.rounds if args.rounds > 1 or not args.ab else 3
    started = time.time()
    results = []
    warmed = 0
    shapes = [Shape(e, k, t) for e, k in ((256, 8), (384, 8)) for t in (65536, 8192, 1)]
    shapes += [Shape(64, 6, t) for t in (65536, 8192, 1)] + [Shape(512, 8, 65536), Shape(128, 8, 65536)]
    if args.grouped:
        shapes = [Shape(256, 8, t, 8, 4) for t in (65536, 8192, 1, 128, 1024, 2048)]
    if args.medium:
        shapes = [Shape(e, k, t) for e, k in ((256, 8), (384, 8), (64, 6)) for t in (512, 1024, 2048, 4095)]
    if args.ab:
        shapes = [Shape(256, 8, t) for t in (1, 128, 8192, 65536)] + [Shape(384, 8, t) for t in (1, 128, 8192, 65536)]
        shapes += [Shape(64, 6, t) for t in (1, 128, 65536)]
        shapes += [Shape(256, 8, t, 8, 4) for t in (1, 128, 2048, 8192, 65536)]
        shapes += [Shape(512, 8, t) for t in (1, 65536)]  # the longest rows with window keys
    if args.wide_topk:
        shapes = [Shape(1024, 32, t) for t in (1, 128, 1024, 2048, 4096, 8192, 65536)]
        shapes += [Shape(256, 32, t) for t in (1, 8192, 65536)]
        shapes += [Shape(512, 20, t, 8, 4) for t in (2048, 8192, 65536)]  # grouped: one pass or two (v10)
    if args.ab and args.no_bias:
        shapes = [Shape(e, k, t, bias=False) for e, k in ((256, 8), (128, 1), (1024, 8)) for t in (1, 128, 8192, 65536)]
    if args.ab and args.huge:
        counts = tuple(args.tokens or (16384, 32768, 49152, 65536))
        rows = ((256, 8), (384, 8), (512, 8), (128, 8), (160, 8), (192, 8), (224, 8), (64, 6))
        shapes = [Shape(e, args.topk or k, t) for t in counts for e, k in rows]
        shapes += [Shape(256, 8, t, 8, 4) for t in counts]
    if args.ab and args.grouped:  # the grouped target shapes only and the HUGE class's lower counts, largest first
        shapes = [Shape(256, 8, t, 8, 4) for t in (65536, 32768, 16384, 8192, 2048, 128, 1)]
    if args.ab and args.huge and args.softmax:
        shapes = [dataclasses.replace(shape, scoring="softmax", bias=False) for shape in shapes if shape.groups == 1]
    if args.ab and args.huge and args.float32:
        shapes = [dataclasses.replace(shape, dtype=torch.float32) for shape in shapes if shape.groups == 1]
    if args.ab and args.grouping:
        groups, kept = (int(v) for v in args.grouping.split(":"))
        shapes = [dataclasses.replace(shape, groups=groups, topk_group=kept) if shape.groups > 1 else shape
                  for shape in shapes]
    if args.tokens:
        shapes = [shape for shape in shapes if shape.tokens in args.tokens]
    if args.experts:
        shapes = [shape for shape in shapes if shape.experts in args.experts]
    for shape in shapes:
        if time.time() - started > args.budget_s:
            print("budget spent; stopping", flush=True)
            break
        inputs = make_inputs(shape)
        call = check_call(inputs.logits[0], shape.topk, shape.scoring, inputs.bias, shape.groups, shape.topk_group,
                          True, shape.scale, None)
        if baseline is not None:
            traits = tensor_traits(inputs.logits[0], inputs.bias)
            arms = [(name, plan, inputs.bias) for name, plan in ab_arms(call, baseline, traits)]
            if args.huge or args.focus:  # the rule, and its tile run by the FILE's kernel
                arms = [arm for arm in arms if arm[0] == "rule" or arm[0].startswith("baseline kernel, rule's tile")
                        or (args.prefetch_arms and arm[0].startswith("rule's tile, prefetch="))]
            if args.no_baseline:
                arms = [arm for arm in arms if not arm[0].startswith("baseline kernel")]
            rule = arms[0][1]
            if args.dense_arm and rule.name == "bitonic" and "DENSE_OUT" in rule.constexprs:
                dense = not rule.constexprs["DENSE_OUT"]
                arms.append((f"rule's tile, dense={int(dense)}", rule._replace(
                    constexprs={**rule.constexprs, "DENSE_OUT": dense}), inputs.bias))
            for spec in args.tile:
                plan = tile_arm(call, spec)
                if plan is None:
                    print(f"{shape.label} T={shape.tokens}: tile {spec!r} does not apply (not timed)", flush=True)
                elif plan == arms[0][1]:
                    print(f"{shape.label} T={shape.tokens}: tile {spec!r} is the rule's (timed once)", flush=True)
                else:
                    arms.append((f"tile {spec}", plan, inputs.bias))
        else:
            arms = [(name, plan, inputs.bias) for name, plan in candidates(call, args.medium)]
        if not args.medium and not args.ab and not args.wide_topk and not call.softmax and inputs.bias is not None:
            arms.append(("rule, exact keys (bias + 8)", choose_plan(call), inputs.bias + 8.0))
        if args.warm:
            part, parts = (int(v) for v in args.warm.split("/"))
            for name, plan, bias in arms:
                warmed += 1
                if warmed % parts == part:
                    launch(call, inputs.logits[0], bias, inputs.weights, inputs.ids, plan=plan)
            continue
        if args.ab:  # every arm must give the rule's bits before it is timed
            mismatched = set()
            reference = None
            for name, plan, bias in arms:
                if bias is not inputs.bias:
                    continue
                weights, ids = inputs.weights.clone().fill_(-7.0), inputs.ids.clone().fill_(-7)
                try:
                    launch(call, inputs.logits[0], bias, weights, ids, plan=plan)
                except Exception as error:
                    print(f"{shape.label} T={shape.tokens} {name}: FAILED {type(error).__name__} {str(error)[:120]}")
                    mismatched.add(name)
                    continue
                if reference is None:
                    reference = (weights, ids)
                elif not (torch.equal(ids, reference[1]) and torch.equal(weights.view(torch.int32),
                                                                          reference[0].view(torch.int32))):
                    rows = int((ids != reference[1]).any(1).sum())
                    print(f"{shape.label} T={shape.tokens} {name}: MISMATCH against the rule ({rows} rows' ids differ)")
                    mismatched.add(name)
            arms = [arm for arm in arms if arm[0] not in mismatched]
        per_round = {name: [] for name, _, _ in arms}
        replays = {name: [] for name, _, _ in arms}
        for _ in range(rounds):  # arms interleaved: A B C A B C ...
            for name, plan, bias in arms:
                def run(i, plan=plan, bias=bias):
                    launch(call, inputs.logits[i], bias, inputs.weights, inputs.ids, plan=plan)
                try:
                    times = graph_time_us(run, len(inputs.logits), 50, 10)
                except Exception as error:  # a tile that does not compile is recorded, not fatal
                    print(f"{shape.label} T={shape.tokens} {name}: FAILED {type(error).__name__} {str(error)[:120]}")
                    continue
                per_round[name].append(statistics.median(times))
                replays[name] += times
                if args.progress:
                    print(f"  round {len(per_round[name])} {name}: {per_round[name][-1]:.2f} us "
                          f"({time.time() - started:.0f} s)", flush=True)
        for name, medians in per_round.items():
            if not medians:
                continue
            med = statistics.median(medians)
            times = replays[name]
            drift = (max(medians) - min(medians)) / med
            results.append(dict(label=shape.label, tokens=shape.tokens, plan=name, median_us=med,
                                min_us=min(times), max_us=max(times), round_medians_us=medians, drift=drift))
            spread = f"[{min(times):.2f}-{max(times):.2f}]"
            extra = f" drift {100 * drift:.1f}%" if rounds > 1 else ""
            print(f"{shape.label:>20} T={shape.tokens:<6} {name:34s} {med:8.2f} us  {spread}{extra}", flush=True)
        Path(args.out, "plan_sweep.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
