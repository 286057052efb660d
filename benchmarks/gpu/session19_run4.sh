#!/usr/bin/env bash
# GPU session 19, run 4: 64 groups (256 / 8 in 64 groups of 4, 8 kept). Run 3 found them 6-14x slower than 8 groups
# (route() 65.7 us at 16384 tokens against 10.5; 120 at 8192) and v17 slower than v16 at decode (3.72 against 3.14
# at T = 1). Counted first (compile_times.py, sm_90 SASS): the LARGE plan (four lanes, 8 rows, the group stage
# reading a whole row, 64 groups a load) spills (1254 local loads and stores, 253 registers); with 16 groups a
# load none (126, as 8 groups' plan); the lane-per-row HUGE plan names 252 registers (64 group scores, and the
# rounds' masks, per thread). Candidate v18 (this tree): all pairs again on one-row tiles up to 64 groups (v16's
# decode code: 7256 SASS instructions as v16's). Arms: the rule (v18) against v17's kernel on the rule's tile, and
# the tiles a rule change could choose: four lanes with 16 or 8 groups a load, two lanes with 16.
# Prediction: T = 1 / 128 back to v16's 3.1-3.4 us; 8192 tokens 15-30 us on the spill-free tile (8 groups: 6.8);
# 16384 / 65536 2-4x faster on four lanes (no 64-register group-score array per thread).
set -o pipefail
source benchmarks/gpu/setup.sh
git show HEAD:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v17.py
git show HEAD:src/moe_routing/kernels/_common.py > /tmp/common_v17.py
date +%T
timeout 330 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v17.py --ab-common /tmp/common_v17.py --huge \
  --grouped --grouping 64:8 --experts 256 --tokens 65536 16384 8192 2048 128 1 --budget-s 220 --rounds 4 --jobs 12 \
  --tile "L4 R8 W1 G4 P16 prefetch" --tile "L4 R8 W1 G4 P16" --tile "L4 R8 W1 G4 P8 prefetch" \
  --tile "L4 R4 W1 G4 P16" --tile "L2 R16 W1 G4 P16" --out $OUT 2>&1 | tee $OUT/plan_sweep_64_groups_s19_run4.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_64_groups_s19_run4.json
date +%T
