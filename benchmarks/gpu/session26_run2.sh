#!/usr/bin/env bash
# GPU session 26, run 2 (commit named in the line below this script's commit): kernel v25's candidate against v24
# (083976f's kernel, carried as .ab/v24_bitonic.py) on the rule's tiles, interleaved, every arm first checked bit for bit
# against the rule. v25: the streams of runs form window keys without the finite check (the tail marks rows with a
# non-finite candidate for the exact redo), word loads without a mask (rows past the batch read row 0: no register
# zeroing before each load), the floor clamp one FMNMX on the GPU. Executed instructions a row (sm_90 SASS, window
# path): 256 / 8 at 65536 tokens 4576 -> 4256, 128 / 8 2864 -> 2688, 384 / 8 (two lanes) 3784 -> 3552, the four-lane
# tile at 8192 2216 -> 1832 (registers 120 -> 82), grouped one pass 6216 -> 6304. Prediction: 65536 tokens within
# drift (session 24's probe: one FFMA a logit fewer gained nothing there; the stream waits on memory); the four-lane
# tile at 8192 tokens 3-8% faster (17% fewer instructions, fewer registers); grouped within drift. Then the H200
# test_plans subset for the new infinite-logit test and every plan's float64 check (67 tokens on the GPU).
set -o pipefail
source benchmarks/gpu/setup.sh
mkdir -p /tmp/ps /tmp/ps2
date +%T
timeout 250 python3 benchmarks/probes/plan_sweep.py --ab .ab/v24_bitonic.py --focus --rounds 3 \
  --jobs 15 --budget-s 200 --out /tmp/ps 2>&1 | grep -v "does not apply\|baseline kernel, rule's tile, prefetch" \
  | tee $OUT/plan_sweep_v25_s26_run2.txt
cp /tmp/ps/plan_sweep.json $OUT/plan_sweep_v25_s26_run2.json
date +%T
timeout 150 python3 benchmarks/probes/plan_sweep.py --ab .ab/v24_bitonic.py --huge --rounds 3 \
  --tokens 16384 32768 65536 --experts 256 384 128 512 --jobs 15 --budget-s 110 --out /tmp/ps2 2>&1 \
  | grep -v "does not apply\|baseline kernel, rule's tile, prefetch" | tee $OUT/plan_sweep_v25_huge_s26_run2.txt
cp /tmp/ps2/plan_sweep.json $OUT/plan_sweep_v25_huge_s26_run2.json
date +%T
timeout 150 python3 -m pytest -q -x -n 8 tests/test_plans.py -k "infinite or every_plan_matches" 2>&1 | tail -5 \
  | tee $OUT/pytest_plans_s26_run2.txt
date +%T
