#!/usr/bin/env bash
# GPU session 3, part A: the target benchmark (RESULTS.md). Output under $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
moe-routing bench --preset targets --out $OUT 2>&1 | tee $OUT/bench.log | tail -45
