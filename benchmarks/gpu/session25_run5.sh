#!/usr/bin/env bash
# GPU session 25, run 5 (ran with v23's kernel and rule, and 7ae2466's plan_sweep.py): step-ahead loads across the
# HUGE_32K class (32768-65535 tokens) on the rule's tiles that have none there: flat rows of 384 / 512 experts on the
# two-lane word tile (grouped 256 / 8 was meant too, but --experts 384 512 left it out). Run 4's toggle arms had them
# faster at 32768 tokens (384 / 8 16.25 us against 16.49, 512 / 8 19.36 against 20.21, grouped 14.80 against 15.07) and
# slower at 65536 (the HUGE_64K class: 30.57 against 28.65, 37.02 against 35.04; grouped, under its register cap, 33.52
# against 26.94). Prediction: faster at the class's low end, a crossing before 65535 (the rule then takes them up to
# it), softmax rows like sigmoid ones. Needs v23's kernel module in .ab/ (carried; git show
# 78b3590:src/moe_routing/kernels/_bitonic.py > .ab/v23_bitonic.py): the baseline FILE that plan_sweep --ab requires,
# whose arms --no-baseline leaves out.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 300 python3 benchmarks/probes/plan_sweep.py --ab .ab/v23_bitonic.py --no-baseline --huge --prefetch-arms \
  --tokens 32768 40960 49152 57344 65535 --experts 384 512 --rounds 3 --jobs 15 --budget-s 200 --out $OUT 2>&1 \
  | grep -v "^\s*$" | tee $OUT/plan_sweep_huge32k_prefetch_s25_run5.txt
cp $OUT/plan_sweep.json $OUT/plan_sweep_huge32k_prefetch_s25_run5.json
date +%T
timeout 140 python3 benchmarks/probes/plan_sweep.py --ab .ab/v23_bitonic.py --no-baseline --huge --prefetch-arms \
  --softmax --tokens 32768 49152 65535 --experts 384 512 --rounds 3 --jobs 15 --budget-s 90 --out $OUT 2>&1 \
  | grep -v "^\s*$" | tee $OUT/plan_sweep_huge32k_prefetch_softmax_s25_run5.txt
date +%T
