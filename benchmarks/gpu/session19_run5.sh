#!/usr/bin/env bash
# GPU session 19, run 5 (kernel v18: all pairs on one-row tiles up to 64 groups; more than 16 groups from 2048
# tokens on four lanes, 4 rows, 16 groups a load, no step-ahead loads). (1) The census's 18 new classes (64 groups,
# two passes, the new tile). (2) route() itself on many groups, each row checked against the reference first:
# 256 / 8 in 64 groups of 4 (8 kept) and in 32 groups of 8 (4 kept), 1024 / 8 in 64 groups of 16 (8 kept).
# Prediction for 256 / 8 64:8 from run 4's arms: T = 1 ~3.0 us, 2048 ~9.8, 8192 ~14.0, 65536 ~82.
set -o pipefail
source benchmarks/gpu/setup.sh
R=benchmarks/results
date +%T
( s=$(date +%s); timeout 150 python3 benchmarks/probes/plan_census.py --where BLOCK_GROUPS=64 --jobs 9 --verbose \
    --skip $R/plan_census_*.txt > $OUT/plan_census_64_groups_v18_s19_run5.txt 2>&1; \
  echo "rc=$? after $(( $(date +%s) - s )) s" >> $OUT/plan_census_64_groups_v18_s19_run5.txt )
grep -v "^ok" $OUT/plan_census_64_groups_v18_s19_run5.txt
date +%T
mkdir -p $OUT/many_groups
timeout 170 moe-routing bench --shape 256/8/64:8 --shape 256/8/32:4 --shape 1024/8/64:8 --tokens 1,2048,8192,65536 \
  --rounds 2 --arms "moe_routing.route(out=)" --out $OUT/many_groups 2>&1 | tail -16
date +%T
