#!/usr/bin/env bash
# GPU session 24, run 4 (ran at commit 863e0a1; the kernel code since differs only in refactors with equal SASS): kernel
# v23 as shipped (run 3's code but the four-lane tiles back on v22's step, and DENSE_OUT
# on the lane-per-row tiles only: their SASS equals v22's but for the final stores, and the lane-per-row, two-lane
# and decode plans equal runs 1 and 3's, each checked by its SASS hash). The census of every class no run has passed
# (326: the lane-per-row plans with DENSE_OUT are new classes), then the targets table. Prediction: none fails; the
# targets table as run 3's but for 8192 tokens (256 / 8 about 6.8 us, v22's tile code) and decode within drift.
set -o pipefail
source benchmarks/gpu/setup.sh
mkdir -p $OUT/targets
date +%T
( s=$(date +%s); timeout 280 python3 benchmarks/probes/plan_census.py --jobs 15 \
    --skip benchmarks/results/plan_census_*.txt > $OUT/plan_census_v23_s24_run4.txt 2>&1; \
  echo "rc=$? after $(( $(date +%s) - s )) s" >> $OUT/plan_census_v23_s24_run4.txt )
grep "FAILED\|failed\|rc=" $OUT/plan_census_v23_s24_run4.txt | head -20; grep -c "^ok" $OUT/plan_census_v23_s24_run4.txt
date +%T
ARMS="moe_routing.route(out=),moe_routing.route(out=) via Python,moe_routing.route,empty kernel,torch.max(dim=-1),straightforward Triton"
timeout 230 moe-routing bench --preset targets --arms "$ARMS" --out $OUT/targets 2>&1 | tail -32
date +%T
