#!/usr/bin/env bash
# GPU session 15, run 3: the every-expert-count table again (RESULTS.md's was session 10's, kernel v8; the
# preset has timed 16384 and 32768 tokens since session 13), with kernel v12 (9f9e0fa's kernels). The rule's
# kernels are compiled first in 15 processes (warm_preset.py), so the bench's time limit goes to timing.
# (The run used benchmarks/gpu/warm_preset.py, multiprocessing workers; it moved to probes/ and splits its shapes
# with parts.py since, the same work.)
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 200 python3 benchmarks/probes/warm_preset.py wide --jobs 15
date +%T
mkdir -p $OUT/wide
timeout 370 moe-routing bench --preset wide --rounds 1 --out $OUT/wide \
  --arms "moe_routing.route(out=),empty kernel,straightforward Triton" 2>&1 | tail -70
date +%T
