"""Sum Nsight Compute's per-SASS-line counters over every profiled launch in one source-page CSV.

Run: python benchmarks/probes/ncu_source_summary.py SOURCE.csv [--compact] > SUMMARY.tsv
where SOURCE.csv is ``ncu -i REPORT --page source --csv --print-source sass``. With many launches of a short
kernel (``ncu_targets.py --repeat``) that page repeats the whole SASS listing per launch (tens of MB); this
keeps one line per instruction, in address order, with every numeric column summed over the launches
(columns that are zero throughout are dropped), so stall samples of a ~1 µs kernel add up to a profile.
``--compact``: only instructions that were executed or sampled, and only the executions, the samples and
the stall reasons of all samples (benchmarks/results/ncu_decode_v7_*.tsv).
"""

import csv
import sys
from collections import defaultdict


def number(text: str):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def main(path: str, compact: bool = False) -> None:
    header = None
    sums: dict[tuple, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    order: dict[tuple, int] = {}
    launches = 0
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if "Address" in row and "Source" in row:  # a launch's listing starts
                header = row
                launches += 1
                continue
            if header is None or len(row) != len(header):
                continue
            record = dict(zip(header, row))
            key = (record["Address"], record["Source"])
            order.setdefault(key, len(order))
            for name, value in record.items():
                if name not in ("Address", "Source") and (v := number(value)) is not None:
                    sums[key][name] += v
    columns = sorted({name for line in sums.values() for name, v in line.items() if v})
    keys = sorted(order, key=order.get)
    if compact:
        columns = [c for c in columns if c in ("Instructions Executed", "Warp Stall Sampling (All Samples)")
                   or (c.startswith("stall_") and not c.endswith("(Not Issued)"))]
        keys = [k for k in keys if any(sums[k].get(c) for c in columns[:2])]
    print(f"# {launches} launches summed", file=sys.stderr)
    print("\t".join(["Address", "Source"] + columns))
    for key in keys:
        print("\t".join([key[0], key[1]] + [f"{sums[key].get(c, 0):g}" for c in columns]))


if __name__ == "__main__":
    main(sys.argv[1], "--compact" in sys.argv[2:])
