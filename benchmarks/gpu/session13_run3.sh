#!/usr/bin/env bash
# GPU session 13, run 3: grouped 256 / 8 / 4 of 8 in one pass from 16384 tokens up: the rule's lane-per-row tile
# (148 registers, 12 warps per SM) against the same tile capped at 128 registers (one wave at T = 65536: run 2
# measured 29.80 vs 32.22 us) and the two- and four-lane one-pass tiles with and without caps (two lanes: 145
# registers, 111 spilled words at 64). Every arm first checked bit for bit against the rule.
set -o pipefail
source benchmarks/gpu/setup.sh
# --ab needs a kernel file: the tree's own (v11 changed no kernel code; where timed, its "baseline" arm is a same-kernel control)
cp src/moe_routing/kernels/_bitonic.py /tmp/bitonic_v10.py
date +%T
timeout 480 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v10.py --grouped --tokens 65536 32768 16384 \
  --tile "L1 R32 W1 G4 P1 words onepass M128" --tile "L2 R16 W1 G4 P1 words onepass" \
  --tile "L2 R16 W1 G4 P1 words onepass M96" --tile "L2 R16 W1 G4 P1 words onepass M80" \
  --tile "L2 R16 W1 G4 P1 words onepass M64" --tile "L4 R8 W1 G4 P1 onepass prefetch" \
  --tile "L4 R8 W1 G4 P1 onepass prefetch M80" --jobs 14 --out $OUT 2>&1 | tee $OUT/sweep.txt
date +%T
