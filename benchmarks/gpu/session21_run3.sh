#!/usr/bin/env bash
# GPU session 21, run 3: kernel v20 with its rule (HANDOVER: every decode plan with rounds; beyond decode only flat
# rows of at most 256 experts; 512 experts and grouped rows there keep v19's stores). (1) Bits on the GPU: each
# rule decode plan against the lane merge and against itself without the handover (run 2 compared 7 of 10 shapes
# before its timeout, all equal); (2) softmax rows (logits handed over, exp of the picks in every thread) at 1 / 128
# / 1024 / 2047 tokens and flat 128 / 192 / 512 experts at 257-2047 against v19 (prediction: softmax and 128 / 192
# 5-12% faster at decode, within 3% from 1024 tokens; 512 equal to v19, its stores now v19's); (3) the census of
# the rounds classes again (HANDOVER now a constexpr); (4) the targets table with v20.
set -o pipefail
source benchmarks/gpu/setup.sh
git show HEAD:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v19.py
mkdir -p /tmp/ps
date +%T
timeout 100 python3 benchmarks/probes/rounds_bits.py --tokens 32 --seeds 2 2>&1 | tee $OUT/rounds_bits_v20_s21_run3.txt | grep -v "differ 0$"
date +%T
timeout 90 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v19.py --huge --softmax --tokens 1 128 1024 2047 \
  --experts 128 256 --rounds 3 --jobs 12 --out /tmp/ps 2>&1 | grep -v "does not apply\|prefetch=" \
  | tee $OUT/plan_sweep_v20_softmax_s21_run3.txt
date +%T
timeout 90 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v19.py --huge --tokens 257 1024 2047 \
  --experts 128 192 512 --rounds 3 --jobs 14 --budget-s 70 --out /tmp/ps 2>&1 \
  | grep -v "does not apply\|prefetch=" | tee $OUT/plan_sweep_v20_small_s21_run3.txt
date +%T
( s=$(date +%s); timeout 60 python3 benchmarks/probes/plan_census.py --where ROUNDS=True --jobs 15 \
    > $OUT/plan_census_rounds_v20_s21_run3.txt 2>&1; \
  echo "rc=$? after $(( $(date +%s) - s )) s" >> $OUT/plan_census_rounds_v20_s21_run3.txt;
  s=$(date +%s); timeout 60 python3 benchmarks/probes/plan_census.py --float32 --where ROUNDS=True --jobs 15 \
    >> $OUT/plan_census_rounds_v20_s21_run3.txt 2>&1; \
  echo "rc=$? after $(( $(date +%s) - s )) s (float32)" >> $OUT/plan_census_rounds_v20_s21_run3.txt )
grep -v "^ok" $OUT/plan_census_rounds_v20_s21_run3.txt | grep -v " 0 failed" | tail -6; grep -c "^ok" $OUT/plan_census_rounds_v20_s21_run3.txt
date +%T
mkdir -p $OUT/targets
ARMS="moe_routing.route(out=),moe_routing.route(out=) via Python,moe_routing.route,empty kernel,torch.max(dim=-1),straightforward Triton"
timeout 200 moe-routing bench --preset targets --arms "$ARMS" --out $OUT/targets 2>&1 | tail -32
date +%T
