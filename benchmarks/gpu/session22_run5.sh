#!/usr/bin/env bash
# GPU session 22, run 5: where kernel v21's decode warp waits. Nsight Compute warp-state sampling every 32 cycles
# (interval 0) of the rule's kernel at T = 1, flat 256 / 8 and grouped 4 of 8, 100 profiled launches each, summed
# per SASS line (ncu_source_summary.py --compact). Question for the next version: how the ~1 us beyond the empty
# kernel splits between the loads, the keys and sort, the K rounds (key and handed-over REDUXes) and the tail.
set -o pipefail
source benchmarks/gpu/setup.sh
for shape in flat1 grouped1; do
  timeout 200 ncu --clock-control none --kernel-name regex:bitonic_kernel --launch-skip 2 --launch-count 100 \
    --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats \
    --import-source yes -f -o /tmp/prof_$shape python3 benchmarks/probes/ncu_targets.py --shapes $shape \
    --repeat 100 2>&1 | tail -2
  ncu -i /tmp/prof_$shape.ncu-rep --page source --csv --print-source sass > /tmp/source_$shape.csv 2>&1
  python3 benchmarks/probes/ncu_source_summary.py /tmp/source_$shape.csv --compact > $OUT/ncu_source_decode_${shape}_v21_s22_run5.tsv
  date +%T
done
