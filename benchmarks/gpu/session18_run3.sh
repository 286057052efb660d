#!/usr/bin/env bash
# GPU session 18, run 3: (1) the census's last class (256/9 64:8 sigmoid without bias HUGE; run 2 left it compiling
# after 560 s, the CI machine compiles it in minutes), its kernel compiled on the CI machine into build/triton-cache
# through Triton's own JIT path (a driver that reports sm_90) and carried here: a cache hit runs it in seconds; the
# triton_key of both machines is printed. (2) Kernel v15's rule on 160 / 224 experts (the lane-per-row word tile with
# step-ahead loads from 16384 tokens) against two tiles no rule chooses: two lanes a row with 16-bit loads (the word
# tile needs whole steps of 64 experts), with and without step-ahead loads. Run 2 measured them at 16384 (-10% with,
# -3 to -9% without) and 24576 tokens (-2 to -4% without); here the rest of HUGE and the classes above. Prediction:
# the two-lane tile without step-ahead loads stays 2-4% faster below 32768 tokens; from 32768, where the
# lane-per-row tile has one wave of warps, equal or slower (as 128 / 8 was, v11).
set -o pipefail
source benchmarks/gpu/setup.sh
R=benchmarks/results
python3 -c "import triton; from triton.runtime.cache import triton_key; import hashlib; \
print(triton.__version__, hashlib.sha256(triton_key().encode()).hexdigest()[:16])"
ls build/triton-cache | wc -l
git show HEAD:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_tree.py
date +%T
( s=$(date +%s); timeout 150 python3 benchmarks/probes/plan_census.py --skip $R/plan_census_*.txt --verbose \
    > $OUT/plan_census_last_class_s18_run3.txt 2>&1; echo "rc=$? after $(( $(date +%s) - s )) s" \
    >> $OUT/plan_census_last_class_s18_run3.txt ) &
timeout 240 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_tree.py --huge --budget-s 200 \
  --tokens 20480 28672 32768 49152 65536 --experts 160 224 --rounds 4 --jobs 12 --tile "L2 R16 W1 G4" \
  --tile "L2 R16 W1 G4 prefetch" --out $OUT 2>&1 | grep -v "does not apply" | tee $OUT/plan_sweep_two_lane_partial_s18_run3.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_two_lane_partial_s18_run3.json
date +%T
wait
cat $OUT/plan_census_last_class_s18_run3.txt | tail -4
date +%T
