#!/usr/bin/env bash
# GPU session 1: probe sweep + host-time probe (issue 3 exploration). Output under $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
python3 benchmarks/gpu/host_time_probe.py 2>&1 | tee $OUT/host_time_probe.log
python3 benchmarks/probes/sweep_probe.py --out $OUT 2>&1 | tee $OUT/probe_sweep.log
