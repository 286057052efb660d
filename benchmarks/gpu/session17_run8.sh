#!/usr/bin/env bash
# GPU session 17, run 8 (measured, not shipped: NOTES.md v14): step-ahead loads on the flat two-lane word tile
# (16384-32767 tokens for 128-256 experts, from 32768 for 160-256 and 257-512; the rule has them off there since
# v7/v11, measured before v13 read the bias per thread on the lane-per-row tile). An uncommitted rule edit switches
# them on (`c["PREFETCH"] = True` for flat WORDS tiles with LANES == 2); the arms switch them back. Prediction: no
# gain (the two-lane tile still exchanges its bias through shared memory, which v13 found was what kept step-ahead
# loads from paying). Then the census of the 30 flat two-lane classes with step-ahead loads (9 of them new with the
# edit), as far as the time goes.
set -o pipefail
source benchmarks/gpu/setup.sh
git show HEAD:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_tree.py
date +%T
timeout 110 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_tree.py --huge --prefetch-arms \
  --tokens 16384 32768 --experts 128 192 256 384 --rounds 5 --jobs 12 --out $OUT 2>&1 \
  | grep -v "does not apply" | tee $OUT/plan_sweep_two_lane_prefetch_s17_run8.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_two_lane_prefetch_s17_run8.json
date +%T
timeout 80 python3 benchmarks/probes/plan_census.py --only flat --where LANES=2 --where PREFETCH=True --jobs 15 \
  --verbose > $OUT/plan_census_flat_two_lane_prefetch_s17_run8.txt 2>&1
f=$OUT/plan_census_flat_two_lane_prefetch_s17_run8.txt; echo "== $f: $(grep -c '^ok' $f) ok, $(grep -c '^FAILED' $f) failed"
date +%T
