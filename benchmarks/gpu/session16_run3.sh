#!/usr/bin/env bash
# GPU session 16, run 3: kernel v13 as committed (the rule gives the flat lane-per-row word tile step-ahead loads, with
# which the kernel reads each step's bias per thread; one-pass grouped tiles keep v12's bias load) against v12
# (cdc3f15's kernel) on the rule's tile, with and without step-ahead loads, for every flat expert count that takes
# that tile (128-256 experts by 32) at 32768-65536 tokens, 5 interleaved rounds; grouped 256 / 8 / 4 of 8 as the
# unchanged control. Then the census of the tile classes no recorded run has passed among the flat ones (the new
# classes), and the plans' tests for 256 / 8 on the GPU.
# Prediction (run 2): 256 / 8 at 65536 22.2 against 22.8; 192 / 8 18.2 against 18.6; 128 / 8 at 32768 9.9 against
# 10.4, 49152 12.2 against 12.4; 160 and 224 (not measured yet) 2-4% faster; the grouped rows equal.
set -o pipefail
source benchmarks/gpu/setup.sh
R=benchmarks/results
git show cdc3f15:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v12.py
date +%T
timeout 300 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v12.py --huge \
  --tokens 65536 49152 32768 --experts 256 224 192 160 128 --rounds 5 --jobs 14 --out $OUT 2>&1 \
  | grep -v "does not apply" | tee $OUT/sweep_v13.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v13_s16_run3.json
date +%T
timeout 120 python3 benchmarks/probes/plan_census.py --only flat --skip $R/plan_census_*.txt --jobs 12 --verbose \
  > $OUT/census_flat_v13.txt 2>&1
for f in $OUT/census_*.txt; do echo "== $f: $(grep -c '^ok' $f) ok, $(grep -c '^FAILED' $f) failed"; grep -E "^FAILED|Error" $f | head -10; done
date +%T
timeout 130 python3 -m pytest -q -x tests/test_plans.py -k "256-8-1-1-sigmoid-True or word_loads" 2>&1 | tail -3 \
  | tee $OUT/tests.txt
date +%T
