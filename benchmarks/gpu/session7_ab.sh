#!/usr/bin/env bash
# GPU session 7, run 2: kernel v5 (step-ahead loads, bias loaded in the compute layout for a lane per
# row, unmasked loads with rows clamped) against v4 (HEAD's kernel, carried as build/bitonic_v4.py) at
# the target shapes, interleaved; the kernel tests; fine-grained ncu stall sampling at T = 1 and 65536.
# v4's kernel is not in the tree: before the run, on the development machine,
#   mkdir -p build && git show 09d5d74:src/moe_routing/kernels/_bitonic.py > build/bitonic_v4.py
# and carry build/ to the GPU machine.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
mkdir -p $OUT/ab
timeout 200 python3 benchmarks/probes/plan_sweep.py --ab build/bitonic_v4.py --budget-s 170 --out $OUT/ab 2>&1 | tail -45
timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_plans.py tests/test_grouped_kernel.py \
  tests/test_window_keys.py tests/test_edge_cases.py tests/test_invariance.py 2>&1 | tail -4
SHAPES=flat1,grouped1,flat65536,grouped65536
N=$(python3 benchmarks/probes/ncu_targets.py --shapes $SHAPES | sed -n 's/warmup_launches=//p')
timeout 150 ncu --clock-control none --kernel-name regex:bitonic_kernel --launch-skip $N --sampling-interval 0 \
  --section SourceCounters --section WarpStateStats --section Occupancy --section SpeedOfLight --section LaunchStats \
  --section SchedulerStats --import-source yes -f -o $OUT/prof2 python3 benchmarks/probes/ncu_targets.py --shapes $SHAPES 2>&1 | tail -3
ncu -i $OUT/prof2.ncu-rep --page details --csv > $OUT/details2.csv 2>&1
ncu -i $OUT/prof2.ncu-rep --page source --csv --print-source sass > $OUT/source2.csv 2>&1
rm -f $OUT/prof2.ncu-rep
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
