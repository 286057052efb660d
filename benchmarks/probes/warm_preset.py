"""Compile the rule's kernels of a bench preset into Triton's cache, in parallel processes, before a timed run.

Run: python benchmarks/probes/warm_preset.py PRESET [--jobs N]     (GPU; on a CPU, under TRITON_INTERPRET=1, it only
     checks itself)
A fresh GPU machine compiles every plan on its first call (the grouped one-pass tile ~50 s); ``moe-routing
bench`` compiles them one after another inside its time limit. Each of N processes (``parts.py``) routes every
N-th shape of the preset once (``TRITON_CACHE_DIR`` shared), so that the timed run finds them compiled.
"""

import argparse

import parts as parts_module
import torch

from moe_routing import route
from moe_routing.measure.bench import make_inputs
from moe_routing.measure.suite import PRESETS


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("preset", choices=sorted(PRESETS))
    parts_module.add_arguments(ap)
    args = ap.parse_args()
    part, parts = parts_module.my_part(args)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for shape in PRESETS[args.preset][part::parts]:
        inputs = make_inputs(shape, device, l2_bytes=0)
        route(inputs.logits[0], shape.topk, **shape.kwargs(inputs.bias))
    if device == "cuda":
        torch.cuda.synchronize()
    print(f"part {part}/{parts}: warmed {len(PRESETS[args.preset][part::parts])} shapes of {args.preset}", flush=True)


if __name__ == "__main__":
    main()
