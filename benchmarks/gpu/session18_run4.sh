#!/usr/bin/env bash
# GPU session 18, run 4: (1) v13's clause (step-ahead loads on the flat lane-per-row word tile from 32768 tokens) for
# lists of 16 keys, never measured: run 2 found them mixed for 192 / 16 in the HUGE class (6% faster at 16384, 3%
# slower at 28672), which is why v15 gives them to lists of 8 only there. 160-256 / 16 at 32768-65536, the rule's
# tile against the same with them switched. Prediction: mixed again (the 16-key lists hold twice the registers that
# step-ahead loads compete with). (2) The every-expert-count table with kernel v15 (its 160 / 8 and 256 / 8 rows at
# 16384 tokens change: ~9.7 -> ~8.9 and ~9.6 -> ~9.1), in the time left.
set -o pipefail
source benchmarks/gpu/setup.sh
git show HEAD:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_tree.py
start=$(date +%s); date +%T
timeout 150 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_tree.py --huge --prefetch-arms --topk 16 \
  --budget-s 110 --tokens 32768 65536 --experts 160 192 224 256 --rounds 4 --jobs 14 --out $OUT 2>&1 \
  | grep -v "does not apply\|4 of 8" | tee $OUT/plan_sweep_v13_topk16_s18_run4.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v13_topk16_s18_run4.json
date +%T
timeout 170 python3 benchmarks/probes/warm_preset.py wide --jobs 15
date +%T
mkdir -p $OUT/wide
left=$(( 575 - ($(date +%s) - start) ))
echo "bench limit ${left} s"
timeout $left moe-routing bench --preset wide --rounds 1 --out $OUT/wide \
  --arms "moe_routing.route(out=),empty kernel,straightforward Triton" 2>&1 | tail -70
date +%T
