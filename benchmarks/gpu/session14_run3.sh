#!/usr/bin/env bash
# GPU session 14, run 3: the targets table with kernel v12 (bench harness, the arms of session 10's table);
# v12 against v11 again at 16384 and 24576 tokens (run 2 measured the grouped two-lane tile 1.6% slower at
# 16384); a third quarter of the two-pass grouped tile classes on the H200 (census).
set -o pipefail
source benchmarks/gpu/setup.sh
git show 82b7ed4:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v11.py
mkdir -p $OUT/targets
date +%T
ARMS="moe_routing.route(out=),moe_routing.route(out=) via Python,moe_routing.route,empty kernel,torch.max(dim=-1),straightforward Triton"
timeout 170 moe-routing bench --preset targets --arms "$ARMS" --out $OUT/targets 2>&1 | tail -32
date +%T
timeout 120 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v11.py --huge --tokens 16384 24576 --experts 256 \
  --jobs 8 --out $OUT 2>&1 | grep -v "does not apply" | tee $OUT/sweep.txt
date +%T
timeout 200 python3 benchmarks/probes/plan_census.py --only two-pass --stride 4 --offset 2 --jobs 15 --verbose \
  > $OUT/census_twopass_offset2.txt 2>&1
echo "== census two-pass offset 2: $(grep -c '^ok' $OUT/census_twopass_offset2.txt) ok, $(grep -c '^FAILED' $OUT/census_twopass_offset2.txt) failed"
grep -E "^FAILED|Error" $OUT/census_twopass_offset2.txt | head -10
date +%T
