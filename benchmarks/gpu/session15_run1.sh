#!/usr/bin/env bash
# GPU session 15, run 1: (1) the rolled one-pass candidate (kernel v13 candidate: session 14's commit 7f9e0a1
# re-applied on 9f9e0fa, in the working tree) against v12 (9f9e0fa's kernel) on the grouped HUGE rows: rule
# (capped at 128 registers), v12 on the rule's tile, the candidate uncapped; bits checked first. Prediction
# (NOTES v12): ~25 µs at 65536 if the instruction-fetch stalls go. (2) Nsight Compute on the candidate's
# grouped 65536 launch (pipes, stalls: does "no instruction" go?). (3) The flat 65536 kernel's source page (the run wrote the full summary; results/ncu_source_flat65536_v12_s15_run1.tsv keeps its --compact rows and columns, which this line now writes)
# (warp-state samples per SASS line): what its long-scoreboard stalls wait on.
# Run it at commit 151e53f (its kernel is the rolled-loop candidate; the next commit reverts it).
set -o pipefail
source benchmarks/gpu/setup.sh
git show 9f9e0fa:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v12.py
date +%T
timeout 240 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v12.py --huge --tokens 65536 16384 8192 \
  --experts 256 --tile "L1 R32 W1 G4 P1 words onepass" --jobs 8 --out $OUT 2>&1 | grep -v "does not apply" \
  | grep "4 of 8" | tee $OUT/sweep.txt
date +%T
SHAPES=grouped65536,flat65536
N=$(python3 benchmarks/probes/ncu_targets.py --shapes $SHAPES | sed -n 's/warmup_launches=//p')
timeout 120 ncu --clock-control none --kernel-name regex:bitonic_kernel --launch-skip $N --set full \
  -f -o $OUT/prof python3 benchmarks/probes/ncu_targets.py --shapes $SHAPES 2>&1 | tail -3
ncu -i $OUT/prof.ncu-rep --page raw --csv > raw.csv 2>&1
python3 benchmarks/probes/ncu_pipes.py raw.csv --out $OUT/ncu_v13_candidate_session15.tsv
rm -f raw.csv $OUT/prof.ncu-rep
date +%T
timeout 120 ncu --clock-control none --kernel-name regex:bitonic_kernel --launch-skip 2 --launch-count 1 \
  --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --section SpeedOfLight \
  --import-source yes -f -o $OUT/src python3 benchmarks/probes/ncu_targets.py --shapes flat65536 2>&1 | tail -2
ncu -i $OUT/src.ncu-rep --page source --csv --print-source sass > source_flat.csv 2>&1
python3 benchmarks/probes/ncu_source_summary.py source_flat.csv --compact > $OUT/source_flat65536_session15.tsv
rm -f $OUT/src.ncu-rep
ls -la $OUT
date +%T
