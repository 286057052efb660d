#!/usr/bin/env bash
# GPU session 10, run 4: the every-expert-count table (one round) with softmax on the bitonic kernel.
set -o pipefail
export PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=$PWD/build/triton-cache TORCH_EXTENSIONS_DIR=$PWD/build/torch-ext
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
mkdir -p $OUT/wide
timeout 400 moe-routing bench --preset wide --rounds 1 --out $OUT/wide \
  --arms "moe_routing.route(out=),empty kernel,straightforward Triton" 2>&1 | tail -52
date +%T
