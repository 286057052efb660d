#!/usr/bin/env bash
# GPU session 10, run 1: the C++ host path (kernels/host_launch.cpp) — build it, its GPU tests and the
# tests that call route() on the GPU with it loaded, then the targets table with the Python-path arm
# beside it (eager A/B in one run).
set -o pipefail
export PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=$PWD/build/triton-cache TORCH_EXTENSIONS_DIR=$PWD/build/torch-ext
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
which g++ ninja; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
python3 - <<'PY'
import time
t = time.perf_counter()
from moe_routing.kernels import host_launch
print("host path:", host_launch.load(), f"built/loaded in {time.perf_counter() - t:.1f} s")
PY
date +%T
timeout 240 python3 -m pytest -q -n 14 -p no:cacheprovider tests/test_host_launch.py tests/test_errors.py \
  tests/test_graphs_and_compile.py tests/test_transformers_integration.py 2>&1 | tail -15
date +%T
mkdir -p $OUT/targets
ARMS="moe_routing.route(out=),moe_routing.route(out=) via Python,moe_routing.route,empty kernel,torch.max(dim=-1)"
timeout 200 moe-routing bench --preset targets --arms "$ARMS" --out $OUT/targets 2>&1 | tail -32
date +%T
