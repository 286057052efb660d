#!/usr/bin/env bash
# GPU session 17, run 2: kernel v14's rule — step-ahead loads for flat rows of fewer than 256 experts on the four-lane
# tiles (2048-16383 tokens). Run 1 measured them 4-7% faster for 128 / 8 (a row is one step there: what they move is
# the first step's load, ahead of the bias window). (1) The rule against v13's file at 128-224 experts, both with
# step-ahead loads switched (--prefetch-arms); prediction: 128 / 8 4-7% faster, 160-224 (two steps) 0-5% faster.
# (2) The same for softmax without bias (Qwen3-MoE's 128 / 8; no window: prediction no change at 128, unknown at
# 160), 256 as the control (rule unchanged). (3) The targets table with this kernel (v14 changes none of its rows;
# the first table since v13).
set -o pipefail
source benchmarks/gpu/setup.sh
git show HEAD:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v13.py
date +%T
timeout 200 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v13.py --huge --prefetch-arms \
  --tokens 2048 4096 8192 12288 --experts 128 160 192 224 --rounds 5 --jobs 8 --out $OUT 2>&1 \
  | grep -v "does not apply" | tee $OUT/plan_sweep_v14_s17_run2.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v14_s17_run2.json
date +%T
timeout 150 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v13.py --huge --prefetch-arms --softmax \
  --tokens 2048 8192 12288 --experts 128 160 256 --rounds 5 --jobs 8 --out $OUT 2>&1 \
  | grep -v "does not apply" | tee $OUT/plan_sweep_v14_softmax_s17_run2.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v14_softmax_s17_run2.json
date +%T
mkdir -p $OUT/targets
ARMS="moe_routing.route(out=),moe_routing.route(out=) via Python,moe_routing.route,empty kernel,torch.max(dim=-1),straightforward Triton"
timeout 200 moe-routing bench --preset targets --arms "$ARMS" --out $OUT/targets 2>&1 | tail -32
date +%T
