#!/usr/bin/env bash
# GPU session 10, run 6 (the last device minutes): the final code's plan, invariance and host-path tests
# (cut by its 170 s timeout after about 198 of them passed, none failed).
source benchmarks/gpu/setup.sh
timeout 170 python3 -m pytest -q -n 16 -p no:cacheprovider tests/test_plans.py tests/test_invariance.py \
  tests/test_host_launch.py 2>&1 | tail -3
