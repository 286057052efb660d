"""Compile the rule's kernels of a bench preset into Triton's cache, in parallel processes, before a timed run.

Run: python benchmarks/gpu/warm_preset.py PRESET [--jobs N]
A fresh GPU machine compiles every plan on its first call (the grouped one-pass tile ~50 s); ``moe-routing
bench`` compiles them one after another inside its time limit. Each worker routes every N-th shape once
(``TRITON_CACHE_DIR`` shared), so that the timed run finds them compiled.
"""

import argparse
import multiprocessing


def warm(part: int, parts: int, preset: str) -> None:
    import torch

    from moe_routing import route
    from moe_routing.measure.bench import make_inputs
    from moe_routing.measure.suite import PRESETS

    for shape in PRESETS[preset][part::parts]:
        inputs = make_inputs(shape, l2_bytes=0)
        route(inputs.logits[0], shape.topk, **shape.kwargs(inputs.bias))
    torch.cuda.synchronize()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("preset")
    ap.add_argument("--jobs", type=int, default=8)
    args = ap.parse_args()
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=warm, args=(i, args.jobs, args.preset)) for i in range(args.jobs)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print(f"warmed {args.preset} in {args.jobs} processes; exit codes {[w.exitcode for w in workers]}")
