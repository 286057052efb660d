"""Static instruction counts of the shipped kernels, compiled for sm_90 here (no GPU needed).

Run: python benchmarks/probes/sass_counts.py [--baseline FILE]    (prints instructions per thread and per
     logit by kind; with FILE, an earlier kernels/_bitonic.py, also its counts of v7's lane-merge tiles)
     python benchmarks/probes/sass_counts.py --path-mix [--baseline FILE]    (v12's per-logit counts)
     python benchmarks/probes/sass_counts.py --bias-exchange [--baseline FILE]    (v13's shared-memory exchange)
Uses the ptxas and cuobjdump that Triton's wheel carries; counts are the installed Triton's (the last
lines name its version: run it under 3.6 and 3.8 to compare their layouts, NOTES.md v6).

Per-logit counts of the bitonic kernel's key paths come from a copy of kernels/_bitonic.py with the
streaming loop unrolled and one path forced (``path_variant``), so that every instruction a lane
executes for one row appears once in the binary.
"""

import collections
import re
import subprocess
import tempfile
import time
from pathlib import Path

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kernel_source import bitonic_kernel_from_source
from moe_routing.call import check_call
from moe_routing.kernels.launch import bitonic_plan, rounds_plan

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
RUNTIME = {"logits_ptr": "*bf16", "bias_ptr": "*fp32", "stride_l_row": "i32", "weights_ptr": "*fp32",
           "ids_ptr": "*i32", "stride_w_row": "i32", "stride_w_col": "i32", "stride_i_row": "i32",
           "stride_i_col": "i32", "num_rows": "i32", "scale": "fp32"}
ALU = {"ISETP", "SEL", "FSEL", "LOP3", "SHF", "IMNMX", "VIMNMX", "VIMNMX3", "FSETP", "PLOP3", "FMNMX", "IADD3",
       "PRMT", "LEA"}


@triton.jit
def _float64_max_min(x_ptr, y_ptr):
    a = tl.load(x_ptr)
    b = tl.load(x_ptr + 1)
    tl.store(y_ptr, tl.maximum(a, b))
    tl.store(y_ptr + 1, tl.minimum(a, b))


def _sass(compiled) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        return subprocess.run([str(BIN / "cuobjdump"), "-sass", f.name], capture_output=True, text=True).stdout


def float64_max_min():
    """What a float64 max/min becomes on sm_90 (there is no DMNMX: a DSETP and selects)."""
    compiled = triton.compile(ASTSource(_float64_max_min, {"x_ptr": "*fp64", "y_ptr": "*fp64"}, {}),
                              target=GPUTarget("cuda", 90, 32), options={"num_warps": 1})
    ops = [line.split("*/", 1)[1].strip().split(" ")[0] for line in _sass(compiled).splitlines()
           if "*/" in line and any(k in line for k in ("MNMX", "SETP", "SEL"))]
    print("float64 max + min on sm_90:", ", ".join(ops))


def path_variant(path: str, source: str | None = None):
    """A copy of the bitonic kernel module (``source``: another version's text): "window" or "exact" (loop
    unrolled, only that key path), or "filtered exact" (as shipped, but the exact keys also use the run
    filter)."""
    from moe_routing.kernels import _bitonic

    source = Path(_bitonic.__file__).read_text() if source is None else source

    def patch(pattern, replacement, count):  # every edit must find its text: a probe must not go quietly wrong
        nonlocal source
        source, found = re.subn(pattern, replacement, source)
        assert found == count, (pattern, found)

    if path == "filtered exact":
        patch(r"CHUNK, 1, (False|EXACT_KEYS),(\s+)PREFETCH", r"CHUNK, GROUP, \1,\2PREFETCH", 2)
    else:
        patch(re.escape("for step in range(1, STEPS):"), "for step in tl.static_range(1, STEPS):", 1)
        patch(re.escape("for load in range("), "for load in tl.static_range(", 1)  # the group stage
        patch(r"\n    (el)?if usable:\n", r"\n    \1if True:\n" if path == "window" else r"\n    \1if False:\n", 1)
        patch(re.escape("if tl.max(floored.to(tl.int32), axis=0) > 0:"), "if False:", 1)
    return bitonic_kernel_from_source(source, f"bitonic_{path.replace(' ', '_')}_{abs(hash(source))}")


_PLAIN_STEP_LOAD = """    return tl.load(row_base + expert[None], mask=read, other=0.0)"""
_MEMBER_STEP_LOADS = """    parts = ()
    for m in tl.static_range(CHUNK):  # one load per chunk member: [ROWS, LANES, 1, GROUP]
        e1, p1, r1 = _step_experts(row_ok, lane, tl.arange(0, 1) + m, within, step, kept, NUM_EXPERTS,
                                   GROUP_SIZE, LANES, CHUNK, GROUP)
        parts = parts + (tl.load(row_base + e1[None], mask=r1, other=0.0),)
    for level in tl.static_range(5):  # side by side, as the word loads' pieces
        if (1 << level) < CHUNK:
            joined = ()
            for pair in tl.static_range(CHUNK >> (level + 1)):
                a = parts[2 * pair]
                both = tl.permute(tl.join(a, parts[2 * pair + 1]), (0, 1, 4, 2, 3))
                joined = joined + (tl.reshape(both, (a.shape[0], a.shape[1], 2 * a.shape[2], a.shape[3])),)
            parts = joined
    return parts[0]"""


def member_loads_variant():
    """A copy of the bitonic kernel whose plain step loads are one load per chunk member (as v6's word
    loads are one per 16 bytes), which leaves Triton's coalescing no choice of thread layout (NOTES.md
    v6, Triton 3.8). Not shipped: not timed."""
    from moe_routing.kernels import _bitonic

    source = Path(_bitonic.__file__).read_text()
    assert source.count(_PLAIN_STEP_LOAD) == 1
    return bitonic_kernel_from_source(source.replace(_PLAIN_STEP_LOAD, _MEMBER_STEP_LOADS), "bitonic_member_loads")


def _versions(baseline: str | None) -> list:
    """(name, source) of the kernels to count: the tree's (source None) and, given, an earlier _bitonic.py file."""
    return [("tree", None)] + ([(baseline, Path(baseline).read_text())] if baseline else [])


def _rule_plans_256(first_class: int = 0):
    """(groups, kept, class name, plan) of the rule's plans for 256 / 8 with aligned bf16 rows, flat and 4 of 8
    groups, for every token class from ``first_class`` up."""
    import torch

    from moe_routing.kernels.launch import CLASS_NAMES, choose_plan

    for groups, kept in ((1, 1), (8, 4)):
        call = check_call(torch.zeros(1, 256, dtype=torch.bfloat16), 8, "sigmoid", torch.zeros(256), groups, kept,
                          True, 1.0, None)
        for tclass in range(first_class, len(CLASS_NAMES)):
            yield groups, kept, CLASS_NAMES[tclass], choose_plan(call, tclass, wide_loads=True, biased=True)


def lane_merge_counts(baseline: str | None = None):
    """Kernel v7's lane merge (NOTES.md v7): instructions of the window-key path of the decode tiles
    (256/8 with 16 and 32 lanes, 64/6 with 8 lanes; one warp) and registers of the four-lane tile (256/8,
    8 rows, runs of 4, step-ahead loads), for the tree's kernel and for ``baseline`` (a kernels/_bitonic.py
    file, e.g. v6's)."""
    import torch

    for name, source in _versions(baseline):
        window = path_variant("window", source)
        for experts, topk, lanes in ((256, 8, 16), (256, 8, 32), (64, 6, 8)):
            call = check_call(torch.zeros(1, experts), topk, "sigmoid", torch.zeros(experts), 1, 1, True, 1.0, None)
            plan = bitonic_plan(call, lanes, 1, 1, 1, 1, True)
            print(f"lane merge, {name}: {experts}/{topk} decode, window path only:", end=" ")
            count(plan._replace(kernel=window), experts)
        call = check_call(torch.zeros(1, 256), 8, "sigmoid", torch.zeros(256), 1, 1, True, 1.0, None)
        four = bitonic_plan(call, 4, 8, 1, 4, 1, True)
        if source is not None:
            four = four._replace(kernel=bitonic_kernel_from_source(source, f"bitonic_baseline_{abs(hash(source))}"))
        print(f"lane merge, {name}: four-lane tile, registers {registers(four)}")


def _compile(plan, register_cap: bool = False):
    """The plan's kernel compiled for sm_90; ``register_cap``: with the plan's ``maxnreg`` as the launcher passes it
    (the older counts here were made without it)."""
    signature = {**RUNTIME, **{name: "constexpr" for name in plan.constexprs}}
    attrs = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]], (2,): [["tt.divisibility", 16]]}
    options = {"num_warps": plan.num_warps}
    if register_cap and plan.maxnreg is not None:
        options["maxnreg"] = plan.maxnreg
    return triton.compile(ASTSource(plan.kernel, signature, plan.constexprs, attrs),
                          target=GPUTarget("cuda", 90, 32), options=options)


def _resource_usage(compiled) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        return subprocess.run([str(BIN / "cuobjdump"), "-res-usage", f.name], capture_output=True, text=True).stdout


def registers(plan) -> int:
    """Registers per thread that ptxas allocated for the plan's kernel."""
    return int(_resource_usage(_compile(plan)).split("REG:", 1)[1].split()[0])


def count(plan, experts):
    compiled = _compile(plan)
    sass = _sass(compiled)
    ops = collections.Counter()
    for line in sass.splitlines():
        line = line.strip()
        if line.startswith("/*") and "*/" in line:
            op = line.split("*/", 1)[1].strip().split(" ")[0].split(".")[0]
            if op[:1].isalpha():
                ops[op] += 1
    total = sum(ops.values())
    per_logit = plan.num_warps * 32 / (experts * plan.rows)
    print(f"{plan.name:8s} E={experts} rows={plan.rows} warps={plan.num_warps} "
          f"{plan.constexprs.get('LANES', '')!s:>2} lanes: {total} instructions per thread "
          f"(static; loops counted once), ~{total * per_logit:.0f} per logit if unrolled, "
          f"ALU ~{sum(v for k, v in ops.items() if k in ALU) * per_logit:.0f}, DSETP {ops['DSETP']}, SHFL {ops['SHFL']}")


def _instructions(sass: str) -> list:
    """(address, words) of every instruction of a ``cuobjdump -sass`` listing, in address order."""
    found = (re.match(r"\s*/\*([0-9a-f]+)\*/\s+(.*?);", line) for line in sass.splitlines())
    return [(int(m.group(1), 16), m.group(2).split()) for m in found if m]


def loop_mix(plan, logits_per_iteration: int) -> None:
    """Instructions per logit, by opcode, in the body of the kernel's longest loop without float64 compares
    (the window keys' streaming loop: one step, ``logits_per_iteration`` logits a thread; the exact keys'
    loop compares with DSETP), as compiled for sm_90."""
    body = []
    lines = _instructions(_sass(_compile(plan)))
    for address, words in lines:  # backward branches close loops; keep the longest body
        target = re.match(r"0x([0-9a-f]+)", words[-1]) if words[-2:-1] == ["BRA"] or "BRA" in words[:2] else None
        if target and int(target.group(1), 16) < address:
            start = int(target.group(1), 16)
            candidate = [w for a, w in lines if start <= a <= address]
            if len(candidate) > len(body) and not any("DSETP" in " ".join(w) for w in candidate):
                body = candidate
    ops = collections.Counter((w[1] if w[0].startswith("@") else w[0]) for w in body)
    print(f"window keys' loop: {len(body)} instructions, {len(body) / logits_per_iteration:.1f} per logit")
    for op, n in ops.most_common():
        print(f"  {op:24s} {n / logits_per_iteration:5.2f} per logit")


def path_mix(baseline: str | None = None) -> None:
    """The window path (unrolled) of the rule's plans for 256 / 8 flat and 256 / 8 / 4 of 8 grouped (aligned bf16
    rows) from the MEDIUM class up, per logit: all instructions, FMNMX, FSETP + FSEL (v12's counts), for the
    tree's kernel and for ``baseline`` (an earlier kernels/_bitonic.py)."""
    from moe_routing.kernels.launch import MEDIUM

    for name, source in _versions(baseline):
        window = path_variant("window", source)
        for groups, kept, class_name, plan in _rule_plans_256(MEDIUM):
            ops = collections.Counter((words[1] if words[0].startswith("@") else words[0]).split(".")[0]
                                      for _, words in _instructions(_sass(_compile(plan._replace(kernel=window)))))
            per_logit = plan.num_warps * 32 / (256 * plan.rows)
            c = plan.constexprs
            print(f"{name}: 256 / 8, {groups} groups, {kept} kept, {class_name:8s} "
                  f"(L{c['LANES']} R{plan.rows} G{c['GROUP']}{' onepass' if c['ONE_PASS'] else ''}): "
                  f"{sum(ops.values()) * per_logit:.1f} "
                  f"per logit, FMNMX {ops['FMNMX'] * per_logit:.2f}, FSETP + FSEL "
                  f"{(ops['FSETP'] + ops['FSEL']) * per_logit:.2f}")


def weight_loads(baseline: str | None = None) -> None:
    """The weights' re-read of the K chosen logits in the rule's 256 / 8 plans (flat and 4 of 8 groups, every token
    class, aligned bf16 rows): how many 2-byte loads, and how many of them are issued before the first one's value
    is used (1: one after another; NOTES.md "v13 candidates"), for the tree's kernel and for ``baseline``."""
    for name, source in _versions(baseline):
        kernel = None if source is None else bitonic_kernel_from_source(source, f"bitonic_baseline_{abs(hash(source))}")
        for groups, kept, class_name, plan in _rule_plans_256():
            lines = [words for _, words in _instructions(_sass(_compile(
                plan if kernel is None else plan._replace(kernel=kernel))))]
            loads = [i for i, words in enumerate(lines) if any(w.startswith("LDG.E.U16") for w in words)]
            target = next(w for w in lines[loads[0]] if w.startswith("R")).rstrip(",")
            use = next(j for j in range(loads[0] + 1, len(lines)) if not any(w.startswith("LDG") for w in lines[j])
                       and target in (w.rstrip(",") for w in lines[j][1:]))
            print(f"{name}: 256 / 8, {groups} groups, {kept} kept, {class_name:8s} (L{plan.constexprs['LANES']} "
                  f"R{plan.rows}): {len(loads)} two-byte loads, {sum(i < use for i in loads)} issued before the "
                  f"first use")


def bias_exchange(baseline: str | None = None) -> None:
    """Kernel v13: the rule's 256 / 8 plans (flat and 4 of 8 groups, aligned bf16 rows) from the MEDIUM class up, with
    step-ahead loads as the rule has them and switched, compiled with the rule's register cap: instructions, the
    shared-memory exchange's barriers, stores and loads, global loads, shuffles, registers and stack bytes, for the
    tree's kernel and for ``baseline``."""
    from moe_routing.kernels.launch import MEDIUM

    for name, source in _versions(baseline):
        kernel = None if source is None else bitonic_kernel_from_source(source, f"bitonic_baseline_{abs(hash(source))}")
        for groups, kept, class_name, plan in _rule_plans_256(MEDIUM):
            c = plan.constexprs
            for prefetch in (c["PREFETCH"], not c["PREFETCH"]):
                variant = plan._replace(constexprs={**c, "PREFETCH": prefetch})
                if kernel is not None:
                    variant = variant._replace(kernel=kernel)
                compiled = _compile(variant, register_cap=True)
                ops = collections.Counter((words[1] if words[0].startswith("@") else words[0]).split(".")[0]
                                          for _, words in _instructions(_sass(compiled)))
                usage = _resource_usage(compiled)
                print(f"{name}: 256 / 8, {groups} groups, {kept} kept, {class_name:8s} (L{c['LANES']} R{plan.rows}"
                      f"{' words' if c['WORDS'] else ''}{' onepass' if c['ONE_PASS'] else ''}, prefetch={int(prefetch)}"
                      f"{' rule' if prefetch == c['PREFETCH'] else ''}): {sum(ops.values())} instructions, BAR "
                      f"{ops['BAR']}, STS + STSM {ops['STS'] + ops['STSM']}, LDS {ops['LDS']}, LDG {ops['LDG']}, SHFL "
                      f"{ops['SHFL']}, registers {usage.split('REG:', 1)[1].split()[0]}, stack "
                      f"{usage.split('STACK:', 1)[1].split()[0]} B")


if __name__ == "__main__":
    import argparse

    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", metavar="FILE", help="an earlier kernels/_bitonic.py for lane_merge_counts")
    ap.add_argument("--loop-mix", action="store_true", help="only the opcode mix per logit of the streaming loop "
                    "of the rule's 256 / 8 tile at T >= 65536 (a lane per row, runs of 4, word loads: 32 logits a "
                    "step; T >= 16384 until v11 split that class)")
    ap.add_argument("--path-mix", action="store_true", help="only the window path's instructions per logit of the "
                    "rule's 256 / 8 plans, flat and grouped 4 of 8, from the MEDIUM class up (with --baseline: also "
                    "that kernel's; kernel v12)")
    ap.add_argument("--weight-loads", action="store_true", help="only the weights' re-read of the chosen logits: "
                    "its loads and how many are issued before the first use (with --baseline: that kernel's too; v13)")
    ap.add_argument("--bias-exchange", action="store_true", help="only the step's bias exchange of the rule's 256 / 8 "
                    "plans from the MEDIUM class up, with and without step-ahead loads (with --baseline: that "
                    "kernel's too; v13)")
    args = ap.parse_args()
    if args.bias_exchange:
        bias_exchange(args.baseline)
        raise SystemExit
    if args.weight_loads:
        weight_loads(args.baseline)
        raise SystemExit
    if args.path_mix:
        path_mix(args.baseline)
        raise SystemExit
    if args.loop_mix:
        from moe_routing.kernels.launch import HUGE_64K, choose_plan

        call = check_call(torch.zeros(1, 256, dtype=torch.bfloat16), 8, "sigmoid", torch.zeros(256), 1, 1, True, 1.0,
                          None)
        loop_mix(choose_plan(call, HUGE_64K, wide_loads=True, biased=True), 32)
        raise SystemExit
    lane_merge_counts(args.baseline)

    call = check_call(torch.zeros(1, 256), 8, "sigmoid", torch.zeros(256), 1, 1, True, 1.0, None)
    count(rounds_plan(call, 0, 1, 1), 256)  # v1 at decode: one row on one warp, no loop
    count(bitonic_plan(call, 16, 1, 1), 256)
    # per logit at T = 65536 (a lane per row): v2's exact keys, v3's window keys without / with the run filter
    exact, window = path_variant("exact"), path_variant("window")
    for name, kernel, group in (("exact", exact, 1), ("window", window, 1), ("window", window, 4)):
        print(f"{name} keys, runs of {group}:", end=" ")
        count(bitonic_plan(call, 1, 256, 8, group)._replace(kernel=kernel), 256)
    shipped = bitonic_plan(call, 1, 256, 8, 4)
    filtered = shipped._replace(kernel=path_variant("filtered exact"))
    print("registers per thread (lane per row, runs of 4): shipped", registers(shipped),
          "- if the exact keys used the run filter too", registers(filtered))
    # grouped (DeepSeek-V3: 8 groups of 32, 4 kept) with a lane per row, the rule's HUGE tile: the group
    # stage plus the masked stream, per logit, against the flat path on the same tile
    grouped = check_call(torch.zeros(1, 256), 8, "sigmoid", torch.zeros(256), 8, 4, True, 1.0, None)
    for name, c in (("flat", call), ("grouped 4 of 8", grouped)):
        print(f"{name}, window keys, lane per row, 32 rows:", end=" ")
        count(bitonic_plan(c, 1, 32, 1, 4)._replace(kernel=window), 256)
        print(f"{name}: registers per thread of the shipped tile", registers(bitonic_plan(c, 1, 32, 1, 4)))
    # v5: the lane-per-row tile reading 16-bit logits as 64-bit words, against the same tile's plain loads
    # (the shipped kernel as compiled, loops counted once), with and without step-ahead loads
    for words in (False, True):
        for prefetch in (False, True):
            plan = bitonic_plan(call, 1, 32, 1, 4, 1, prefetch, words)
            print(f"flat, lane per row, words={int(words)} prefetch={int(prefetch)}: registers {registers(plan)};",
                  end=" ")
            count(plan, 256)
    # v6: the grouped lane-per-row tile in two passes, in one pass, in one pass with word loads (the
    # rule's plan for aligned bf16 rows at T >= 16384); the one-pass loop is unrolled, so its counts are
    # per row, not per step. Compile times from scratch (Triton's cache bypassed) on this machine.
    triton.knobs.compilation.always_compile = True
    for one_pass, words in ((False, False), (True, False), (True, True)):
        plan = bitonic_plan(grouped, 1, 32, 1, 4, 1, False, words, one_pass)
        started = time.perf_counter()
        _compile(plan)
        seconds = time.perf_counter() - started
        print(f"grouped 4 of 8, lane per row, one_pass={int(one_pass)} words={int(words)}: compiled in {seconds:.1f} s;"
              f" registers {registers(plan)};", end=" ")
        count(plan, 256)
    triton.knobs.compilation.always_compile = False
    # the step loads' thread layout is Triton's choice: compare one load per chunk member (not shipped)
    members = member_loads_variant()
    for name, plan in (("flat, lane per row", bitonic_plan(call, 1, 32, 1, 4)),
                       ("flat, four lanes", bitonic_plan(call, 4, 8, 1, 4)),
                       ("flat, decode (16 lanes)", bitonic_plan(call, 16, 1, 1, 1, 1, True))):
        for label, variant in (("shipped loads", plan), ("a load per chunk member", plan._replace(kernel=members))):
            print(f"Triton {triton.__version__}, {name}, {label}: registers {registers(variant)};", end=" ")
            count(variant, 256)
    float64_max_min()
