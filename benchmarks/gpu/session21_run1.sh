#!/usr/bin/env bash
# GPU session 21, run 1: kernel v20, the rounds' weights from registers (each round's winner hands over its pick's
# sigmoid score by one more REDUX, off the rounds' chain; the weights are formed from these scalars and stored
# without re-reading the logits, without v19's reductions across threads and its shared-memory round trip before
# the stores; rows with a pick under the window, invalid picks or an unusable window take the exact path as before).
# Static count (256 / 8, T = 1, sm_90): 1744 SASS instructions against v19's 4096; after the last round 116 against
# ~190 and no global load, shuffle or barrier. Prediction: decode 0.1-0.2 us faster (256 / 8 T = 1 ~1.72 against
# 1.88; 64 / 6 ~1.55 against 1.67; grouped ~1.9 against 2.04-2.16), the same at T = 128; the SMALL / MEDIUM rows
# 3-8% faster. (1) A/B against HEAD's kernel (v19) at the target decode shapes; (2) against variant v20b (the
# picks' logits handed over instead of their scores, the K sigmoids after the rounds); (3) 257-3071 tokens.
set -o pipefail
source benchmarks/gpu/setup.sh
git show HEAD:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v19.py
python3 - <<'PY'
s = open("src/moe_routing/kernels/_bitonic.py").read()
for old, new in [("""        scores = sigmoid_scores(x.to(tl.float32), True)
        picks, picked, kept_tile = _select_rounds(x, scores,""", """        picks, picked, kept_tile = _select_rounds(x, x.to(tl.float32),"""),
                 ("""            score = values[r]""", """            score = sigmoid_scores(values[r], True)""")]:
    assert s.count(old) == 1
    s = s.replace(old, new)
open("/tmp/bitonic_v20b.py", "w").write(s)
PY
date +%T
timeout 200 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v19.py --tokens 1 128 --rounds 5 --jobs 12 \
  --out $OUT 2>&1 | grep -v " L[0-9]* R[0-9]* W1 " | tee $OUT/plan_sweep_v20_decode_s21_run1.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v20_decode_s21_run1.json
date +%T
timeout 100 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v20b.py --tokens 1 --experts 64 256 --rounds 5 \
  --jobs 12 --out $OUT 2>&1 | grep -v " L[0-9]* R[0-9]* W1 \|prefetch=\|rounds=0" | tee $OUT/plan_sweep_v20_v20b_s21_run1.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v20_v20b_s21_run1.json
date +%T
timeout 170 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v19.py --huge --tokens 257 1024 2047 3071 \
  --experts 256 512 --rounds 3 --jobs 14 --budget-s 130 --out $OUT 2>&1 \
  | grep -v "does not apply\|prefetch=" | tee $OUT/plan_sweep_v20_small_s21_run1.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v20_small_s21_run1.json
date +%T
