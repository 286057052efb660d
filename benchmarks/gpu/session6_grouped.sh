#!/usr/bin/env bash
# GPU session 6, run 1: the whole suite on the H200 (first GPU run of the v3 window edits and of the grouped
# bitonic kernel), then the grouped plan sweep (v1 rounds vs the grouped bitonic tiles) and the targets.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
timeout 270 python3 -m pytest -q -x -n 8 -p no:cacheprovider tests 2>&1 | tail -15 | tee $OUT/tests.log
mkdir -p $OUT/sweep $OUT/targets
timeout 170 python3 benchmarks/probes/plan_sweep.py --grouped --budget-s 120 --out $OUT/sweep 2>&1 | tail -70
ARMS="moe_routing.route(out=),moe_routing.route,empty kernel,torch.max(dim=-1),straightforward Triton"
timeout 120 moe-routing bench --preset targets --arms "$ARMS" --out $OUT/targets 2>&1 | tail -40
