"""Host time of route()'s Python on any machine (no GPU needed): what the eager target has to beat.

Run: python benchmarks/probes/python_overhead.py    (prints ns per call)

Times the validation (``check_call``), ``route(out=)`` with the kernel launch replaced by a no-op (so
only route()'s own Python is timed), and the single tensor properties every routing call must read.
Then the C++ host path (kernels/host_launch.py, built here without a driver): its checks and key, and
what a call it declines (here: CPU tensors) adds in front of the Python path.
"""

import timeit

import torch

import moe_routing.op as op
from moe_routing.call import check_call
from moe_routing.kernels import host_launch


def per_call_ns(fn, number=200_000) -> float:
    return min(timeit.repeat(fn, number=number, repeat=3)) / number * 1e9


def main():
    logits = torch.randn(1, 256).bfloat16()
    bias = torch.randn(256)
    out = (torch.empty(1, 8), torch.empty(1, 8, dtype=torch.int32))
    kwargs = dict(correction_bias=bias, num_expert_group=8, topk_group=4, routed_scaling_factor=2.5)

    class NoLaunch:  # stands in for moe_routing.kernels: route() takes its kernel path, the launch does nothing
        INTERPRETED = True

        @staticmethod
        def launch(*args, **kwargs):
            return None

    saved, op._kernels = op._kernels, NoLaunch
    host = host_launch.load(require_driver=False)
    op.use_host_route(None)  # the Python rows first, without the host path in front
    try:
        rows = {
            "route(out=), launch excluded": lambda: op.route(logits, 8, out=out, **kwargs),
            "check_call with out": lambda: check_call(logits, 8, "sigmoid", bias, 8, 4, True, 2.5, out),
            "check_call": lambda: check_call(logits, 8, "sigmoid", bias, 8, 4, True, 2.5, None),
            "tensor.shape": lambda: logits.shape,
            "tensor.dtype": lambda: logits.dtype,
            "tensor.device == other.device": lambda: logits.device == bias.device,
            "tensor.stride(0)": lambda: logits.stride(0),
            "tensor.data_ptr()": lambda: logits.data_ptr(),
            "torch.compiler.is_compiling()": lambda: torch.compiler.is_compiling(),
        }
        for name, fn in rows.items():
            print(f"{name:32s} {per_call_ns(fn):8.0f} ns")
        if host is None:
            print("host path: not built here")
            return
        args = (logits, 8, "sigmoid", bias, 8, 4, True, 2.5, out)
        rows = {
            "host path: checks and key (C++)": lambda: host.key(*args),
            "host path: a declined call": lambda: host.route(*args),
        }
        for name, fn in rows.items():
            print(f"{name:32s} {per_call_ns(fn):8.0f} ns")
        op.use_host_route(host.route)
        print(f"{'route(out=) after a declined host call, launch excluded':32s} "
              f"{per_call_ns(lambda: op.route(logits, 8, out=out, **kwargs)):8.0f} ns")
    finally:
        op._kernels = saved
        op.use_host_route(None)


if __name__ == "__main__":
    main()
