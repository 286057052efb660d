#!/usr/bin/env bash
# GPU session 27, run 2 (at the commit that adds this script: kernel v26, plus .ab variants): (1) Nsight Compute's
# per-instruction stall samples of the four-lane tile at 256 / 8, 8192 tokens (10 launches summed); (2) the four-lane
# stream unrolled on window keys (.ab/v26_unrolled.py: 384 and 512 experts change, 160-256 already straight-line);
# prediction: 0-4% either way (more in flight across steps vs. ptxas's v23 habit of scheduling longer code worse);
# (3) v26 against v25 (.ab/v25_bitonic.py) on four-lane rows run 1 did not measure (192, 320, 448 experts); prediction
# 2-5% faster; (4) the census of the four-lane classes (bf16 and float32) that v26's tail changed.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
N=$(python3 benchmarks/probes/ncu_targets.py --shapes flat8192 | sed -n 's/warmup_launches=//p')
timeout 120 ncu --clock-control none --kernel-name regex:bitonic_kernel --launch-skip $N --launch-count 10 \
  --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --section SpeedOfLight \
  --import-source yes -f -o $OUT/prof_flat8192 python3 benchmarks/probes/ncu_targets.py --shapes flat8192 \
  --repeat 10 2>&1 | tail -2
ncu -i $OUT/prof_flat8192.ncu-rep --page source --csv --print-source sass > /tmp/source_flat8192.csv 2>&1
python3 benchmarks/probes/ncu_source_summary.py /tmp/source_flat8192.csv > $OUT/ncu_summary_flat8192_v26_s27_run2.tsv
ncu -i $OUT/prof_flat8192.ncu-rep --page details --csv > $OUT/ncu_details_flat8192_v26_s27_run2.csv 2>&1
rm -f $OUT/prof_flat8192.ncu-rep
date +%T
(cd benchmarks/probes && timeout 170 python3 constexpr_ab.py --jobs 12 --variant "unrolled=../../.ab/v26_unrolled.py" \
  --variant "v25=../../.ab/v25_bitonic.py" \
  --shape 384/8/8192 512/8/8192 384/8/16384 512/8/16384 384/8/4096 192/8/8192 320/8/8192 448/8/8192 256/8/8192 \
  2>&1 | tee $OUT/unrolled_ab_s27_run2.txt)
date +%T
(cd benchmarks/probes && W="--where LANES=4 --where ROWS=8 --where GROUP=4 --where CHUNK=8"; \
  timeout 120 python3 plan_census.py --jobs 14 $W > $OUT/plan_census_v26_s27_run2.txt 2>&1; echo "rc=$?" >> $OUT/plan_census_v26_s27_run2.txt; \
  timeout 100 python3 plan_census.py --jobs 14 --float32 $W > $OUT/plan_census_float32_v26_s27_run2.txt 2>&1; echo "rc=$?" >> $OUT/plan_census_float32_v26_s27_run2.txt)
grep -c "^ok" $OUT/plan_census_*v26_s27_run2.txt; grep -h "FAILED\|rc=\|classes" $OUT/plan_census_*v26_s27_run2.txt | head
date +%T
