"""Triton kernels of the routing op and the rules that configure and launch them."""

import triton

from ._routing import route_kernel
from .launch import KernelConfig, choose_config, launch

# True when Triton was imported with TRITON_INTERPRET=1: kernels then run on CPU tensors.
INTERPRETED = not isinstance(route_kernel, triton.runtime.JITFunction)

__all__ = ["INTERPRETED", "KernelConfig", "choose_config", "launch", "route_kernel"]
