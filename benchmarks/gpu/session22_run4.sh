#!/usr/bin/env bash
# GPU session 22, run 4: the targets table with kernel v21 (run 3: grouped decode 14-15% faster than v20, 64 / 6,
# 384 / 8 and 512 / 8 2-3%, 256 / 8 equal within drift; 257-2047 tokens 0-7% faster, none slower).
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
mkdir -p $OUT/targets
ARMS="moe_routing.route(out=),moe_routing.route(out=) via Python,moe_routing.route,empty kernel,torch.max(dim=-1),straightforward Triton"
timeout 240 moe-routing bench --preset targets --arms "$ARMS" --out $OUT/targets 2>&1 | tail -32
date +%T
