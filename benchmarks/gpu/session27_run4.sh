#!/usr/bin/env bash
# GPU session 27, run 4 (at the commit that adds this script): kernel v26 as shipped — the four-lane tail of run 1 and
# STORE_FIRST by the rule (run 3's variant as a switch; SASS equal to run 3's arms, compiled here). The rule against the
# same plans with STORE_FIRST off, on run 3's rows and on rows no run measured (128 / 160 experts, 12288 tokens, no
# bias, float32 logits, 512 / 8 at 65536 on two lanes); then the census of the classes STORE_FIRST makes.
# Prediction: run 3's rows within its drift of run 3 (256 / 8 at 4096 ~8% faster, 8192 1-2%); the new rows 0-3% faster,
# none slower beyond drift; the census passes.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
(cd benchmarks/probes && timeout 250 python3 constexpr_ab.py --jobs 12 --arm "after_redo=STORE_FIRST:0" \
  --shape 256/8/8192 256/8/4096 256/8/12288 128/8/8192 160/8/8192 384/8/16384 256/8/8192/nobias 256/8/8192/float32 \
          256/8/12288/8/4 512/8/65536 384/8/65536 256/8/65536/8/4 2>&1 | tee $OUT/store_first_rule_s27_run4.txt)
date +%T
(cd benchmarks/probes && W="--where STORE_FIRST=True"; \
  timeout 140 python3 plan_census.py --jobs 15 $W > $OUT/plan_census_v26sf_s27_run4.txt 2>&1; echo "rc=$?" >> $OUT/plan_census_v26sf_s27_run4.txt; \
  timeout 110 python3 plan_census.py --jobs 15 --float32 $W > $OUT/plan_census_float32_v26sf_s27_run4.txt 2>&1; echo "rc=$?" >> $OUT/plan_census_float32_v26sf_s27_run4.txt)
grep -c "^ok" $OUT/plan_census_*v26sf_s27_run4.txt; grep -h "FAILED\|rc=" $OUT/plan_census_*v26sf_s27_run4.txt | head
date +%T
