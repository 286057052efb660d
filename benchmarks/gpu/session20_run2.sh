#!/usr/bin/env bash
# GPU session 20, run 2: candidate kernel v19 (this tree): decode sizes (T <= 256, one row on one warp, <= 256
# experts, K <= 8, 32-bit keys) select by K rounds of one warp-wide 32-bit max (REDUX) over each thread's keys
# sorted in registers. Baseline: HEAD's kernel (v18) on the rule's tile; also the tree's kernel with rounds=0.
# Prediction (run 1's probe: unsorted rounds 64/6 1.75 vs 1.88, 256/8 1.97 vs 2.18; sorted lists take ~3 ALU
# levels off each round's chain): 256/8 T = 1 ~1.85-1.95 us, 64/6 ~1.70, grouped 4 of 8 2.3-2.4 (its group stage
# stays), 384/8 and 512/8 unchanged (not rounds: > 256 experts).
set -o pipefail
source benchmarks/gpu/setup.sh
git show HEAD:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v18.py
date +%T
timeout 240 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v18.py --tokens 1 128 --rounds 5 --jobs 12 \
  --out $OUT 2>&1 | tee $OUT/plan_sweep_v19_decode_s20_run2.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v19_decode_s20_run2.json
date +%T
timeout 150 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v18.py --huge --tokens 1 128 --rounds 3 \
  --jobs 12 --out $OUT 2>&1 | tee $OUT/plan_sweep_v19_decode_rows_s20_run2.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v19_decode_rows_s20_run2.json
date +%T
timeout 120 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v18.py --huge --softmax --tokens 1 128 \
  --rounds 3 --jobs 12 --out $OUT 2>&1 | tee $OUT/plan_sweep_v19_decode_softmax_s20_run2.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v19_decode_softmax_s20_run2.json
date +%T
