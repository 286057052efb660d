#!/usr/bin/env bash
# GPU session 12, run 2: the one-pass bisect on the H200: every one-pass tile class the rule can choose
# (--rule) and the list-length x groups-per-step grid, each against its two-pass twin, side by side.
# Ran on commit 8884fd2's kernel (v9's one-pass code) with this session's one_pass_bisect.py.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 280 python3 benchmarks/probes/one_pass_bisect.py --rule --jobs 8 > $OUT/rule.txt 2>&1 &
timeout 280 python3 benchmarks/probes/one_pass_bisect.py --jobs 8 > $OUT/grid.txt 2>&1 &
wait
date +%T
echo "== rule"; cat $OUT/rule.txt; echo "== grid"; cat $OUT/grid.txt
