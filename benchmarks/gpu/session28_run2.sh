#!/usr/bin/env bash
# GPU session 28, run 2 (at the commit that adds this script): kernel v27 — the rule's plans launched with
# programmatic dependent launch and a grid-dependency wait first (launch.with_device), through the C++ host path's
# cuLaunchKernelEx and Triton's launcher. GPU tests of stream order, graphs and the host path; the targets table with
# the arm launched without PDL beside route(); pdl_probe.py on token counts run 1 did not measure.
# Prediction: tests pass; route(out=) 0.15-0.3 µs under "without PDL" at 1 and 128 tokens (run 1's pdl wait arm), equal
# to 2% faster from 8192 tokens; eager host time of route(out=) within drift of session 27's (4.8-7.8 µs).
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 200 python3 -m pytest -q -x -n 8 -p no:cacheprovider tests/test_graphs_and_compile.py tests/test_host_launch.py \
  tests/test_edge_cases.py 2>&1 | tail -5 | tee $OUT/pytest_v27_s28_run2.txt
date +%T
mkdir -p $OUT/targets
ARMS="moe_routing.route(out=),moe_routing.route(out=) without PDL,moe_routing.route(out=) via Python,moe_routing.route,empty kernel,torch.max(dim=-1),straightforward Triton"
timeout 280 moe-routing bench --preset targets --arms "$ARMS" --out $OUT/targets 2>&1 | tail -34
date +%T
(cd benchmarks/probes && timeout 90 python3 pdl_probe.py --shape 256/8/1024 256/8/4096 256/8/16384 64/6/8192 2>&1 \
  | tee $OUT/pdl_probe_s28_run2.txt)
date +%T
