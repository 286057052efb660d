#!/usr/bin/env bash
# GPU session 9, run 6: the targets table and the every-expert-count table (one round) with kernel v7's
# final rule (run 4's were taken before the step-ahead change for 256 experts in the LARGE class).
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
mkdir -p $OUT/targets $OUT/wide
ARMS="moe_routing.route(out=),moe_routing.route,empty kernel,torch.max(dim=-1),straightforward Triton"
timeout 120 moe-routing bench --preset targets --arms "$ARMS" --out $OUT/targets 2>&1 | tail -32
date +%T
timeout 110 moe-routing bench --preset wide --rounds 1 --out $OUT/wide \
  --arms "moe_routing.route(out=),empty kernel,straightforward Triton" 2>&1 | tail -3
date +%T
