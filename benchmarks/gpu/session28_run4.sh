#!/usr/bin/env bash
# GPU session 28, run 4 (at the commit that adds this script): kernel v27's decode rows again, with five interleaved
# rounds (run 2's table met the T = 1 targets by 0.04-0.14 µs; does a second run on a fresh machine agree?).
# Prediction: route(out=) within run 2's drift of 1.25 / 1.43 / 1.66 / 1.54 µs at T = 1, every round under its target.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
mkdir -p $OUT/decode
timeout 250 moe-routing bench --shape 64/6 --shape 256/8 --shape 384/8 --shape 256/8/8:4 --tokens 1,128 --rounds 5 \
  --arms "moe_routing.route(out=),moe_routing.route(out=) without PDL,moe_routing.route,empty kernel,torch.max(dim=-1)" \
  --out $OUT/decode 2>&1 | tail -30
date +%T
