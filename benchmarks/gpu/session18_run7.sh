#!/usr/bin/env bash
# GPU session 18, run 7 (at 460265a, kernel v16): float32 rows through route() itself — the launcher cache and the
# rule's float32_logits from the logits' dtype — each arm checked against the reference before it is timed, with
# the straightforward Triton kernel side by side. Prediction: route() times match run 6's arms without step-ahead
# loads (384 / 8 at 12288 tokens ~11.0 us, 512 / 8 at 16384 ~16.3, 256 / 8 at 8192 ~7.5), and at 2048 tokens the
# arms with them (384 / 8 ~4.9).
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
mkdir -p $OUT/float32
timeout 250 moe-routing bench --shape 256/8/fp32 --shape 384/8/fp32 --shape 512/8/fp32 --tokens 2048,8192,12288,16384 \
  --rounds 3 --arms "moe_routing.route(out=),straightforward Triton" --out $OUT/float32 2>&1 | tail -30
date +%T
