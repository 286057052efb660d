#!/usr/bin/env bash
# GPU session 22, run 3: kernel v21 as it will ship, against v20. Run 2: the window from REDUX of order-preserving
# bits is 3-6% slower than v20's float shuffles on rows of 8-16 experts a thread (256 / 512 flat, 384 at 257-1024
# tokens), 4% faster at 64 / 6 and 3-4% faster on grouped rows ranked in the tile; so the bits' window only for
# rows of at most 4 experts a thread (E <= 128) and in-tile grouped rows. Prediction: flat 256-512 equal to v20
# (their window is v20's again; the tail's fewer compares within drift), 64 / 128 experts 4-5% faster, grouped
# ~15% faster at decode and 5-7% from 257 tokens. (1) decode A/B; (2) 257-2047 tokens for 128-512 experts and
# grouped; (3) the bit comparison's last shapes; (4) the census of the rounds classes (bf16, float32).
set -o pipefail
source benchmarks/gpu/setup.sh
git show bc1be14:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v20.py  # v20
mkdir -p /tmp/ps
date +%T
timeout 140 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v20.py --tokens 1 128 --rounds 5 --jobs 12 \
  --out /tmp/ps 2>&1 | grep -v " L[0-9]* R[0-9]* W1 \|prefetch=" | tee $OUT/plan_sweep_v21_decode_s22_run3.txt
date +%T
timeout 120 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v20.py --huge --tokens 257 1024 2047 \
  --experts 128 256 384 512 --rounds 3 --jobs 14 --budget-s 100 --out /tmp/ps 2>&1 \
  | grep -v "does not apply\|prefetch=" | tee $OUT/plan_sweep_v21_small_s22_run3.txt
date +%T
timeout 60 python3 benchmarks/probes/rounds_bits.py --tokens 32 --seeds 1 --from-shape 11 2>&1 \
  | tee $OUT/rounds_bits_v21_s22_run3.txt | grep -v "differ 0$"
date +%T
( s=$(date +%s); timeout 70 python3 benchmarks/probes/plan_census.py --where ROUNDS=True --jobs 15 \
    > $OUT/plan_census_rounds_v21_s22_run3.txt 2>&1; \
  echo "rc=$? after $(( $(date +%s) - s )) s" >> $OUT/plan_census_rounds_v21_s22_run3.txt;
  s=$(date +%s); timeout 70 python3 benchmarks/probes/plan_census.py --float32 --where ROUNDS=True --jobs 15 \
    >> $OUT/plan_census_rounds_v21_s22_run3.txt 2>&1; \
  echo "rc=$? after $(( $(date +%s) - s )) s (float32)" >> $OUT/plan_census_rounds_v21_s22_run3.txt )
grep "failed\|rc=" $OUT/plan_census_rounds_v21_s22_run3.txt | grep -v " 0 failed"; grep -c "^ok" $OUT/plan_census_rounds_v21_s22_run3.txt
date +%T
