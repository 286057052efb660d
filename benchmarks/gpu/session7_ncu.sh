#!/usr/bin/env bash
# GPU session 7, run 1: Nsight Compute profiles of the rule's kernels at the target shapes (where the
# time goes: stall reasons per SASS line, occupancy, issue use, clocks), and the decode floor ladder.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
ncu --version | tail -1
SHAPES=flat65536,grouped65536,flat1,wide65536,flat8192,grouped1
N=$(python3 benchmarks/probes/ncu_targets.py --shapes $SHAPES | sed -n 's/warmup_launches=//p')
echo "skip $N"
timeout 240 ncu --clock-control none --kernel-name regex:bitonic_kernel --launch-skip $N --set full \
  --import-source yes -f -o $OUT/prof python3 benchmarks/probes/ncu_targets.py --shapes $SHAPES 2>&1 | tail -15
ncu -i $OUT/prof.ncu-rep --page details --csv > $OUT/details.csv 2>&1
ncu -i $OUT/prof.ncu-rep --page source --csv --print-source sass > $OUT/source.csv 2>&1
ls -la $OUT; head -c 600 $OUT/source.csv
timeout 90 python3 benchmarks/probes/decode_floor.py 2>&1 | tail -6
timeout 60 python3 benchmarks/probes/decode_floor.py --tokens 128 2>&1 | tail -6
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
