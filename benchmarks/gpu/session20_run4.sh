#!/usr/bin/env bash
# GPU session 20, run 4: candidate v19 with grouped decode rows ranked in the rounds' tile (each thread's experts
# inside one group: group scores from the keys' own c, the threads' lists dropped for eliminated groups; the
# separate group stage otherwise). (1) A/B at decode sizes against HEAD's kernel (v18), all target shapes;
# prediction: 256 / 8 / 4 of 8 T = 1 ~2.0 us (run 3, group stage separate: 2.24; v18 2.56), flat rows as run 3.
# (2) softmax rows at T = 1 and 128 (384 / 512 now take rounds: run 2 had them without). (3) The targets table
# with v19 (prediction: the decode rows 10-16% under session 17's table, the rest within its spread).
set -o pipefail
source benchmarks/gpu/setup.sh
git show HEAD:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v18.py
date +%T
timeout 200 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v18.py --tokens 1 128 --rounds 5 --jobs 12 \
  --out $OUT 2>&1 | grep -v " L[0-9]* R[0-9]* W1 " | tee $OUT/plan_sweep_v19_decode_s20_run4.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v19_decode_s20_run4.json
date +%T
timeout 120 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v18.py --huge --softmax --tokens 1 128 \
  --rounds 3 --jobs 12 --out $OUT 2>&1 | tee $OUT/plan_sweep_v19_decode_softmax_s20_run4.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v19_decode_softmax_s20_run4.json
date +%T
mkdir -p $OUT/targets
ARMS="moe_routing.route(out=),moe_routing.route(out=) via Python,moe_routing.route,empty kernel,torch.max(dim=-1),straightforward Triton"
timeout 240 moe-routing bench --preset targets --arms "$ARMS" --out $OUT/targets 2>&1 | tail -32
date +%T
