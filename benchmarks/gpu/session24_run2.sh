#!/usr/bin/env bash
# GPU session 24, run 2 (ran at commit 4e48bdf: lane_variants.py's edits match that tree's kernel):
# where v23 lost time (run 1: the four-lane tiles, 6-8% slower at 8192 tokens for 256 / 384
# experts and grouped, 2-8% at 16384 for 384 / 512), which of its step changes cost it: v23 (the rule) against v23
# with Batcher's sort ("net"), the keys by place ("place") or both taken back on tiles of several lanes a row
# (benchmarks/probes/lane_variants.py), then against v22 from 4096 to 16384 tokens. Prediction: "both" recovers
# v22's times on those tiles (the tiles' step code is then v22's but for DENSE_OUT); one of the two alone explains
# most of it.
set -o pipefail
source benchmarks/gpu/setup.sh
git show 2968fe8:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v22.py  # v22 (the kernel before this session)
for v in both net place; do python3 benchmarks/probes/lane_variants.py $v /tmp/var_$v.py || exit 1; done
date +%T
for v in both net place; do
  timeout 110 python3 benchmarks/probes/plan_sweep.py --ab /tmp/var_$v.py --huge --tokens 8192 16384 \
    --experts 256 384 512 --rounds 3 --jobs 14 --budget-s 80 --out /tmp/ps_$v 2>&1 \
    | grep -v "does not apply\|baseline kernel, rule's tile, prefetch" | tee $OUT/plan_sweep_v23_lanes_${v}_s24_run2.txt
  date +%T
done
timeout 150 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v22.py --huge --tokens 4096 8192 12288 16384 \
  --experts 256 384 512 128 --rounds 3 --jobs 14 --budget-s 120 --out /tmp/ps_v22 2>&1 \
  | grep -v "does not apply\|baseline kernel, rule's tile, prefetch" | tee $OUT/plan_sweep_v23_large_s24_run2.txt
cp /tmp/ps_v22/plan_sweep.json $OUT/plan_sweep_v23_large_s24_run2.json
date +%T
