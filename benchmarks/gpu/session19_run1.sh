#!/usr/bin/env bash
# GPU session 19, run 1 (at 1e9b558, kernel v17, never run on the GPU before). (1) The census's 225 classes with 64
# groups (v17 made them new code: the kept groups in rounds), the census's last class among them (256/9 64:8 sigmoid
# without bias, HUGE: 9 minutes of compiling until v17), then the 36 float32 classes v16 chose (flat, four lanes, no
# step-ahead loads), none run on the GPU yet. (2) v17 against v16 at 256 / 8 in 64 groups of 4, 8 kept, at the target
# token counts: v16 = cd40f62's _bitonic.py with its _common.py (--ab-common). The arms are compiled first, beside
# the census (CPU), and timed alone after it. Prediction: equal (within drift) from 1 to 2048 tokens (the decode and
# four-lane tiles spread the pairs over lanes either way); LARGE (8192) 0-10% slower (+50% static instructions); HUGE
# (16384-65536) faster, the lane-per-row thread runs 15504 instructions against 48408.
set -o pipefail
source benchmarks/gpu/setup.sh
R=benchmarks/results
git show cd40f62:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v16.py
git show cd40f62:src/moe_routing/kernels/_common.py > /tmp/common_v16.py
SWEEP="python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v16.py --ab-common /tmp/common_v16.py --grouped \
  --grouping 64:8 --experts 256 --budget-s 200 --rounds 4"
date +%T
for i in 0 1 2 3 4 5 6 7; do timeout 330 $SWEEP --warm $i/8 --out /tmp/warm$i > /tmp/warm$i.log 2>&1 & done
( s=$(date +%s); timeout 200 python3 benchmarks/probes/plan_census.py --where BLOCK_GROUPS=64 --jobs 8 \
    > $OUT/plan_census_64_groups_v17_s19_run1.txt 2>&1; echo "rc=$? after $(( $(date +%s) - s )) s" \
    >> $OUT/plan_census_64_groups_v17_s19_run1.txt
  s=$(date +%s); timeout 120 python3 benchmarks/probes/plan_census.py --float32 --only flat --where PREFETCH=False \
    --where LANES=4 --jobs 8 > $OUT/plan_census_float32_v16_s19_run1.txt 2>&1; echo "rc=$? after \
$(( $(date +%s) - s )) s" >> $OUT/plan_census_float32_v16_s19_run1.txt ) &
wait
date +%T
tail -3 /tmp/warm*.log
tail -4 $OUT/plan_census_64_groups_v17_s19_run1.txt $OUT/plan_census_float32_v16_s19_run1.txt
timeout 230 $SWEEP --out $OUT 2>&1 | grep -v "does not apply" | tee $OUT/plan_sweep_v17_64_groups_s19_run1.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v17_64_groups_s19_run1.json
date +%T
