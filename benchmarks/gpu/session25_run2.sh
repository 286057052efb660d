#!/usr/bin/env bash
# GPU session 25, run 2 (ran at commit 7c89781's kernel; reverted after run 3): why the TMA arms of run 1 ran 50x slower
# (256 / 8 at 65536 tokens 1010 us against 20.6). tma_stream.py: TMA row streaming alone against pointer loads, several
# boxes; then ncu on one TMA launch of run 1's arm (tma_probe.py --ncu-once). Prediction: plain TMA streaming near copy
# speed (>= 3 TB/s) for boxes of 64-128 B rows; if it is that slow too, the box shape or the descriptor's passing is at
# fault, not the routing kernel.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 200 python3 benchmarks/probes/tma_stream.py 2>&1 | tee $OUT/tma_stream_s25_run2.txt
date +%T
timeout 200 ncu --clock-control none --launch-skip 3 --launch-count 1 -k regex:bitonic --section SpeedOfLight \
  --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats \
  python3 benchmarks/probes/tma_probe.py --shape 256/8/65536 --stages 3 --warm-only 2>&1 | tail -80 | tee $OUT/tma_ncu_s25_run2.txt
date +%T
