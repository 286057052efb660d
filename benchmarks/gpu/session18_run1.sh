#!/usr/bin/env bash
# GPU session 18, run 1 (NOTES.md v15 candidates): step-ahead loads on the flat two-lane word tile across the HUGE
# class (16384-32767 tokens, 128-256 experts; run 8 of session 17 measured only its first count: 5% faster at 16384
# for 192 and 256 experts) and for 384 / 512 experts at 32768-65536 (the two-lane tile from 32768 up: 384 was 2.7%
# faster at 32768). An uncommitted rule edit switches them on (`c["PREFETCH"] = True` for flat WORDS tiles with
# LANES == 2); the arms switch them back. The 160 / 224 rows (lane-per-row word tile in the HUGE class, rule without
# step-ahead loads) get the switched arm too. Prediction: the gain at 16384 shrinks as T grows toward 32768 (at
# 32768 it was negative for 192 / 256), so a rule for the whole class is unlikely; 384 / 512 gain 2-4% throughout.
set -o pipefail
source benchmarks/gpu/setup.sh
git show HEAD:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_tree.py
date +%T
timeout 260 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_tree.py --huge --prefetch-arms --budget-s 220 \
  --tokens 16384 20480 24576 28672 --experts 128 160 192 224 256 --rounds 4 --jobs 14 --out $OUT 2>&1 \
  | grep -v "does not apply" | tee $OUT/plan_sweep_two_lane_prefetch_huge_s18_run1.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_two_lane_prefetch_huge_s18_run1.json
date +%T
timeout 150 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_tree.py --huge --prefetch-arms --budget-s 110 \
  --tokens 32768 49152 65536 --experts 384 512 --rounds 4 --jobs 14 --out $OUT 2>&1 \
  | grep -v "does not apply" | tee $OUT/plan_sweep_two_lane_prefetch_long_s18_run1.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_two_lane_prefetch_long_s18_run1.json
date +%T
