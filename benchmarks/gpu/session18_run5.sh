#!/usr/bin/env bash
# GPU session 18, run 5: step-ahead loads for float32 logits from 16384 tokens (no word loads there: the rule gives
# them only to 16-bit rows, so float32 rows keep the tiles' defaults — none on the lane-per-row and two-lane tiles,
# and on the four-lane tile only below 32768). The float32 bound: 256 / 8 at 65536 tokens ran 33.58 us in
# run 4, 2.0x its bytes floor (16.78). 128-384 / 8 at 16384 / 32768 / 65536, the rule's tile against the same with
# them switched. Prediction: the lane-per-row tile gains as the 16-bit word tile did with v13 / v15 (5-10%) if the
# shared-memory bias exchange does not cancel it (v13 found it did on the 16-bit tile before the per-thread bias);
# two lanes as for 16-bit rows (mixed).
set -o pipefail
source benchmarks/gpu/setup.sh
git show HEAD:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_tree.py
date +%T
timeout 300 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_tree.py --huge --prefetch-arms --float32 \
  --budget-s 250 --tokens 16384 32768 65536 --experts 128 160 192 224 256 384 --rounds 3 --jobs 14 --out $OUT 2>&1 \
  | grep -v "does not apply" | tee $OUT/plan_sweep_float32_prefetch_s18_run5.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_float32_prefetch_s18_run5.json
date +%T
