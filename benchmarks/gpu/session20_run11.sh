#!/usr/bin/env bash
# GPU session 20, run 11: the MEDIUM class split at 3072 tokens (MEDIUM_3K); below it, sigmoid rows of 256 or 512
# experts (grouped too) on 16-bit logits take the SMALL class's one-row rounds tile (runs 8-9: 7-21% faster at
# 2048-3072, 6% slower for 256 / 8 at 4095). The rule against v18 on its tile at 2048 / 2560 / 3071 (changed)
# and 3072 (unchanged: MEDIUM_3K). Prediction: 256 / 8 3.3 / 3.7 / 4.1 against 3.7 / 4.1 / 4.4 us; 512 / 8 and
# grouped 10-20% faster; 384 / 8 unchanged. Then the grouped eager rows again (run 4's drifted 30-40%).
set -o pipefail
source benchmarks/gpu/setup.sh
git show HEAD~4:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v18.py
date +%T
timeout 200 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v18.py --huge --tokens 2048 2560 3071 3072 \
  --experts 256 384 512 --rounds 3 --jobs 14 --budget-s 150 --out $OUT 2>&1 \
  | grep -v "does not apply\|prefetch=" | tee $OUT/plan_sweep_v19_medium_s20_run11.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v19_medium_s20_run11.json
date +%T
mkdir -p $OUT/eager_grouped
timeout 100 moe-routing bench --shape 256/8/8:4 --tokens 1,128 --rounds 5 \
  --arms "moe_routing.route(out=),moe_routing.route,torch.max(dim=-1),empty kernel" --out $OUT/eager_grouped 2>&1 | tail -14
date +%T
