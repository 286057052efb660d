"""Triton kernels of the routing op and the rules that choose and launch them."""

import triton

from ._bitonic import bitonic_kernel
from ._rounds import rounds_kernel
from .launch import Plan, all_plans, choose_plan, launch, token_class

# True when Triton was imported with TRITON_INTERPRET=1: kernels then run on CPU tensors.
INTERPRETED = not isinstance(rounds_kernel, triton.runtime.JITFunction)

__all__ = ["INTERPRETED", "Plan", "all_plans", "bitonic_kernel", "choose_plan", "launch", "rounds_kernel",
           "token_class"]
