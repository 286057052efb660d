#!/usr/bin/env bash
# GPU session 15, run 2: kernel v13 candidate — the weights' re-read of the K chosen logits as unmasked loads at
# addresses that always exist (run 1's source page of the flat 65536 kernel: the eight masked 2-byte loads
# shared one register, so ptxas issued them one after another; 9.3% of the warp samples waited there).
# A/B against v12 (9f9e0fa's kernel) at the target shapes (bits checked first; the rule's tile with
# step-ahead loads switched is timed too) and the HUGE counts for 256 experts, flat and grouped.
# Prediction (NOTES v13): ~2 µs less at 65536 tokens (flat 22.8 -> ~20.8, grouped 27.9 -> ~25.9), nothing at
# decode (its four loads are issued together already).
# Run it at commit addc186 (its kernel is the unmasked-loads candidate; the next commit reverts it).
set -o pipefail
source benchmarks/gpu/setup.sh
git show 9f9e0fa:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v12.py
date +%T
timeout 330 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v12.py --jobs 15 --out $OUT 2>&1 \
  | grep -v "does not apply" | tee $OUT/sweep_targets.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_targets.json
date +%T
timeout 150 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v12.py --huge --tokens 32768 16384 \
  --experts 256 384 --jobs 15 --out $OUT 2>&1 | grep -v "does not apply" | tee $OUT/sweep_huge.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_huge.json
date +%T
