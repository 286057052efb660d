#!/usr/bin/env bash
# GPU session 20, run 3: candidate v19 extended (this tree): rounds up to 512 experts (16 a thread: 16-byte pieces
# joined in registers, the thread's top 8 by tl.topk) and rows of float32 logits / bias read in 16-byte pieces
# (run 2's tree read a [32, 8] float32 tile that Triton's coalescing split over two threads). Baseline: HEAD's
# kernel (v18). Prediction: 384 / 8 T = 1 ~2.05-2.1 us against 2.32 (run 2: equal, no rounds), 512 / 8 ~2.25
# against 2.59; 256 / 8 and below as in run 2 (1.93, 64 / 6 1.67); float32 rows 10-13% faster as bf16 ones.
set -o pipefail
source benchmarks/gpu/setup.sh
git show HEAD:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v18.py
date +%T
timeout 200 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v18.py --tokens 1 128 --rounds 5 --jobs 12 \
  --out $OUT 2>&1 | grep -v " L[0-9]* R[0-9]* W1 " | tee $OUT/plan_sweep_v19_decode_s20_run3.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v19_decode_s20_run3.json
date +%T
timeout 150 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v18.py --huge --tokens 1 128 --rounds 3 \
  --jobs 12 --out $OUT 2>&1 | tee $OUT/plan_sweep_v19_decode_rows_s20_run3.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v19_decode_rows_s20_run3.json
date +%T
timeout 150 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v18.py --huge --float32 --tokens 1 128 \
  --rounds 3 --jobs 12 --out $OUT 2>&1 | tee $OUT/plan_sweep_v19_decode_float32_s20_run3.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v19_decode_float32_s20_run3.json
date +%T
