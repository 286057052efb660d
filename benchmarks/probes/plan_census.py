"""Every tile class the rule can choose, run once on this machine and judged against float64.

Run: python benchmarks/probes/plan_census.py [--jobs N] [--limit N] [--float32]   (GPU; the interpreter runs it,
     slowly; --float32: float32 rows, whose plans differ since kernel v16 and whose kernels compile apart)
     python benchmarks/probes/plan_census.py --count --skip benchmarks/results/plan_census_*.txt
         (the classes no recorded run has passed, by family; give the same --skip to a run to take only those.
         A line counts whatever kernel version wrote it: the file names say which)

Why: kernels v6-v9 computed wrong group scores on the H200 for one-pass tiles that no test shape
reached, while Triton's interpreter (CI) computed them right (NOTES.md v10). Which compiled code a plan
gets depends on the shapes of its tensors, i.e. on its tile, not on the call's exact sizes. This probe
walks a grid of calls (32-1024 experts, K = 1-32, flat and grouped, sigmoid with and without bias,
softmax) through ``launch.all_plans`` (every token class, unaligned and two-pass variants), keeps the
first call of each *tile class* (the plan's constexprs with the problem sizes replaced by what shapes a
tensor: list length, lanes, runs, rows, warps, flags, group blocks, steps, padding, key family), and routes
2 x rows + 3 tokens with that plan forced: random bf16 logits with a NaN row, an -inf row, an all-tied
row and a row of ties inside groups, with the bias as drawn (window keys) and shifted by +8 (exact keys).
Each result is checked fully written and against the float64 semantics (``measure.verify``: ids exact
outside near ties, weights to 2e-6). ``--jobs N`` splits the classes over N processes (compiling dominates).
Prints a line per class (ok with its fingerprint, or FAILED with the plan and what failed) and a summary.
"""

import argparse
import hashlib

import parts as parts_module
import torch
import triton

from moe_routing.call import check_call
from moe_routing.kernels import launch
from moe_routing.kernels.launch import all_plans, one_pass_step
from moe_routing.measure.verify import verify

EXPERTS = (32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 640, 1024)
GROUPINGS = ((1, 1), (2, 1), (4, 1), (4, 2), (8, 3), (8, 4), (16, 4), (32, 4), (64, 8))
TOPKS = (1, 2, 4, 6, 8, 9, 12, 16, 17, 20, 24, 32)
SCORINGS = (("sigmoid", True), ("sigmoid", False), ("softmax", False))
DTYPES = {False: torch.bfloat16, True: torch.float32}  # the logits' dtype, by --float32
SIZES = ("TOPK", "NUM_EXPERTS", "TOPK_GROUP", "NUM_GROUPS", "GROUP_SIZE", "BLOCK_EXPERTS")


def tile_class(call, plan, biased: bool) -> tuple:
    """What shapes a plan's tensors: its constexprs without the problem's sizes, plus the steps of a row,
    whether the last step is padded, the key family, whether groups can be eliminated and the register cap."""
    c = plan.constexprs
    grouped = call.topk_group < call.num_groups
    ignored = SIZES + (("LOG2_CHUNK", "RENORMALIZE") if grouped else ("LOG2_CHUNK", "RENORMALIZE", "BLOCK_GROUPS",
                                                                      "BLOCK_GROUP_SIZE", "GROUPS_PER_LOAD"))
    # group blocks shape only the group stage; ROUNDS (v19), HANDOVER (v20) and STORE_FIRST (v26) only when on,
    # CHECKED_STREAM (v25) only when off, so that the classes they left alone keep the fingerprints earlier runs
    # recorded (their SASS is v18's: NOTES.md v19; v24's: v25; v25's or v26's tail: v26)
    rest = tuple((k, v) for k, v in c.items() if k not in ignored
                 and not (k in ("ROUNDS", "HANDOVER", "STORE_FIRST") and not v) and not (k == "CHECKED_STREAM" and v))
    if plan.name == "bitonic":
        span = c["LANES"] * c["CHUNK"] * c["GROUP"]
        steps = triton.cdiv(call.experts, span)
        per_step = one_pass_step(plan, call)[0] if c["ONE_PASS"] else 0
        return ("bitonic", rest, plan.num_warps, steps if c["ONE_PASS"] else min(steps, 2), call.experts % span != 0,
                per_step, call.experts > 512, biased, grouped, call.experts % c["GROUP"] != 0, plan.maxnreg)
    return ("rounds", rest, plan.num_warps, grouped, biased)


def family(key: tuple) -> str:
    """"flat", "one-pass", "two-pass" (grouped bitonic) or "rounds" (kernel v1) of a tile class."""
    if key[0] == "rounds":
        return "rounds"
    if not key[8]:
        return "flat"
    return "one-pass" if key[5] else "two-pass"


def census(float32: bool = False):
    """[(tile class, call arguments, plan name, plan)], first call of each class; ``float32``: the plans the rule
    chooses for float32 logits (kernel v16), whose classes are keyed apart (the kernels compile for float32)."""
    seen = {}
    for experts in EXPERTS:
        for groups, kept in GROUPINGS:
            if experts % groups:
                continue
            for topk in TOPKS:
                if topk > kept * experts // groups:
                    continue
                for scoring, biased in SCORINGS:
                    args = (experts, topk, scoring, biased, groups, kept)
                    try:
                        call = check_call(torch.zeros(1, experts, dtype=DTYPES[float32]), topk, scoring,
                                          torch.zeros(experts) if biased else None, groups, kept, True, 1.0, None)
                    except (ValueError, TypeError):
                        continue
                    for name, plan in all_plans(call, not float32, biased, float32).items():
                        key = tile_class(call, plan, biased) + (("float32",) if float32 else ())
                        seen.setdefault(key, (args, name, plan))
    return [(key, *value) for key, value in seen.items()]


def inputs(experts, groups, tokens, device, seed, dtype=torch.bfloat16):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(tokens, experts, generator=gen) * 2
    size = experts // groups
    logits[0, ::3] = float("nan")
    logits[1] = float("-inf")
    logits[2] = 0.5  # every expert tied
    if groups > 1:
        logits[3, :size] = logits[3, size:2 * size]  # two groups with the same values
    bias = torch.randn(experts, generator=gen) * 0.5
    return logits.to(dtype).to(device), bias.to(device)


def check(args, name, plan, device, dtype=torch.bfloat16):
    """Failure descriptions of one plan (empty when every run is right)."""
    experts, topk, scoring, biased, groups, kept = args
    tokens = 2 * plan.rows + 3
    logits, bias = inputs(experts, groups, tokens, device, experts * 131 + topk, dtype)
    failures = []
    for shift in ((0.0, 8.0) if biased and scoring == "sigmoid" else (None,)):
        b = None if shift is None else bias + shift
        call = check_call(logits, topk, scoring, b, groups, kept, True, 2.5, None)
        weights = torch.full((tokens, topk), float("nan"), device=device)
        ids = torch.full((tokens, topk), -7, dtype=torch.int32, device=device)
        try:
            launch(call, logits, b, weights, ids, plan=plan)
        except Exception as error:  # noqa: BLE001 - a census reports, it does not stop
            failures.append(f"bias+{shift}: {type(error).__name__}: {str(error)[:100]}")
            continue
        if torch.isnan(weights).any() or (ids == -7).any():
            failures.append(f"bias+{shift}: outputs not fully written")
            continue
        verdict = verify(weights, ids, logits, topk, scoring_func=scoring, correction_bias=b, num_expert_group=groups,
                         topk_group=kept, routed_scaling_factor=2.5)
        if not verdict.ok:
            failures.append(f"bias+{shift}: {verdict.mismatched_rows} mismatched, {verdict.malformed_rows} malformed "
                            f"of {verdict.rows} rows, weight error {verdict.max_weight_error:.2e}")
    return failures


def class_label(call_args, name: str, float32: bool = False) -> str:
    """A class as the census prints it: its first call's sizes and the all_plans name it was met as."""
    experts, topk, scoring, biased, groups, kept = call_args
    dtype = " float32" if float32 else ""
    return f"{experts}/{topk} {groups}:{kept} {scoring}{'' if biased else ' no bias'} {name}{dtype}"


def fingerprint(key: tuple) -> str:
    """A short name of a tile class itself (its label names only the first call met in it, and that call can
    move to another class when the rule changes: session 16's step-ahead loads at 32768 tokens did)."""
    return hashlib.sha1(repr(key).encode()).hexdigest()[:10]


def recorded_as(key: tuple) -> set[str]:
    """The fingerprints an "ok" line may give this class: its own, and for a bitonic class without v19's rounds
    the one session 20's first runs printed, whose key still held ``("ROUNDS", False)`` (the same code)."""
    names = {fingerprint(key)}
    if key[0] == "bitonic" and "ROUNDS" not in dict(key[1]):
        names.add(fingerprint((key[0], key[1] + (("ROUNDS", False),)) + key[2:]))
    return names


def ok_line(call_args, name: str, key: tuple, float32: bool = False) -> str:
    """The line printed for a class that passed (``--skip`` reads them back), with its fingerprint."""
    return f"ok {class_label(call_args, name, float32)} [{fingerprint(key)}]"


def passed_before(paths) -> tuple[set, set]:
    """(fingerprints, labels) of the classes earlier runs' "ok" lines passed. Lines from before session 16 have
    no fingerprint: they count by label, which is right only while the rule keeps each label's class."""
    fingerprints, labels = set(), set()
    for path in paths:
        with open(path) as lines:
            for line in lines:
                if line.startswith("ok "):
                    line = line.strip()
                    if line.endswith("]") and " [" in line:
                        fingerprints.add(line.rsplit(" [", 1)[1][:-1])
                    else:
                        labels.add(line)
    return fingerprints, labels


def matches(plan, where: list) -> bool:
    """Whether the plan's constexprs have every ``NAME=VALUE`` of ``where`` (values compared as text)."""
    return all(str(plan.constexprs.get(name)) == value for name, value in (w.split("=", 1) for w in where))


def main():
    ap = argparse.ArgumentParser()
    parts_module.add_arguments(ap)
    ap.add_argument("--limit", type=int, help="only the first N classes")
    ap.add_argument("--only", choices=("flat", "one-pass", "two-pass", "rounds"), action="append",
                    help="only these families of classes: flat bitonic, grouped one pass, grouped two passes, "
                         "kernel v1 (repeatable; default all)")
    ap.add_argument("--stride", type=int, default=1, help="every N-th class only (a sample)")
    ap.add_argument("--offset", type=int, default=0, help="with --stride: start at this class (--offset 1 "
                    "--stride 4 takes a quarter that --stride 4 alone leaves out)")
    ap.add_argument("--plans", metavar="PREFIX", help="only classes first met as a plan whose all_plans name starts "
                    "with PREFIX (e.g. \"huge\": the token classes from 16384 up)")
    ap.add_argument("--verbose", action="store_true", help="with --count: list the classes. A run prints an "
                    "\"ok\" line for every class that passed whether given or not (since session 19: a run without "
                    "them leaves no record for --skip)")
    ap.add_argument("--skip", metavar="FILE", nargs="+", action="extend", default=[],
                    help="leave out the classes earlier runs passed (their \"ok\" lines in FILE ...): the rest "
                         "of a run that a timeout cut; with --count, what no run has passed "
                         "(--count --skip benchmarks/results/plan_census_*.txt)")
    ap.add_argument("--where", metavar="NAME=VALUE", action="append", default=[],
                    help="only classes whose plan has this constexpr value (repeatable; e.g. --where LANES=1 "
                         "--where WORDS=True --where PREFETCH=True: the classes a kernel change touched)")
    ap.add_argument("--count", action="store_true", help="only count the classes (--verbose: list them)")
    ap.add_argument("--float32", action="store_true", help="float32 logits: the classes of the plans the rule "
                    "chooses for them (kernel v16; the default is bf16 rows)")
    args = ap.parse_args()
    classes = [c for c in census(args.float32) if (not args.only or family(c[0]) in args.only)
               and (not args.plans or c[2].startswith(args.plans)) and matches(c[3], args.where)]
    classes = classes[args.offset::args.stride]
    fingerprints, labels = passed_before(args.skip)
    unseen = [c for c in classes if not recorded_as(c[0]) & fingerprints]
    classes = [c for c in unseen if f"ok {class_label(c[1], c[2], args.float32)}" not in labels][:args.limit]
    if args.count:
        kinds = {}
        for key, *_ in classes:
            kinds[family(key)] = kinds.get(family(key), 0) + 1
        print(f"{len(classes)} tile classes: {kinds}")
        if args.verbose:  # which ones: their labels and plans
            for key, call_args, name, plan in classes:
                print(f"  {class_label(call_args, name, args.float32)} {plan.name} rows={plan.rows} "
                      f"warps={plan.num_warps} [{fingerprint(key)}]")
        if args.skip:  # the trap session 17 met: classes a rule change made, wearing an old run's label
            print(f"({len(unseen) - len(classes)} more counted as passed by label only, from runs before session "
                  f"16: a rule change since then can have given those labels to new classes; run what a change "
                  f"touched with --where, which --skip of fingerprinted files only then counts exactly)")
        return
    part, parts = parts_module.my_part(args)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    mine = classes[part::parts]
    failed = 0
    for key, call_args, name, plan in mine:
        failures = check(call_args, name, plan, device, DTYPES[args.float32])
        if not failures:
            print(ok_line(call_args, name, key, args.float32), flush=True)
        if failures:
            failed += 1
            print(f"FAILED {class_label(call_args, name, args.float32)} {plan.name} rows={plan.rows} warps={plan.num_warps} "
                  f"{dict(plan.constexprs)}: {'; '.join(failures)}", flush=True)
    print(f"part {part}/{parts}: {len(mine)} tile classes run, {failed} failed", flush=True)


if __name__ == "__main__":
    main()
