#!/usr/bin/env bash
# GPU session 18, run 2 (NOTES.md v15): kernel v15's rule (step-ahead loads for flat rows on the lane-per-row word
# tile in the HUGE class, and for 256 experts on the two-lane word tile there) on the shapes run 1 did not time:
# softmax without bias (160 / 224 / 256 experts) and K = 16 (192 experts: lane-per-row word tile; 256: two lanes),
# each against the rule's tile with them switched off (v14's plan). Also two tiles no rule chooses, for the rows
# two lanes cannot read as whole word steps (160 / 224 experts: two lanes a row, 16-bit loads, with and without
# step-ahead loads). In the background meanwhile, a process each: the census's last class (256/9 64:8 sigmoid
# without bias HUGE, which session 17's run 5 left compiling after 480 s; its compile took ~3 min on the 2-core CI
# machine), timed, and the 3 flat two-lane K = 9 classes without step-ahead loads whose label v15 moved to 32768
# tokens (passed by label only, in v11's session 13).
# Prediction: softmax and K = 16 gain as K = 8 sigmoid did (5-10% on the lane-per-row tile, 1-5% on two lanes);
# the two-lane 16-bit tiles are slower than the word tile with step-ahead loads (more loads per logit).
set -o pipefail
source benchmarks/gpu/setup.sh
R=benchmarks/results
git show HEAD:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_tree.py
date +%T
( s=$(date +%s); timeout 560 python3 benchmarks/probes/plan_census.py --skip $R/plan_census_*.txt --jobs 4 --verbose \
    > $OUT/plan_census_rest_v15_s18_run2.txt 2>&1; echo "rc=$? after $(( $(date +%s) - s )) s" \
    >> $OUT/plan_census_rest_v15_s18_run2.txt ) &
timeout 200 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_tree.py --huge --prefetch-arms --softmax \
  --budget-s 160 --tokens 16384 24576 --experts 160 224 256 --rounds 4 --jobs 12 --out $OUT 2>&1 \
  | grep -v "does not apply" | tee $OUT/plan_sweep_v15_softmax_s18_run2.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v15_softmax_s18_run2.json
date +%T
timeout 200 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_tree.py --huge --prefetch-arms --topk 16 \
  --budget-s 160 --tokens 16384 28672 --experts 192 256 --rounds 4 --jobs 12 --out $OUT 2>&1 \
  | grep -v "does not apply\|4 of 8" | tee $OUT/plan_sweep_v15_topk16_s18_run2.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v15_topk16_s18_run2.json
date +%T
timeout 200 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_tree.py --huge --budget-s 160 \
  --tokens 16384 24576 --experts 160 224 --rounds 4 --jobs 12 --tile "L2 R16 W1 G4" --tile "L2 R16 W1 G4 prefetch" \
  --out $OUT 2>&1 | grep -v "does not apply" | tee $OUT/plan_sweep_two_lane_partial_s18_run2.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_two_lane_partial_s18_run2.json
date +%T
wait
cat $OUT/plan_census_rest_v15_s18_run2.txt | tail -5
date +%T
