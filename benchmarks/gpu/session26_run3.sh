#!/usr/bin/env bash
# GPU session 26, run 3 (the commit that adds this script): kernel v25's two switches on the rule's plans, each alone and
# both, against the rule (v24's code: the switches on). CHECKED_STREAM=0: window keys of runs without the finite check
# in the stream (the tail redoes rows with a non-finite candidate); MASKED_WORDS=0: word loads without a row mask (rows
# past the batch read row 0). Run 2 had both off everywhere: 256 / 8 at 8192 tokens 6.38 us against 6.76, 128 / 8 at
# 32768 9.02 against 9.53, 256 / 8 at 65536 1% faster; 384 / 8 at 8192 and 16384 7-11% slower, grouped at 65536 6%
# slower. Prediction: the four-lane tiles' changes come from CHECKED_STREAM (no word loads there); the grouped one-pass
# regression from MASKED_WORDS (its stream keeps the check); per tile one of the four arms fastest beyond drift.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
cd benchmarks/probes && timeout 520 python3 constexpr_ab.py --jobs 15 \
  --arm "unchecked=CHECKED_STREAM:0" --arm "unmasked=MASKED_WORDS:0" --arm "both=CHECKED_STREAM:0,MASKED_WORDS:0" \
  --shape 256/8/8192 384/8/8192 512/8/8192 128/8/8192 160/8/8192 224/8/8192 256/8/4096 256/8/12288 256/8/8192/8/4 \
  256/8/65536 384/8/65536 512/8/65536 128/8/65536 160/8/65536 224/8/65536 256/8/32768 384/8/32768 128/8/32768 \
  256/8/16384 256/8/65536/8/4 256/8/32768/8/4 2>&1 | tee $OUT/constexpr_ab_s26_run3.txt
date +%T
