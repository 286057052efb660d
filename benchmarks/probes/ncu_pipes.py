"""Per-kernel pipe use, issue, occupancy and the main stall reasons from an Nsight Compute raw export.

Run: python benchmarks/probes/ncu_pipes.py RAW.csv [--out FILE.tsv]
     (RAW.csv from ``ncu -i REPORT --page raw --csv``; one column per profiled launch, in launch order)
Prints one line per metric; ``--out`` also writes them as a TSV (NOTES.md v9 cites
``results/ncu_v9_session11.tsv``).
"""

import argparse
import csv

METRICS = [
    ("duration (us)", "gpu__time_duration.sum", 1),
    ("issue slots busy %", "sm__inst_issued.avg.pct_of_peak_sustained_elapsed", 1),
    ("achieved occupancy %", "sm__warps_active.avg.pct_of_peak_sustained_active", 1),
    ("ALU pipe %", "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active", 1),
    ("FMA pipe %", "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active", 1),
    ("XU (MUFU) pipe %", "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active", 1),
    ("FP64 pipe %", "sm__inst_executed_pipe_fp64.avg.pct_of_peak_sustained_active", 1),
    ("LSU pipe %", "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active", 1),
    ("L1/TEX throughput %", "l1tex__throughput.avg.pct_of_peak_sustained_active", 1),
    ("DRAM throughput %", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", 1),
    ("registers per thread", "launch__registers_per_thread", 1),
]
STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("raw")
    ap.add_argument("--out")
    args = ap.parse_args()
    rows = list(csv.reader(open(args.raw)))
    header, data = rows[0], rows[2:]
    column = {name: i for i, name in enumerate(header)}

    def values(metric, factor=1.0):
        return [float(row[column[metric]].replace(",", "")) * factor for row in data]

    lines = [["kernel"] + [row[column["Kernel Name"]][:20] + f" #{row[column['ID']]}" for row in data]]
    for label, metric, factor in METRICS:
        if metric in column:
            lines.append([label] + [f"{v:.2f}" for v in values(metric, factor)])
    stalls = [(name[len(STALL_PREFIX):-len(STALL_SUFFIX)], values(name)) for name in header
              if name.startswith(STALL_PREFIX) and name.endswith(STALL_SUFFIX)]
    stalls.sort(key=lambda item: -max(item[1]))
    for name, vals in stalls[:6]:
        lines.append([f"stall {name} (warps per issue)"] + [f"{v:.2f}" for v in vals])
    for line in lines:
        print("\t".join(line))
    if args.out:
        with open(args.out, "w") as f:
            f.write("".join("\t".join(line) + "\n" for line in lines))


if __name__ == "__main__":
    main()
