#!/usr/bin/env bash
# GPU session 19, run 3 (kernel v17). Runs 1-2 left: the A/B (v16's 64-group HUGE plan compiled for over 280 s on
# this host, twice, and the timing phase met it first) and 5 census classes (1024 experts and kernel v1's 640
# softmax, 64 groups; stopped at 250 s). (1) Those 5 classes (--skip run 2's file). (2) v17 against v16 at 256 / 8 in
# 64 groups of 4, 8 kept, at 1, 128, 2048 and 8192 tokens (the rule's tile on both kernels; compiled first, beside
# the census). (3) v17's HUGE plans timed through route(), 64:8 beside 8:4 (the same kernel code up to 16 groups),
# at 16384 and 65536 tokens: what 64 groups cost over 8 now (v16's first call there compiled for minutes).
# Prediction: (2) equal within drift at 1-2048, LARGE 0-10% slower; (3) 64:8 10-30% over 8:4 (8 rounds of max and
# min over 64 group scores a row, against 64 compares).
set -o pipefail
source benchmarks/gpu/setup.sh
R=benchmarks/results
git show cd40f62:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v16.py
git show cd40f62:src/moe_routing/kernels/_common.py > /tmp/common_v16.py
SWEEP="python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v16.py --ab-common /tmp/common_v16.py --huge \
  --grouped --grouping 64:8 --experts 256 --tokens 8192 2048 128 1 --budget-s 100 --rounds 4"
date +%T
for i in 0 1 2 3 4 5 6 7; do timeout 200 $SWEEP --warm $i/8 --out /tmp/warm$i > /tmp/warm$i.log 2>&1 & done
( s=$(date +%s); timeout 200 python3 benchmarks/probes/plan_census.py --where BLOCK_GROUPS=64 --jobs 5 --verbose \
    --skip $R/plan_census_64_groups_v17_s19_run2.txt > $OUT/plan_census_64_groups_rest_v17_s19_run3.txt 2>&1; \
  echo "rc=$? after $(( $(date +%s) - s )) s" >> $OUT/plan_census_64_groups_rest_v17_s19_run3.txt ) &
wait
date +%T
cat $OUT/plan_census_64_groups_rest_v17_s19_run3.txt
timeout 120 $SWEEP --out $OUT 2>&1 | tee $OUT/plan_sweep_v17_64_groups_s19_run3.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v17_64_groups_s19_run3.json
date +%T
mkdir -p $OUT/groups64
timeout 100 moe-routing bench --shape 256/8/64:8 --shape 256/8/8:4 --tokens 16384,65536 --rounds 3 \
  --arms "moe_routing.route(out=),empty kernel" --out $OUT/groups64 2>&1 | tail -12
date +%T
