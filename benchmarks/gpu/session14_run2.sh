#!/usr/bin/env bash
# GPU session 14, run 2: kernel v12's one-pass group scores (the keys' fma(x, 0, c) shared, one max for the
# invalid experts, pairs within a run; 25.8 -> 24.5 instructions per logit statically) against v11's kernel
# on the same tiles (plan_sweep --ab --huge; every arm checked bit for bit against the rule first; the flat
# 256 / 8 rows run code that v12 did not change: a control); then the one-pass classes on the H200 (census,
# one pass against two passes), and the grouped kernel tests.
set -o pipefail
source benchmarks/gpu/setup.sh
git show 82b7ed4:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v11.py
date +%T
timeout 200 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v11.py --huge --tokens 65536 32768 16384 8192 2048 \
  --experts 256 --jobs 14 --out $OUT 2>&1 | grep -v "does not apply" | tee $OUT/sweep.txt
date +%T
timeout 100 python3 benchmarks/probes/one_pass_bisect.py --rule --jobs 14 > $OUT/bisect_rule.txt 2>&1
tail -4 $OUT/bisect_rule.txt
date +%T
timeout 180 python3 benchmarks/probes/plan_census.py --only one-pass --jobs 15 --verbose > $OUT/census_onepass.txt 2>&1
echo "== census one-pass: $(grep -c '^ok' $OUT/census_onepass.txt) ok, $(grep -c '^FAILED' $OUT/census_onepass.txt) failed"
grep -E "^FAILED|Error" $OUT/census_onepass.txt | head -10
date +%T
timeout 90 python3 -m pytest -q -n 14 -p no:cacheprovider -W ignore tests/test_grouped_kernel.py > $OUT/tests.log 2>&1
tail -2 $OUT/tests.log
date +%T
