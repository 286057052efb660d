#!/usr/bin/env bash
# GPU session 14, run 5: Nsight Compute on kernel v12's rule at 65536 tokens, grouped (DeepSeek-V3, one pass,
# capped at 128 registers) and flat 256 / 8: pipes, issue, occupancy and stalls (ncu_pipes.py), for the next
# change's counting (NOTES.md v12).
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
SHAPES=grouped65536,flat65536
N=$(python3 benchmarks/probes/ncu_targets.py --shapes $SHAPES | sed -n 's/warmup_launches=//p')
timeout 150 ncu --clock-control none --kernel-name regex:bitonic_kernel --launch-skip $N --set full \
  -f -o $OUT/prof python3 benchmarks/probes/ncu_targets.py --shapes $SHAPES 2>&1 | tail -4
ncu -i $OUT/prof.ncu-rep --page raw --csv > $OUT/raw.csv 2>&1
python3 benchmarks/probes/ncu_pipes.py $OUT/raw.csv --out $OUT/ncu_v12_session14.tsv
rm -f $OUT/raw.csv
date +%T
