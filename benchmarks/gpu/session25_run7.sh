#!/usr/bin/env bash
# GPU session 25, run 7 (kernel v23's code, v24's rule): what the streaming tiles' tail costs at 65536 tokens, by copies
# of the kernel without the exact pick among the top runs' experts and without the weights' re-read
# (benchmarks/probes/tail_cost.py; timing only, their ids and weights are wrong). Prediction (v23's count: the tail ~20%
# of the lane-per-row tile's instructions, two dependent memory round trips): 256 / 8 20.6 -> 16-18 us without both.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
cd benchmarks/probes && timeout 260 python3 tail_cost.py 2>&1 | tee $OUT/tail_cost_s25_run7.txt
date +%T
