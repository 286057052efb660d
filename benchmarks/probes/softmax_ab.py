"""Softmax routing (flat, no bias): kernel v1 ("rounds", the rule before session 10) against
the bitonic kernel with logit keys (the rule since), side by side, interleaved, on the GPU.

Run: python benchmarks/probes/softmax_ab.py [--experts 64 128 ...] [--tokens 1 128 ...] [--dtype bf16|fp32 ...]
     [--rounds 3] [--no-renormalize] [--out DIR]
     (prints one line per shape: median of round medians ± same-arm drift, and 2x the bytes floor;
     writes softmax_ab.json with --out)
"""

import argparse
import json
from pathlib import Path

import torch

from moe_routing.call import check_call
from moe_routing.kernels import choose_plan, launch
from moe_routing.kernels.launch import rounds_plan, token_class
from moe_routing.measure.bench import Shape, copy_bandwidth_bytes_per_s, make_inputs, run_interleaved

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def arms(shape: Shape, inputs, renormalize: bool):
    logits = inputs.logits[0]
    call = check_call(logits, shape.topk, "softmax", None, 1, 1, renormalize, shape.scale, None)
    plans = {"v1 rounds": rounds_plan(call, token_class(call.tokens)),
             "bitonic, logit keys": choose_plan(call, wide_loads=logits.dtype != torch.float32)}
    out = {}
    for name, plan in plans.items():
        def run(i, plan=plan):
            launch(call, inputs.logits[i], None, inputs.weights, inputs.ids, plan=plan)
        out[name] = run
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--experts", type=int, nargs="+", default=[64, 128, 160, 256, 512])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 128, 8192, 65536])
    parser.add_argument("--dtype", nargs="+", default=["bf16"], choices=list(DTYPES))
    parser.add_argument("--topk", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-renormalize", dest="renormalize", action="store_false")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    bandwidth = copy_bandwidth_bytes_per_s()
    rows = []
    for dtype in args.dtype:
        for experts in args.experts:
            for tokens in args.tokens:
                shape = Shape(experts, args.topk, tokens, scoring="softmax", bias=False, dtype=DTYPES[dtype])
                inputs = make_inputs(shape)
                calls = arms(shape, inputs, args.renormalize)
                floor2 = 2 * shape.bytes_moved() / bandwidth * 1e6
                cells = []
                for m in run_interleaved(shape, calls, len(inputs.logits), args.rounds):
                    device = m.summary()["device"]
                    cells.append(f"{m.arm} {device['median']:7.2f} ±{device['drift'] * 100:3.0f}%")
                    rows.append(dict(dtype=dtype, experts=experts, topk=args.topk, tokens=tokens, arm=m.arm,
                                     renormalize=args.renormalize, round_medians_us=m.device_us,
                                     two_floors_us=floor2))
                print(f"{experts:4d}/{args.topk} {dtype} T={tokens:6d}: " + " | ".join(cells)
                      + f" | 2x floor {floor2:6.2f}", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "softmax_ab.json").write_text(json.dumps(dict(
            gpu=torch.cuda.get_device_name(), command="python benchmarks/probes/softmax_ab.py " + " ".join(
                f"--{k} {' '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in vars(args).items()
                if k not in ("out", "renormalize")) + ("" if args.renormalize else " --no-renormalize"),
            rows=rows), indent=1))


if __name__ == "__main__":
    main()
