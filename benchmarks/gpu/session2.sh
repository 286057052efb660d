#!/usr/bin/env bash
# GPU session 2, part A: tests on the GPU, host time, plan tuning sweep. Output under $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
python3 -m pytest -q -x -p no:cacheprovider tests 2>&1 | tee $OUT/pytest_gpu.log | tail -4
python3 benchmarks/gpu/host_time_probe.py 2>&1 | tee $OUT/host_time.log | tail -16
python3 benchmarks/probes/plan_sweep.py --out $OUT 2>&1 | tee $OUT/plan_sweep.log | tail -3
