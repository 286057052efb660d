#!/usr/bin/env bash
# GPU session 5, run 5: the small class (T = 1024, 2048) after the rule change, side by side with the
# straightforward Triton peer, every expert count of the wide preset. Output under $OUT.
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -1
timeout 110 moe-routing bench --shape 64/6 --shape 128/8 --shape 160/8 --shape 256/8 --shape 384/8 --shape 512/8 \
  --tokens 1024,2048 --rounds 1 --arms "moe_routing.route(out=),straightforward Triton" --out $OUT 2>&1 | grep "^|"
