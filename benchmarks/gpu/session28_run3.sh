#!/usr/bin/env bash
# GPU session 28, run 3 (at the commit that adds this script): kernel v27's GRID_WAIT (PDL) on token counts and rows that
# run 2's targets table did not have (pdl_probe.py: the rule's plan launched plainly, with PDL and the wait, and with an
# early trigger too; the empty kernel both ways).
# Prediction: "pdl wait" 0.1-0.3 µs faster than "rule" up to 1024 tokens, 0-2% from 4096, none slower beyond drift.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
(cd benchmarks/probes && timeout 300 python3 pdl_probe.py --shape 256/8/1/fp32 128/8/128/softmax 512/8/128 256/8/1024 \
  256/8/4096 384/8/8192 256/8/8192/8/4 256/8/16384 256/8/32768 2>&1 | tee $OUT/pdl_probe_s28_run3.txt)
date +%T
