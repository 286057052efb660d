"""Issue-3 tuning sweep on the GPU: forced plans of the shipped kernels, side by side with the rule's choice.

Run: python benchmarks/probes/plan_sweep.py --out DIR      (writes plan_sweep.json, prints one line per plan)
"""

import argparse
import json
import statistics
from pathlib import Path


from moe_routing.call import check_call
from moe_routing.kernels import choose_plan, launch
from moe_routing.kernels.launch import bitonic_plan, rounds_plan, token_class
from moe_routing.measure.bench import Shape, graph_time_us, make_inputs


def candidates(call):
    yield "rule", choose_plan(call)
    tc = token_class(call.tokens)
    if call.grouped or call.softmax:
        for rows, warps in ((1, 1), (1, 2), (2, 2), (4, 4), (8, 4), (8, 8)):
            yield f"rounds rows={rows} warps={warps}", rounds_plan(call, tc, rows, warps)
        return
    grid = {0: [(16, 1, 1), (8, 1, 1), (32, 1, 1), (16, 2, 1), (16, 1, 2), (8, 4, 1)],
            1: [(16, 8, 4), (8, 16, 4), (4, 32, 4), (16, 4, 2), (8, 8, 2)],
            2: [(16, 8, 4), (8, 16, 4), (4, 32, 4), (16, 4, 2), (8, 8, 2)],
            3: [(2, 64, 4), (1, 128, 4), (2, 32, 2), (1, 64, 2), (2, 128, 8), (4, 32, 4), (1, 256, 8)]}[tc]
    for lanes, rows, warps in grid:
        yield f"bitonic lanes={lanes} rows={rows} warps={warps}", bitonic_plan(call, lanes, rows, warps)
    yield "rounds (rule tile)", rounds_plan(call, tc)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    results = []
    shapes = [Shape(e, k, t) for e, k in ((256, 8), (384, 8), (64, 6)) for t in (1, 128, 8192, 65536)]
    shapes += [Shape(256, 8, t, 8, 4) for t in (1, 65536)]
    for shape in shapes:
        inputs = make_inputs(shape)
        call = check_call(inputs.logits[0], shape.topk, shape.scoring, inputs.bias, shape.groups, shape.topk_group,
                          True, shape.scale, None)
        for name, plan in candidates(call):
            def run(i, plan=plan):
                launch(call, inputs.logits[i], inputs.bias, inputs.weights, inputs.ids, plan=plan)
            try:
                med = statistics.median(graph_time_us(run, len(inputs.logits), 50, 10))
            except Exception as error:  # a tile that does not compile is recorded, not fatal
                print(f"{shape.label} T={shape.tokens} {name}: FAILED {type(error).__name__} {str(error)[:120]}")
                continue
            results.append(dict(label=shape.label, tokens=shape.tokens, plan=name, median_us=med))
            print(f"{shape.label:>20} T={shape.tokens:<6} {name:40s} {med:8.2f} us", flush=True)
        Path(args.out, "plan_sweep.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
