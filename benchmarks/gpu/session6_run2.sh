#!/usr/bin/env bash
# GPU session 6, run 2: the whole suite on the H200 with the final grouped kernel (kept groups as a
# bitmask, eliminated groups' experts not read in the stream), the grouped sweep again, then the targets.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
timeout 280 python3 -m pytest -q -n 8 -p no:cacheprovider tests 2>&1 | tail -12 | tee $OUT/tests.log
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_prompts.py 2>&1 | grep -E "^E |assert|passed|failed" | head -20
mkdir -p $OUT/sweep $OUT/targets
timeout 110 python3 benchmarks/probes/plan_sweep.py --grouped --budget-s 70 --out $OUT/sweep 2>&1 | tail -60
ARMS="moe_routing.route(out=),moe_routing.route,empty kernel,torch.max(dim=-1),straightforward Triton"
timeout 120 moe-routing bench --preset targets --arms "$ARMS" --out $OUT/targets 2>&1 | tail -32
