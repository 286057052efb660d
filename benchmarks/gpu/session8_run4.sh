#!/usr/bin/env bash
# GPU session 8, run 4: grouped 256/8/4-of-8 at T = 65536 only (run 3's A/B printed nothing before its
# 150 s timeout; --progress prints every round as it is measured): the rule (one pass, word loads)
# against its tile with step-ahead loads, without word loads, in two passes, and v5's kernel.
#   mkdir -p build && git show da2bbbe:src/moe_routing/kernels/_bitonic.py > build/bitonic_v5.py
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
mkdir -p $OUT/ab
timeout 230 python3 benchmarks/probes/plan_sweep.py --ab build/bitonic_v5.py --grouped --tokens 65536 --progress \
  --out $OUT/ab 2>&1 | tail -40
