#!/usr/bin/env bash
# GPU session 13, run 5: the v11 rule (token classes split at 32768 and 65536; NOTES.md v11) against the v10
# rule's tiles from 16384 to 65536 tokens (plan_sweep --huge: every arm first checked bit for bit against the
# rule); the bench harness's table for the RESULTS.md section; the plan tests on the H200.
set -o pipefail
source benchmarks/gpu/setup.sh
# --ab needs a kernel file: the tree's own (v11 changed no kernel code; where timed, its "baseline" arm is a same-kernel control)
cp src/moe_routing/kernels/_bitonic.py /tmp/bitonic_v10.py
date +%T
timeout 240 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v10.py --huge --experts 256 384 512 128 192 \
  --tile "L1 R32 W1 G4 words" --tile "L2 R16 W1 G4 words" --tile "L1 R32 W1 G4 P1 words onepass" \
  --jobs 14 --out $OUT 2>&1 | grep -v "does not apply" | tee $OUT/sweep.txt
date +%T
timeout 200 moe-routing bench --shape 256/8 --shape 384/8 --shape 128/8 --shape 256/8/8:4 \
  --tokens 16384,32768,49152,65536 --arms "moe_routing.route(out=),straightforward Triton,empty kernel" \
  --out $OUT/bench_huge 2>&1 | tail -25
date +%T
timeout 150 python3 -m pytest -q -x tests/test_plans.py -k "256-8-1-1 or 384-8-1-1 or 256-8-8-4 or 128-8-1-1 or register or token or word" \
  > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -5 $OUT/tests.log
date +%T
