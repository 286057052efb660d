#!/usr/bin/env bash
# GPU session 14, run 1: kernel v12's experiment — the program's rows asked of the L2 before the selection
# (WARM_L2 1: a bulk prefetch per row, 2: one prefetch per 128-byte line, 3: one bulk prefetch per program
# where its rows are contiguous) against the rule's tile as is, at 8192-65536 tokens (plan_sweep --ab --huge:
# every arm first checked bit for bit against the rule). Run it at commit 461bfd8: the next commit reverted WARM_L2
# and the sweep's --warm-l2 (measured slower; NOTES.md v12).
set -o pipefail
source benchmarks/gpu/setup.sh
# --ab needs a kernel file: the tree's own (the arms differ only by WARM_L2, which the rule leaves at 0 here)
cp src/moe_routing/kernels/_bitonic.py /tmp/bitonic_tree.py
date +%T
timeout 470 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_tree.py --huge --tokens 65536 16384 8192 \
  --experts 256 384 512 128 64 --warm-l2 1 2 3 --budget-s 380 --jobs 14 --out $OUT 2>&1 | grep -v "does not apply" \
  | tee $OUT/sweep.txt
date +%T
