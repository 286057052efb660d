#!/usr/bin/env bash
# GPU session 9, run 4: kernel v7's final rule. 384 and 512 experts at T = 1, 128, 65536 against v6's
# kernel and the tiles the v6 rule used there (four lanes at T = 65536, two warps at decode sizes); the
# kernel test files; the targets table; the every-expert-count table (one round).
#   mkdir -p build && git show 0b19d2e:src/moe_routing/kernels/_bitonic.py > build/bitonic_v6.py
set -o pipefail
export PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=$PWD/build/triton-cache
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
sweep="python3 benchmarks/probes/plan_sweep.py --ab build/bitonic_v6.py"
check=(--tokens 1 128 65536 --experts 384 512 --tile "L4 R8 W1 G4" --tile "L16 R1 W2 prefetch")
date +%T
for i in $(seq 0 13); do $sweep "${check[@]}" --warm $i/14 --budget-s 1e9 > /dev/null 2>&1 & done; wait
date +%T
mkdir -p $OUT/ab $OUT/targets $OUT/wide
timeout 110 $sweep "${check[@]}" --budget-s 95 --out $OUT/ab 2>&1 | tail -40
date +%T
timeout 230 python3 -m pytest -q -n 12 -p no:cacheprovider tests/test_grouped_kernel.py tests/test_plans.py \
  tests/test_window_keys.py tests/test_edge_cases.py 2>&1 | tail -4
date +%T
ARMS="moe_routing.route(out=),moe_routing.route,empty kernel,torch.max(dim=-1),straightforward Triton"
timeout 140 moe-routing bench --preset targets --arms "$ARMS" --out $OUT/targets 2>&1 | tail -32
date +%T
timeout 100 moe-routing bench --preset wide --rounds 1 --out $OUT/wide \
  --arms "moe_routing.route(out=),empty kernel,straightforward Triton" 2>&1 | tail -40
date +%T
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
