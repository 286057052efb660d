#!/usr/bin/env bash
# GPU session 8, run 2: kernel v6's tentative rule at T >= 2048 (grouped in one pass from the MEDIUM
# class up; word loads on every tile with runs of 4, four-lane tiles included) against the same tile
# with step-ahead loads flipped, without word loads, in two passes, and v5's kernel (build/bitonic_v5.py),
# interleaved. Run 1 (session8_run1.sh) ran out of its budget before the grouped T = 65536 shape.
#   mkdir -p build && git show da2bbbe:src/moe_routing/kernels/_bitonic.py > build/bitonic_v5.py
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
mkdir -p $OUT/ab
timeout 330 python3 benchmarks/probes/plan_sweep.py --ab build/bitonic_v5.py --tokens 65536 8192 2048 \
  --budget-s 300 --out $OUT/ab 2>&1 | tail -60
