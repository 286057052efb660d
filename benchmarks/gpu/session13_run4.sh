#!/usr/bin/env bash
# GPU session 13, run 4: the HUGE class (T >= 16384) below its 65536-token target shapes. Its tiles were tuned at
# T = 65536; run 3 found grouped 256 / 8 / 4 of 8 at T = 16384 10.46 us on two lanes a row against the rule's
# 13.93 (a lane per row: 512 one-warp programs, 3.9 warps per SM). The rule against lane-per-row, two-lane and
# four-lane tiles at T = 16384, 32768, 49152. Every arm first checked bit for bit against the rule.
set -o pipefail
source benchmarks/gpu/setup.sh
# --ab needs a kernel file: the tree's own (v11 changed no kernel code; where timed, its "baseline" arm is a same-kernel control)
cp src/moe_routing/kernels/_bitonic.py /tmp/bitonic_v10.py
date +%T
timeout 500 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v10.py --huge \
  --tile "L1 R32 W1 G4 words" --tile "L2 R16 W1 G4 words" --tile "L4 R8 W1 G4 prefetch" \
  --tile "L1 R128 W4 G1" --tile "L2 R16 W1 G1 prefetch" --tile "L4 R8 W1 G1 prefetch" \
  --tile "L1 R32 W1 G4 P1 words onepass" --tile "L1 R32 W1 G4 P1 words onepass M128" \
  --tile "L2 R16 W1 G4 P1 words onepass" --tile "L4 R8 W1 G4 P1 onepass prefetch" --jobs 14 --out $OUT 2>&1 \
  | grep -v "does not apply\|is the rule" | tee $OUT/sweep.txt
date +%T
