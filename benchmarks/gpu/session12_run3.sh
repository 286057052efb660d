#!/usr/bin/env bash
# GPU session 12, run 3 (kernel v10: one-pass group scores without the reshape; lists of 32 keys back on one
# pass): the bisect again (every one-pass tile class of the rule, and the grid), the grouped kernel tests and
# test_plans' grouped shapes on the H200 (each test named as it ends), then v10 against v9 on the grouped
# four-lane tiles (T = 2048, 8192), whose group scores now skip the reshape.
# Before the run: git show 48023e1:src/moe_routing/kernels/_bitonic.py > bench_baseline_v9.py (v9, untracked).
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 200 python3 benchmarks/probes/one_pass_bisect.py --rule --jobs 7 > $OUT/rule.txt 2>&1 &
timeout 200 python3 benchmarks/probes/one_pass_bisect.py --jobs 7 > $OUT/grid.txt 2>&1 &
wait
date +%T
echo "== rule"; cat $OUT/rule.txt; echo "== grid"; cat $OUT/grid.txt
timeout 180 python3 -m pytest -v --tb=short -n 14 -p no:cacheprovider -W ignore tests/test_grouped_kernel.py \
  tests/test_plans.py -k "grouped_kernel or 256-8-8-4 or 512-20 or 128-4-2-1 or 96-6 or 160-6-8-3-sigmoid" \
  > $OUT/tests.log 2>&1
grep -E "FAILED|ERROR" $OUT/tests.log | head; grep -c PASSED $OUT/tests.log; tail -1 $OUT/tests.log
date +%T
timeout 130 python3 benchmarks/probes/plan_sweep.py --ab bench_baseline_v9.py --grouped --tokens 2048 8192 --jobs 8 \
  --out $OUT 2>&1 | tee $OUT/ab.txt
date +%T
