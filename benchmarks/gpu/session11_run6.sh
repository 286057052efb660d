#!/usr/bin/env bash
# GPU session 11, run 6 (the last device minutes): Nsight Compute on the 256/8 T = 65536 lane-per-row kernel
# (which pipe binds: run 1's A/B suggested the ALU pipe) and on the new K = 32 tile at T = 8192; then
# test_plans on the H200 with the final rule, each test named as it ends.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
SHAPES=flat65536,topk32_8192
N=$(python3 benchmarks/probes/ncu_targets.py --shapes $SHAPES | sed -n 's/warmup_launches=//p')
timeout 100 ncu --clock-control none --kernel-name regex:bitonic_kernel --launch-skip $N --set full \
  -f -o $OUT/prof python3 benchmarks/probes/ncu_targets.py --shapes $SHAPES 2>&1 | tail -4
ncu -i $OUT/prof.ncu-rep --page raw --csv > $OUT/raw.csv 2>&1
ncu -i $OUT/prof.ncu-rep --page details --csv > $OUT/details.csv 2>&1
date +%T
timeout 140 python3 -m pytest -v -rf --tb=short -n 14 -p no:cacheprovider -W ignore tests/test_plans.py \
  > $OUT/tests.log 2>&1
grep -E "FAILED|passed|failed" $OUT/tests.log | tail -5; grep -c PASSED $OUT/tests.log
date +%T
