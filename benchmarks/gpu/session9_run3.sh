#!/usr/bin/env bash
# GPU session 9, run 3: other tiles now that two lanes merge in one halving (kernel v7): two lanes per
# row (16 rows a warp, with word loads; grouped in one pass) at T = 8192 and 65536, a lane per row for
# 384 experts; the rule (tl.topk's merge again on the two-warp decode tile of 384 experts) against
# v6's kernel at 384/8, T = 1 and 128, with the one-warp decode tile merged by halving.
#   mkdir -p build && git show 0b19d2e:src/moe_routing/kernels/_bitonic.py > build/bitonic_v6.py
set -o pipefail
export PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=$PWD/build/triton-cache
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
sweep="python3 benchmarks/probes/plan_sweep.py --ab build/bitonic_v6.py"
warm() {  # compile the arms of "$@" in 14 processes
  for i in $(seq 0 13); do $sweep "$@" --warm $i/14 --budget-s 1e9 > /dev/null 2>&1 & done; wait
}
large=(--tokens 8192 65536 --tile "L2 R16 W1 G4 words" --tile "L2 R16 W1 G4 words onepass" --tile "L1 R32 W1 G4 words")
decode=(--tokens 1 128 --experts 384 --tile "L16 R1 W1 prefetch")
date +%T; warm "${large[@]}"; date +%T
mkdir -p $OUT/ab_large $OUT/ab_decode
timeout 230 $sweep "${large[@]}" --budget-s 210 --out $OUT/ab_large 2>&1 | grep -v "^ *64 / 6" | tail -60
date +%T; warm "${decode[@]}"; date +%T
timeout 100 $sweep "${decode[@]}" --budget-s 80 --out $OUT/ab_decode 2>&1 | tail -20
date +%T
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
