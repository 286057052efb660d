"""Issue-3 exploration sweep on the GPU: v1 route() vs streaming bitonic probes vs floors.

Run: python benchmarks/probes/sweep_probe.py --out DIR     (writes probe_sweep.json, prints a table)
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).parent))
from stream_topk_probe import stream_topk_probe  # noqa: E402

import moe_routing  # noqa: E402
from moe_routing.measure.bench import Shape, copy_bandwidth_bytes_per_s, graph_time_us, make_inputs  # noqa: E402
from moe_routing.measure.arms import arm_empty_kernel  # noqa: E402
from moe_routing.measure.verify import verify  # noqa: E402

KEYS = {0: "f64 exact", 1: "i64 exact", 2: "i32 trunc (inexact)"}


def probe_call(inputs, key, lanes, rows, warps):
    shape = inputs.shape
    pos_bits = max(8, (shape.experts - 1).bit_length())
    grid = (triton.cdiv(shape.tokens, rows),)

    def call(i):
        x = inputs.logits[i]
        stream_topk_probe[grid](x, inputs.bias, x.stride(0), inputs.weights, inputs.ids, shape.tokens, shape.scale,
                                E=shape.experts, TOPK=shape.topk, KEY=key, LANES=lanes, CHUNK=8, ROWS=rows,
                                POS_BITS=pos_bits, num_warps=warps)
    return call


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    bw = copy_bandwidth_bytes_per_s()
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s, GPU {torch.cuda.get_device_name()}", flush=True)
    rows_out = []
    plan = []
    for experts, topk in [(256, 8), (384, 8), (64, 6)]:
        for tokens in [1, 128, 8192, 65536]:
            small = tokens <= 128
            cfgs = []
            for key in (0, 2) + ((1,) if tokens in (1, 65536) and experts == 256 else ()):
                if small:
                    cfgs += [(key, 32, 1, 1), (key, 16, 1, 1), (key, 8, 1, 1), (key, 32, 2, 2)]
                elif tokens == 8192:
                    cfgs += [(key, 4, 32, 4), (key, 8, 16, 4), (key, 16, 8, 4)]
                else:
                    cfgs += [(key, 1, 128, 4), (key, 2, 64, 4), (key, 4, 32, 4)]
            plan.append((Shape(experts, topk, tokens), cfgs))
    for shape, cfgs in plan:
        inputs = make_inputs(shape)
        floor_us = shape.bytes_moved() / bw * 1e6
        kw = shape.kwargs(inputs.bias)
        entries = [("v1 route()", lambda i: moe_routing.route(inputs.logits[i], shape.topk,
                                                               out=(inputs.weights, inputs.ids), **kw)),
                   ("empty kernel", arm_empty_kernel(inputs))]
        for key, lanes, rows, warps in cfgs:
            entries.append((f"probe {KEYS[key]} lanes={lanes} rows={rows} warps={warps}",
                            probe_call(inputs, key, lanes, rows, warps)))
        for name, call in entries:
            t0 = time.time()
            try:
                times = graph_time_us(call, len(inputs.logits), calls_per_graph=50, replays=10)
            except Exception as error:  # a probe config that does not compile is recorded, not fatal
                print(f"{shape.label} T={shape.tokens} {name}: FAILED {type(error).__name__}: {str(error)[:200]}")
                continue
            note = ""
            if name.startswith("probe") and "exact" in name and "inexact" not in name:
                call(0)
                v = verify(inputs.weights, inputs.ids, inputs.logits[0], shape.topk, **kw)
                note = f"ok={v.ok} mismatched={v.mismatched_rows} werr={v.max_weight_error:.1e}"
            med = statistics.median(times)
            row = dict(experts=shape.experts, topk=shape.topk, tokens=shape.tokens, arm=name, median_us=med,
                       min_us=min(times), max_us=max(times), floor_us=floor_us, note=note,
                       wall_s=round(time.time() - t0, 1))
            rows_out.append(row)
            print(f"{shape.experts:4d}/{shape.topk} T={shape.tokens:6d} {name:52s} {med:8.2f} us "
                  f"(min {min(times):.2f} max {max(times):.2f}) floor {floor_us:.2f} {note} [{row['wall_s']}s]",
                  flush=True)
        (out / "probe_sweep.json").write_text(json.dumps(rows_out, indent=1))


if __name__ == "__main__":
    main()
