#!/usr/bin/env bash
# GPU session 5, run 4: every plan of the rules on the GPU (exactness), then the medium class's tiles
# (T = 512 ... 4095), where run 3 found the rule's tile slower than the straightforward kernel at T = 1024.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_plans.py 2>&1 | tail -3 > $OUT/tests.log
timeout 170 python3 benchmarks/probes/plan_sweep.py --medium --out $OUT --budget-s 140 2>&1 | tee $OUT/sweep.log | tail -80
cat $OUT/tests.log
