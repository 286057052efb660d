#!/usr/bin/env bash
# GPU session 24, run 1 (ran at commit 6315ea5: the v23 candidate, every change on every tile):
# kernel v23 candidates against v22 (2968fe8's kernel) on the rule's tiles, interleaved, every
# arm first checked bit for bit against the rule. v23: bfloat16 words unpacked to float32 by one shift or mask; 32-bit
# keys of whole steps by their place in the step (one LEA with an immediate) and the step's index bits once per
# sorted key; sorts of 8 keys by Batcher's network (19 compare-exchanges against 24); the lane-per-row tail's 32
# candidates as four sorted lists of 8 merged by halving; DENSE_OUT (vector stores into dense outputs), with the
# "dense=0" arm its strided stores. Predictions (static counts, benchmarks/NOTES.md v23): 256 / 8 at 65536 tokens
# 22.2 -> 20.5-21.5 us (window path 19.1 -> 17.8 instructions a logit); huge-class two-lane tiles 3-6% faster;
# the four-lane tile at 8192 2-4%; decode 0-2%; grouped one pass 2-4% at 16384-65536.
set -o pipefail
source benchmarks/gpu/setup.sh
git show 2968fe8:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v22.py  # v22 (the kernel before this session)
mkdir -p /tmp/ps /tmp/ps2
date +%T
timeout 290 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v22.py --focus --dense-arm --rounds 3 \
  --jobs 14 --budget-s 230 --out /tmp/ps 2>&1 | grep -v "does not apply\|baseline kernel, rule's tile, prefetch" \
  | tee $OUT/plan_sweep_v23_s24_run1.txt
cp /tmp/ps/plan_sweep.json $OUT/plan_sweep_v23_s24_run1.json
date +%T
timeout 200 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v22.py --huge --dense-arm --rounds 3 \
  --tokens 16384 32768 65536 --experts 256 384 128 512 --jobs 14 --budget-s 150 --out /tmp/ps2 2>&1 \
  | grep -v "does not apply\|baseline kernel, rule's tile, prefetch" | tee $OUT/plan_sweep_v23_huge_s24_run1.txt
cp /tmp/ps2/plan_sweep.json $OUT/plan_sweep_v23_huge_s24_run1.json
date +%T
# probe, not shipped: v23's flat window keys without the finiteness FMA (x * 0 + c; wrong for infinite logits, which
# these random rows do not have), against v23 (the tree): what dropping one FFMA a logit would gain
sed 's/return _window_key(_finite_choice(x, _window_choice(x, bias)), expert, exists, offset, scale, PADDED)/return _window_key(_window_choice(x, bias), expert, exists, offset, scale, PADDED)/' \
  src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v23_nofma.py
grep -c "_window_key(_window_choice(x, bias)" /tmp/bitonic_v23_nofma.py
timeout 100 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v23_nofma.py --focus --rounds 3 \
  --tokens 8192 65536 --experts 256 384 --jobs 14 --budget-s 60 --out /tmp/ps 2>&1 \
  | grep -v "does not apply\|baseline kernel, rule's tile, prefetch" | tee $OUT/plan_sweep_v23_nofma_probe_s24_run1.txt
date +%T
