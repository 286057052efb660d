#!/usr/bin/env bash
# GPU session 27, run 1 (at 9986705 + .ab variants): the streaming tiles' tail with its 32 candidates sorted as four
# lists of 8 in threads (Batcher's network) and merged by halving, as the lane-per-row tail does since v23, on the
# four-lane tile (.ab/v26_tail4.py; 136 fewer static instructions, 13 fewer shuffles, the same registers) and on the
# two-lane tile too (.ab/v26_tail_all.py; flat: 80 -> 168 registers). Prediction: four-lane 3-8% faster at 4096-16383
# tokens (256 / 8 at 8192 6.3 -> 5.8-6.1 us); two-lane flat slower, two-lane grouped 0-3% faster.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
(cd benchmarks/probes && timeout 280 python3 constexpr_ab.py --jobs 14 --variant "tail4=../../.ab/v26_tail4.py" \
  --shape 256/8/8192 256/8/4096 256/8/12288 384/8/8192 512/8/8192 160/8/8192 224/8/8192 128/8/8192 \
          256/8/8192/8/4 384/8/16384 512/8/16384 256/8/12288/8/4 256/8/8192/softmax 2>&1 | tee $OUT/tail_ab_s27_run1.txt)
date +%T
(cd benchmarks/probes && timeout 150 python3 constexpr_ab.py --jobs 4 --variant "tailall=../../.ab/v26_tail_all.py" \
  --shape 256/8/16384 256/8/16384/8/4 384/8/32768 256/8/32768/8/4 2>&1 | tee $OUT/tail_ab_two_lanes_s27_run1.txt)
date +%T
