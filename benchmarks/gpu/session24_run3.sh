#!/usr/bin/env bash
# GPU session 24, run 3 (ran at commit 3b2ec1d): kernel v23 with keys by place only on tiles of one or two lanes a
# row (run 2's 256 / 8 at 8192 tokens recovered v22's 6.84 us with them taken back on four lanes), against v22
# (2968fe8's kernel) from 4096 to 16384 tokens
# (the four-lane tiles; run 1 measured the other tiles, which run 2's change leaves alone), then the
# targets table. Prediction: the four-lane tiles within
# drift of v22 (8192: 256 / 8 6.8, 384 / 8 7.2, grouped 6.8 us; 16384: 384 / 8 11.0, 512 / 8 12.9), every other row
# as run 1 (65536 tokens: 256 / 8 20.6, 384 / 8 28.7, grouped 27.0-27.4).
set -o pipefail
source benchmarks/gpu/setup.sh
git show 2968fe8:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v22.py  # v22 (the kernel before this session)
mkdir -p /tmp/ps_large $OUT/targets
date +%T
timeout 130 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v22.py --huge --tokens 4096 8192 12288 16384 \
  --experts 256 384 512 --rounds 3 --jobs 14 --budget-s 100 --out /tmp/ps_large 2>&1 \
  | grep -v "does not apply\|baseline kernel, rule's tile, prefetch" | tee $OUT/plan_sweep_v23_large_s24_run3.txt
cp /tmp/ps_large/plan_sweep.json $OUT/plan_sweep_v23_large_s24_run3.json
date +%T
ARMS="moe_routing.route(out=),moe_routing.route(out=) via Python,moe_routing.route,empty kernel,torch.max(dim=-1),straightforward Triton"
timeout 230 moe-routing bench --preset targets --arms "$ARMS" --out $OUT/targets 2>&1 | tail -32
date +%T
