#!/usr/bin/env bash
# GPU session 9, run 2: where a decode call's time goes. Nsight Compute warp-state sampling at every
# 32 cycles (interval 0) of the rule's kernel at 256/8, T = 1, flat and grouped (4 of 8), 20 profiled
# launches each, per SASS line (summed over the launches by ncu_source_summary.py); kernel v7's lane
# merge (_merge_lanes) as in the working tree. (The first attempt returned the 40 MB source pages only.)
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
for shape in flat1 grouped1; do
  timeout 150 ncu --clock-control none --kernel-name regex:bitonic_kernel --launch-skip 2 --launch-count 20 \
    --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --section SpeedOfLight \
    --import-source yes -f -o $OUT/prof_$shape python3 benchmarks/probes/ncu_targets.py --shapes $shape \
    --repeat 20 2>&1 | tail -2
  ncu -i $OUT/prof_$shape.ncu-rep --page source --csv --print-source sass > source_$shape.csv 2>&1
  python3 benchmarks/probes/ncu_source_summary.py source_$shape.csv > $OUT/summary_$shape.tsv
  head -c 3000000 source_$shape.csv | gzip -9 > $OUT/source_head_$shape.csv.gz
  ncu -i $OUT/prof_$shape.ncu-rep --page details --csv > $OUT/details_$shape.csv 2>&1
  rm -f $OUT/prof_$shape.ncu-rep
done
ls -la $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
