#!/usr/bin/env bash
# GPU session 12, run 4: the minimal reshape kernel (is v9's wrong group score Triton's?), then grouped
# 512 / 20 (8 groups, 4 kept) in one pass (v10's rule) against the same tile in two passes (v9's) and v1.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 120 python3 benchmarks/probes/reshape_repro.py 2>&1 | tee $OUT/reshape.txt
date +%T
timeout 200 python3 benchmarks/probes/plan_sweep.py --wide-topk --experts 512 --rounds 3 --jobs 6 --out $OUT 2>&1 \
  | tee $OUT/wide_grouped.txt
date +%T
