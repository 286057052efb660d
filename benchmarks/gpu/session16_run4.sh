#!/usr/bin/env bash
# GPU session 16, run 4: (1) kernel v13's rule at the flat expert counts run 3 left out (160 and 224: the lane-per-row
# word tile from 32768 tokens; the rule gives it step-ahead loads there without a measurement) against v12, with and
# without step-ahead loads. Prediction: as 192 / 8 and 128 / 8 in run 3, 2-5% faster; if not, the rule narrows.
# (2) The census of the 6 tile classes kernel v13 touched (lane-per-row word tiles with step-ahead loads, flat),
# chosen by their constexprs: their labels are old classes' labels, so --skip would have counted them as passed
# (plan_census now prints a fingerprint of the class). (3) What is left of the two-pass census (117 classes of
# --stride 4 --offset 1 and 6 slow HUGE ones), as far as the time goes.
set -o pipefail
source benchmarks/gpu/setup.sh
R=benchmarks/results
git show cdc3f15:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v12.py
date +%T
timeout 170 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v12.py --huge \
  --tokens 65536 32768 --experts 224 160 --rounds 5 --jobs 8 --out $OUT 2>&1 \
  | grep -v "does not apply" | tee $OUT/sweep_v13_160_224.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v13_160_224_s16_run4.json
date +%T
timeout 90 python3 benchmarks/probes/plan_census.py --where LANES=1 --where WORDS=True --where PREFETCH=True \
  --where ONE_PASS=False --jobs 6 --verbose > $OUT/census_flat_words_prefetch_v13.txt 2>&1
date +%T
timeout 270 python3 benchmarks/probes/plan_census.py --only two-pass --skip $R/plan_census_*.txt --jobs 15 --verbose \
  > $OUT/census_twopass_rest_v13.txt 2>&1
for f in $OUT/census_*.txt; do echo "== $f: $(grep -c '^ok' $f) ok, $(grep -c '^FAILED' $f) failed"; grep -E "^FAILED|Error" $f | head -10; done
date +%T
