#!/usr/bin/env bash
# GPU session 12, run 1: rank selection (_select_by_rank, RANK) against the rule's tiles at decode sizes
# (plan_sweep --ab, every arm checked bit for bit against the rule first); then the one-pass bisect map.
# Before the run: git show 48023e1:src/moe_routing/kernels/_bitonic.py > bench_baseline_v9.py (v9, untracked).
set -o pipefail
source benchmarks/gpu/setup.sh
nvidia-smi --query-gpu=name,clocks.sm,driver_version --format=csv,noheader
date +%T
python3 benchmarks/probes/plan_sweep.py --ab bench_baseline_v9.py --tokens 1 128 --jobs 12 --out $OUT --budget-s 240 \
  --tile "W1 rank" --tile "W2 rank" --tile "W4 rank" --tile "G4 W1 rank" --tile "G4 W2 rank" --tile "G4 W4 rank" \
  2>&1 | grep -v "does not apply" | tee $OUT/ab.txt
date +%T
timeout 230 python3 benchmarks/probes/one_pass_bisect.py 2>&1 | tee $OUT/bisect.txt
date +%T
