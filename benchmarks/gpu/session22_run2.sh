#!/usr/bin/env bash
# GPU session 22, run 2. Run 1 (v21 candidate against v20, same run): grouped decode 1.87 / 2.01 us at T = 1 / 128
# against 2.21 / 2.33 (-15%); 64 / 6 1.50 against 1.58; 256 / 8, 384 / 8, 512 / 8 equal at decode; 257-2047 tokens
# 5-7% faster, except 512 / 8 at 257 tokens 2.51 against 2.29 (10% slower; its plan keeps v19's stores). Bits: equal
# on the shapes reached (the flat and in-tile grouped ones); census of the rounds classes: none failed.
# Now: (1) the window's REDUX alone: v21 against v21 with v20's float-shuffle window (prediction: equal within 2%
# for flat rows, the grouped gain from the ranking, not the window); (2) 512 / 384 / 128 experts at 1-1024 tokens
# against v20 with 5 rounds (is the 257-token loss real?); (3) the bit comparison's remaining shapes.
set -o pipefail
source benchmarks/gpu/setup.sh
git show bc1be14:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v20.py  # v20
python3 - <<'PY'
from pathlib import Path
s = Path("src/moe_routing/kernels/_bitonic.py").read_text()
old = '''    order = _ordered_int(bias)
    lo = _ordered_int(tl.min(tl.min(order, axis=1), axis=0)).to(tl.float32, bitcast=True)
    hi = _ordered_int(tl.max(tl.max(order, axis=1), axis=0)).to(tl.float32, bitcast=True)
    return _window_from(lo, hi, (lo > float("-inf")) & (hi < float("inf")))'''
new = '''    unusable = (tl.abs(bias) == float("inf")) | (bias != bias)
    return _window_from(tl.min(tl.min(bias, axis=1), axis=0), tl.max(tl.max(bias, axis=1), axis=0),
                        tl.max(tl.max(unusable.to(tl.int32), axis=1), axis=0) == 0)'''
assert s.count(old) == 1
Path("/tmp/bitonic_v21_float_window.py").write_text(s.replace(old, new))
PY
mkdir -p /tmp/ps
date +%T
timeout 150 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v21_float_window.py --huge --tokens 1 128 257 \
  --experts 256 512 64 --rounds 5 --jobs 14 --budget-s 130 --out /tmp/ps 2>&1 | grep -v "does not apply\|prefetch=" \
  | tee $OUT/plan_sweep_v21_window_s22_run2.txt
date +%T
timeout 170 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v20.py --huge --tokens 1 129 257 512 1024 \
  --experts 512 384 128 --rounds 5 --jobs 14 --budget-s 150 --out /tmp/ps 2>&1 | grep -v "does not apply\|prefetch=" \
  | tee $OUT/plan_sweep_v21_rows_s22_run2.txt
date +%T
timeout 120 python3 benchmarks/probes/rounds_bits.py --tokens 32 --seeds 1 --from-shape 4 2>&1 \
  | tee $OUT/rounds_bits_v21_s22_run2.txt | grep -v "differ 0$"
date +%T
