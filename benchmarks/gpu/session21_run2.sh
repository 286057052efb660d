#!/usr/bin/env bash
# GPU session 21, run 2: kernel v20 as shipped. Run 1 (v20 handing over sigmoid_scores of every expert): decode
# 8-14% faster than v19, grouped equal, but 512 experts and grouped rows 9-18% slower from 1024 tokens (the quick
# path's instructions: 983 against v19's 756 at 512 / 8). Now the scores handed over are the keys' own window
# sigmoids (sigmoid_scores' bits where normal; a pick whose score underflows keeps the window's picks with v19's
# re-read): 528 / 816 / 729 / 252 instructions on the quick path at 256 / 512 / grouped / 64 (v19 516 / 756 / 690 /
# 297). Prediction: decode as run 1 (256 / 8 ~1.63, 64 / 6 ~1.49), grouped 3-5% under v19; from 1024 tokens within
# 3% of v19 at 256 experts, 512 and grouped 3-6% slower at most. (1) Bits against the lane merge on the GPU
# (rounds_bits.py: the PTX sigmoids; scores near 2**-126); (2) decode A/B against v19; (3) 257-3071 tokens;
# (4) the census of the rounds classes (their code changed), bf16 and float32.
set -o pipefail
source benchmarks/gpu/setup.sh
git show HEAD:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v19.py
date +%T
timeout 120 python3 benchmarks/probes/rounds_bits.py --tokens 64 --seeds 4 2>&1 | tee $OUT/rounds_bits_v20_s21_run2.txt | grep -v "differ 0$"
date +%T
timeout 150 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v19.py --tokens 1 128 --rounds 5 --jobs 12 \
  --out $OUT 2>&1 | grep -v " L[0-9]* R[0-9]* W1 \|prefetch=" | tee $OUT/plan_sweep_v20_decode_s21_run2.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v20_decode_s21_run2.json
date +%T
timeout 150 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v19.py --huge --tokens 257 1024 2047 3071 \
  --experts 256 512 --rounds 3 --jobs 14 --budget-s 120 --out $OUT 2>&1 \
  | grep -v "does not apply\|prefetch=" | tee $OUT/plan_sweep_v20_small_s21_run2.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v20_small_s21_run2.json
date +%T
( s=$(date +%s); timeout 100 python3 benchmarks/probes/plan_census.py --where ROUNDS=True --jobs 15 \
    > $OUT/plan_census_rounds_v20_s21_run2.txt 2>&1; \
  echo "rc=$? after $(( $(date +%s) - s )) s" >> $OUT/plan_census_rounds_v20_s21_run2.txt )
grep -v "^ok" $OUT/plan_census_rounds_v20_s21_run2.txt | tail -6; grep -c "^ok" $OUT/plan_census_rounds_v20_s21_run2.txt
date +%T
( s=$(date +%s); timeout 100 python3 benchmarks/probes/plan_census.py --float32 --where ROUNDS=True --jobs 15 \
    > $OUT/plan_census_float32_rounds_v20_s21_run2.txt 2>&1; \
  echo "rc=$? after $(( $(date +%s) - s )) s" >> $OUT/plan_census_float32_rounds_v20_s21_run2.txt )
grep -v "^ok" $OUT/plan_census_float32_rounds_v20_s21_run2.txt | tail -6; grep -c "^ok" $OUT/plan_census_float32_rounds_v20_s21_run2.txt
date +%T
