#!/usr/bin/env bash
# GPU session 17, run 4: the every-expert-count table again (RESULTS.md's was session 15's, kernel v12), with kernel
# v14: kernels v13 and v14 changed its flat rows of 128-256 experts at 8192 and from 32768 tokens. The rule's kernels
# are compiled first in 15 processes (warm_preset.py), so the bench's time limit goes to timing. Prediction: the
# rows v13/v14 changed move as their A/B runs measured (128 / 8 at 8192 5.40 -> ~5.0, 160 / 8 7.25 -> ~6.9, 256 / 8
# at 65536 22.95 -> ~22.3), the others within the harness's run-to-run spread (~2%).
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 200 python3 benchmarks/probes/warm_preset.py wide --jobs 15
date +%T
mkdir -p $OUT/wide
timeout 340 moe-routing bench --preset wide --rounds 1 --out $OUT/wide \
  --arms "moe_routing.route(out=),empty kernel,straightforward Triton" 2>&1 | tail -70
date +%T
