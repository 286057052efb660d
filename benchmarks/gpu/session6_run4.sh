#!/usr/bin/env bash
# GPU session 6, run 4 (run at commit d5dadfa, reverted after it: pipelining was slower; NOTES v4):
# software-pipelined tiles (STAGES) against unpipelined ones, then the kernel tests
# with the rule's new tile (a lane per row at T >= 16384 and E <= 256: STAGES = 2), then the targets.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
mkdir -p $OUT/sweep $OUT/targets
timeout 110 python3 benchmarks/probes/plan_sweep.py --stages --budget-s 80 --out $OUT/sweep 2>&1 | tail -40
timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_plans.py tests/test_grouped_kernel.py \
  tests/test_large_batches.py tests/test_invariance.py tests/test_window_keys.py tests/test_edge_cases.py 2>&1 \
  | tail -4 | tee $OUT/tests.log
ARMS="moe_routing.route(out=),moe_routing.route,empty kernel,torch.max(dim=-1),straightforward Triton"
timeout 110 moe-routing bench --preset targets --arms "$ARMS" --out $OUT/targets 2>&1 | tail -30
