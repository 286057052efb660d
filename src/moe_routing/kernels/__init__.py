"""Triton kernels of the routing op, the rules that choose a plan for a call, and the launch."""

import triton

from . import host_launch
from ._bitonic import bitonic_kernel
from ._rounds import rounds_kernel
from ._hash import hash_kernel
from .launch import launch, launch_hash
from .rules import Plan, all_plans, choose_plan, token_class

# True when Triton was imported with TRITON_INTERPRET=1: kernels then run on CPU tensors.
INTERPRETED = not isinstance(rounds_kernel, triton.runtime.JITFunction)
if INTERPRETED:
    from . import interpreter

    interpreter.install()  # the same results, faster (kernels/interpreter.py)

__all__ = ["INTERPRETED", "Plan", "all_plans", "bitonic_kernel", "choose_plan", "hash_kernel", "host_launch", "launch", "launch_hash",
           "rounds_kernel", "token_class"]
