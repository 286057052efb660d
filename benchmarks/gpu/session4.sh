#!/usr/bin/env bash
# GPU session 4: the target benchmark again (compiled-reference arm fixed) and the e2e A/B. Output under $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
python3 -m pytest -q -x -p no:cacheprovider tests/test_graphs_and_compile.py 2>&1 | tail -1
moe-routing bench --preset targets --out $OUT 2>&1 | tee $OUT/bench.log | tail -5
moe-routing e2e --out $OUT 2>&1 | grep -v "^\[transformers\]" | tee $OUT/e2e.log | tail -12
