#!/usr/bin/env bash
# GPU session 9, run 1: kernel v7 (the lanes' lists merged by halving, _merge_lanes) against v6's kernel
# (build/bitonic_v6.py) on the rule's tile, and decode tiles whose lanes each hold a whole list in one
# thread, interleaved at the target shapes. Every arm is compiled first by 12 processes side by side
# (plan_sweep.py --warm) into a Triton cache kept in build/.
# v6's kernel is not in the tree: before the run, on the development machine,
#   mkdir -p build && git show 0b19d2e:src/moe_routing/kernels/_bitonic.py > build/bitonic_v6.py
# and carry build/ to the GPU machine.
set -o pipefail
export PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=$PWD/build/triton-cache
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
sweep="python3 benchmarks/probes/plan_sweep.py --ab build/bitonic_v6.py"
warm() {  # compile the arms of "$@" in 12 processes
  for i in $(seq 0 11); do $sweep "$@" --warm $i/12 --budget-s 1e9 > /dev/null 2>&1 & done; wait
}
date +%T; warm --tokens 1 128; date +%T
mkdir -p $OUT/ab_decode $OUT/ab_large
timeout 170 $sweep --tokens 1 128 --budget-s 150 --out $OUT/ab_decode 2>&1 | tail -60
date +%T; warm --tokens 2048 8192 65536; date +%T
timeout 200 $sweep --tokens 2048 8192 65536 --budget-s 180 --out $OUT/ab_large 2>&1 | tail -40
date +%T
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
