#!/usr/bin/env bash
# GPU session 13, run 2: register caps (ptxas maxnreg) for the T = 65536 tiles that need more than one wave
# of programs at their register count: grouped 256 / 8 / 4 of 8 one pass (148 registers: 12 warps per SM
# for 15.5 needed, 1.29 waves) and the two-lane tile of 384 and 512 experts (74 registers: 24 warps per SM
# for 31 needed, 1.29 waves). Every arm first checked bit for bit against the rule.
set -o pipefail
source benchmarks/gpu/setup.sh
# --ab needs a kernel file: the tree's own (v11 changed no kernel code; where timed, its "baseline" arm is a same-kernel control)
cp src/moe_routing/kernels/_bitonic.py /tmp/bitonic_v10.py
date +%T
timeout 420 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v10.py --tokens 65536 --experts 256 384 512 \
  --tile "L1 R32 W1 G4 P1 words onepass M128" --tile "L1 R32 W1 G4 P1 words onepass M120" \
  --tile "L2 R16 W1 G4 words M64" --tile "L2 R16 W1 G4 words" --jobs 12 --out $OUT 2>&1 | tee $OUT/sweep.txt
date +%T
