#!/usr/bin/env bash
# GPU session 15, run 4: (1) the tile classes earlier censuses left out (plan_census.py --skip: what an earlier
# run's "ok" lines do not name): the two-pass quarter 3 and the HUGE two-pass classes that session 14's timeouts
# cut, the two-pass quarter 0 (session 12 ran it before v11 added token classes) and the flat classes no run has
# passed. Kernel v12 (9f9e0fa's kernels). (2) Nsight Compute on v12's grouped 65536 launch without flushing the
# caches between passes (--cache-control none): session 14's profile (flushed) found "no instruction" stalls
# first and 38.9 µs, against 27.9 under graph replay — is the instruction fetch a cold-cache artifact?
set -o pipefail
source benchmarks/gpu/setup.sh
R=benchmarks/results
date +%T
timeout 130 python3 benchmarks/probes/plan_census.py --only two-pass --stride 4 --offset 3 --jobs 15 --verbose \
  --skip $R/plan_census_twopass_offset3_v12_s14_run4.txt > $OUT/census_twopass_offset3_rest.txt 2>&1
timeout 110 python3 benchmarks/probes/plan_census.py --only two-pass --plans huge --jobs 15 --verbose \
  --skip $R/plan_census_huge_twopass_v12_s14_run4.txt > $OUT/census_huge_twopass_rest.txt 2>&1
timeout 200 python3 benchmarks/probes/plan_census.py --only two-pass --stride 4 --jobs 15 --verbose \
  --skip $R/plan_census_twopass_run5.txt > $OUT/census_twopass_offset0_rest.txt 2>&1
timeout 60 python3 benchmarks/probes/plan_census.py --only flat --jobs 7 --verbose \
  --skip $R/plan_census_flat_onepass_run5.txt --skip $R/plan_census_huge_flat_onepass_v11_s13_run6.txt \
  > $OUT/census_flat_rest.txt 2>&1
for f in $OUT/census_*.txt; do echo "== $f: $(grep -c '^ok' $f) ok, $(grep -c '^FAILED' $f) failed"; grep -E "^FAILED|Error" $f | head -10; done
date +%T
SHAPES=grouped65536
N=$(python3 benchmarks/probes/ncu_targets.py --shapes $SHAPES | sed -n 's/warmup_launches=//p')
timeout 90 ncu --clock-control none --cache-control none --kernel-name regex:bitonic_kernel --launch-skip $N \
  --set full -f -o $OUT/prof python3 benchmarks/probes/ncu_targets.py --shapes $SHAPES 2>&1 | tail -2
ncu -i $OUT/prof.ncu-rep --page raw --csv > raw.csv 2>&1
python3 benchmarks/probes/ncu_pipes.py raw.csv --out $OUT/ncu_v12_grouped_warm_caches_s15.tsv
rm -f raw.csv $OUT/prof.ncu-rep
date +%T
