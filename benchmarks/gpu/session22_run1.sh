#!/usr/bin/env bash
# GPU session 22, run 1: kernel v21 candidate (working tree) against v20 (HEAD's kernel). Decode plans only
# (ROUNDS): the bias window's min and max by REDUX of order-preserving bits (no float shuffles, no separate
# non-finite reduction); grouped rows ranked in the tile by one REDUX per group (each thread ranks its own group;
# v20: ten dependent shuffle levels); the picks' validity from the last pick; the scores' positivity from a running
# min. Count (SASS of the quick path, sm_90): 256 / 8 466 instructions against 528, grouped 4 of 8 635 against 713.
# Prediction: flat decode 0.05-0.1 us faster (256 / 8 ~1.55-1.6), grouped 0.15-0.3 us faster (~1.75-1.85); the SMALL
# class's rounds rows (257-2047 tokens) a few % faster. (1) Bits on the GPU against the lane merge and against the
# plan without handover (rounds_bits.py; the in-tile groupings first); (2) decode A/B against v20; (3) 257-2047
# tokens; (4) the census of the rounds classes, bf16 and float32.
set -o pipefail
source benchmarks/gpu/setup.sh
git show bc1be14:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v20.py  # v20
mkdir -p /tmp/ps
date +%T
timeout 110 python3 benchmarks/probes/rounds_bits.py --tokens 32 --seeds 2 2>&1 | tee $OUT/rounds_bits_v21_s22_run1.txt | grep -v "differ 0$"
date +%T
timeout 150 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v20.py --tokens 1 128 --rounds 5 --jobs 12 \
  --out /tmp/ps 2>&1 | grep -v " L[0-9]* R[0-9]* W1 \|prefetch=" | tee $OUT/plan_sweep_v21_decode_s22_run1.txt
date +%T
timeout 110 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v20.py --huge --tokens 257 1024 2047 \
  --experts 256 512 --rounds 3 --jobs 14 --budget-s 90 --out /tmp/ps 2>&1 \
  | grep -v "does not apply\|prefetch=" | tee $OUT/plan_sweep_v21_small_s22_run1.txt
date +%T
( s=$(date +%s); timeout 70 python3 benchmarks/probes/plan_census.py --where ROUNDS=True --jobs 15 \
    > $OUT/plan_census_rounds_v21_s22_run1.txt 2>&1; \
  echo "rc=$? after $(( $(date +%s) - s )) s" >> $OUT/plan_census_rounds_v21_s22_run1.txt;
  s=$(date +%s); timeout 70 python3 benchmarks/probes/plan_census.py --float32 --where ROUNDS=True --jobs 15 \
    >> $OUT/plan_census_rounds_v21_s22_run1.txt 2>&1; \
  echo "rc=$? after $(( $(date +%s) - s )) s (float32)" >> $OUT/plan_census_rounds_v21_s22_run1.txt )
grep -v "^ok" $OUT/plan_census_rounds_v21_s22_run1.txt | grep -v " 0 failed" | tail -6; grep -c "^ok" $OUT/plan_census_rounds_v21_s22_run1.txt
date +%T
