#!/usr/bin/env bash
# GPU session 19, run 2 (at 1e9b558, kernel v17): run 1 again, leaner. Run 1's census printed only failures and was
# stopped at 200 s beside eight compiling processes (none failed; how many ran is unknown), and its A/B compiled
# every arm of --ab --grouped (v16's lane-per-row 64-group plans take minutes each) until its limits. Here: the
# census with --verbose (its "ok" lines feed --skip); the A/B only the rule against v16 on the rule's tile
# (--huge's arm filter) at 1, 128, 2048, 8192 and 65536 tokens, compiled beside the census, timed alone after it.
# Prediction as run 1's: equal at 1-2048 tokens, LARGE (8192) 0-10% slower, HUGE (65536) faster.
set -o pipefail
source benchmarks/gpu/setup.sh
git show cd40f62:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v16.py
git show cd40f62:src/moe_routing/kernels/_common.py > /tmp/common_v16.py
SWEEP="python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v16.py --ab-common /tmp/common_v16.py --huge \
  --grouped --grouping 64:8 --experts 256 --tokens 1 128 2048 8192 65536 --budget-s 100 --rounds 4"
date +%T
for i in 0 1 2 3 4; do ( s=$(date +%s); timeout 280 $SWEEP --warm $i/5 --out /tmp/warm$i > /tmp/warm$i.log 2>&1; \
  echo "warm $i: rc=$? after $(( $(date +%s) - s )) s" ) & done
( s=$(date +%s); timeout 250 python3 benchmarks/probes/plan_census.py --where BLOCK_GROUPS=64 --jobs 11 --verbose \
    > $OUT/plan_census_64_groups_v17_s19_run2.txt 2>&1; echo "rc=$? after $(( $(date +%s) - s )) s" \
    >> $OUT/plan_census_64_groups_v17_s19_run2.txt ) &
wait
date +%T
grep -c "^ok" $OUT/plan_census_64_groups_v17_s19_run2.txt; grep -v "^ok" $OUT/plan_census_64_groups_v17_s19_run2.txt | tail
timeout 150 $SWEEP --out $OUT 2>&1 | tee $OUT/plan_sweep_v17_64_groups_s19_run2.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v17_64_groups_s19_run2.json
date +%T
