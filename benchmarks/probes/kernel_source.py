"""Load a variant of the bitonic kernel module from source text: probes that compile or time kernel
versions side by side (``sass_counts.py``'s unrolled paths, ``plan_sweep.py --ab``'s earlier version)."""

import importlib.util
import sys
import tempfile
from pathlib import Path


def bitonic_kernel_from_source(source: str, name: str):
    """The ``bitonic_kernel`` of a copy of kernels/_bitonic.py given as text, imported as module ``name``."""
    source = source.replace("from ._common import", "from moe_routing.kernels._common import")
    folder = Path(tempfile.mkdtemp())
    (folder / f"{name}.py").write_text(source)
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton.jit reads the source through inspect
    spec.loader.exec_module(module)
    return module.bitonic_kernel
