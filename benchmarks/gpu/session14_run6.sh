#!/usr/bin/env bash
# GPU session 14, run 6: run 5's profile found the grouped one-pass kernel stalled on instruction fetch
# ("no instruction", 2.84 warps per issue; flat 0.05): its eight unrolled steps are 6272 instructions. Candidate
# (kernel v13): the steps in a rolled loop, their lists shifted along a tuple (2584 instructions, ~28.9
# per logit executed against 24.5). A/B against v12's kernel (the commit before) on the grouped rows.
# NOT RUN in session 14 (its device time was spent): run it at commit 7f9e0a1, whose kernel is
# the candidate (the next commit reverts it; NOTES.md "What is left").
set -o pipefail
source benchmarks/gpu/setup.sh
git show d094600:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v12.py
date +%T
timeout 150 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v12.py --huge --tokens 65536 16384 8192 \
  --experts 256 --tile "L1 R32 W1 G4 P1 words onepass" --jobs 8 --out $OUT 2>&1 | grep -v "does not apply" \
  | grep "4 of 8" | tee $OUT/sweep.txt
date +%T
