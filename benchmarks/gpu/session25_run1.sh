#!/usr/bin/env bash
# GPU session 25, run 1 (ran at commit 7c89781's kernel; reverted after run 3): the TMA probe
# (benchmarks/probes/tma_probe.py). The lane-per-row word tile with its steps read by TMA into shared memory (Triton's
# loop pipeliner, 2 or 3 stages), against the rule, bits first. Prediction: if the lane-per-row tile is L1-bound (NOTES
# v23: ~1790 wavefronts a warp, 1024 of them the steps' loads; TMA: ~2x fewer in the loop), 256 / 8 at 65536 tokens 20.6
# -> 17.5-19 us; 128 / 8 13.75 -> 12-13.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
SHAPES="256/8/65536 128/8/65536 256/8/32768 384/8/65536"
for s in $SHAPES; do
  timeout 300 python3 benchmarks/probes/tma_probe.py --shape $s --warm-only > $OUT/warm_${s//\//_}.txt 2>&1 &
done
wait
date +%T
cat $OUT/warm_*.txt | grep -v "^$" | tail -20
timeout 240 python3 benchmarks/probes/tma_probe.py --shape $SHAPES --out $OUT/tma_probe_s25_run1.json 2>&1 | tee $OUT/tma_probe_s25_run1.txt
date +%T
