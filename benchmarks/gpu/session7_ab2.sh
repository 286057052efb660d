#!/usr/bin/env bash
# GPU session 7, run 3: the v5 rule against its variants (step-ahead loads on/off, per-row bias loads
# on/off for a lane per row, the four-lane tile at T = 65536) and v4's kernel (build/bitonic_v4.py),
# interleaved at the target shapes; then fine-grained ncu stall sampling of the decode kernels.
# v4's kernel is not in the tree: before the run, on the development machine,
#   mkdir -p build && git show 09d5d74:src/moe_routing/kernels/_bitonic.py > build/bitonic_v4.py
# and carry build/ to the GPU machine.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
mkdir -p $OUT/ab
timeout 300 python3 benchmarks/probes/plan_sweep.py --ab build/bitonic_v4.py --budget-s 240 --out $OUT/ab 2>&1 | tail -80
SHAPES=flat1,grouped1
N=$(python3 benchmarks/probes/ncu_targets.py --shapes $SHAPES | sed -n 's/warmup_launches=//p')
timeout 100 ncu --clock-control none --kernel-name regex:bitonic_kernel --launch-skip $N --warp-sampling-interval 0 \
  --section SourceCounters --section WarpStateStats --section SpeedOfLight \
  --import-source yes -f -o $OUT/prof3 python3 benchmarks/probes/ncu_targets.py --shapes $SHAPES 2>&1 | tail -3
ncu -i $OUT/prof3.ncu-rep --page source --csv --print-source sass > $OUT/source3.csv 2>&1
rm -f $OUT/prof3.ncu-rep
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
