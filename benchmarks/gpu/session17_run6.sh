#!/usr/bin/env bash
# GPU session 17, run 6: step-ahead loads for 256 / 8 in the MEDIUM class (2048-4095 tokens, the four-lane tile of 4
# rows), the one flat row length up to 256 experts the rule still leaves without them on the four-lane tiles. Run 1
# measured 3.80 against 3.89 us at 2048 tokens (-2.3%, drift 2.3%): 10 rounds here, and 3072 tokens. The baseline
# FILE is the tree's kernel, so every arm is timed twice (its repeat shows the spread). Prediction: -2 to -3%;
# shipped only if larger than both arms' drift at both counts. Grouped 4 of 8 (one pass, step-ahead loads already)
# is the control.
set -o pipefail
source benchmarks/gpu/setup.sh
git show HEAD:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_tree.py
date +%T
timeout 300 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_tree.py --huge --prefetch-arms \
  --tokens 2048 3072 --experts 256 --rounds 10 --jobs 8 --out $OUT 2>&1 \
  | grep -v "does not apply" | tee $OUT/plan_sweep_medium_256_prefetch_s17_run6.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_medium_256_prefetch_s17_run6.json
date +%T
