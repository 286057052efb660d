#!/usr/bin/env bash
# GPU session 5, run 3: the rules' new plans on the GPU (exactness), then the target table and the wide
# table with the fast arms (the reference arms are unchanged since session 4 and take minutes).
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/test_plans.py 2>&1 | tail -3 | tee $OUT/tests.log
ARMS="moe_routing.route(out=),moe_routing.route,empty kernel,torch.max(dim=-1),straightforward Triton"
mkdir -p $OUT/targets $OUT/wide
timeout 200 moe-routing bench --preset targets --arms "$ARMS" --out $OUT/targets 2>&1 | tail -40
timeout 170 moe-routing bench --preset wide --rounds 1 --arms "moe_routing.route(out=),empty kernel,straightforward Triton" --out $OUT/wide 2>&1 | tail -60
