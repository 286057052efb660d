"""Load a variant of the bitonic kernel module from source text: probes that compile or time kernel
versions side by side (``sass_counts.py``'s unrolled paths, ``plan_sweep.py --ab``'s earlier version)."""

import importlib.util
import sys
import tempfile
from pathlib import Path


def bitonic_kernel_from_source(source: str, name: str, common_source: str | None = None):
    """The ``bitonic_kernel`` of a copy of kernels/_bitonic.py given as text, imported as module ``name``;
    its helpers from the tree's kernels/_common.py, or from ``common_source`` (a copy of an earlier
    _common.py given as text, imported as module ``name + "_common"``: kernel v17 changed a helper there)."""
    common = "moe_routing.kernels._common"
    if common_source is not None:
        common = f"{name}_common"
        _import_source(common_source, common)
    source = source.replace("from ._common import", f"from {common} import")
    return _import_source(source, name).bitonic_kernel


def _import_source(source: str, name: str):
    """Module ``name`` from source text, written to a temporary file (triton.jit reads it through inspect)."""
    folder = Path(tempfile.mkdtemp())
    (folder / f"{name}.py").write_text(source)
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
