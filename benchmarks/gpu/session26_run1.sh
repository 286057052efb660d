#!/usr/bin/env bash
# GPU session 26, run 1 (commit 926e6bc + this script): kernel v25's candidate, the streaming tiles' weights from the
# picks' logits handed over by the tail (HANDOVER on the rule's plan), against the rule (which re-reads them), and the
# variant that finds a pick's logit by its run (.ab/v25_run_select.py, carried: 926e6bc's kernel file patched with
# benchmarks/probes/handover_by_run.patch; handover_ab.py is probes/constexpr_ab.py since, whose --arm
# "handover=HANDOVER:1" is this script's handover arm). Prediction (session 25's run 7: the
# weights' re-read alone 1.5-1.7 us at 65536 tokens; the select adds 576 (key compare) or 320 (by run) static
# instructions to 4552, 72 -> 128 / 96 registers, still one wave at 65536 tokens): 256 / 8 at 65536 20.6 -> 19.3-19.8
# us, the by-run variant 0.2-0.4 us faster than the key compare; grouped less (its tile spills already).
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
cd benchmarks/probes && timeout 560 python3 handover_ab.py --jobs 10 --variant "by run=../../.ab/v25_run_select.py" \
  2>&1 | tee $OUT/handover_ab_s26_run1.txt
date +%T
