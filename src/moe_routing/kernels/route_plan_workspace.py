"""The workspaces of route_plan's grid kernel (kernels/_route_plan_grid.py): int32 memory its programs count in and
wait on, zero when first used and left ready for the next launch by each launch.

Launches that run one after another may share a workspace; launches that may run side by side may not. An eager
call takes its stream's. A call being captured into a CUDA graph takes its capture's on that stream (a capture's
launches on one stream replay one after another, while two graphs may replay side by side), the capture told apart
by its id from the CUDA driver (``capture_id``), or, where the driver gives none, one of its own. Workspaces come
from a zeroed pool a device, allocated outside any capture (memory allocated during one would be zeroed only when
the graph runs): a capture that finds the pool without room gets none, and its call takes two launches.
"""

from __future__ import annotations

import ctypes

import torch
import triton

from ._route_plan_grid import HEADER_ENTRIES

POOL_ENTRIES = 1 << 22  # int32 entries allocated at once, outside any capture (16 MiB, zeroed)
_pools: dict[int, list] = {}  # device -> [the current block, the next free entry in it]
_kept: list[torch.Tensor] = []  # every block allocated: launches and graphs captured earlier keep using theirs
_workspaces: dict[tuple, tuple[torch.Tensor, int, int]] = {}  # (device, stream, capture) -> workspace, address, region


def sized(region: int) -> int:
    """A workspace's entries for regions of ``region`` entries, rounded up to 16 (64-byte aligned workspaces)."""
    return triton.cdiv(HEADER_ENTRIES + 2 * region, 16) * 16


def _from_pool(index: int, region: int, capturing: bool) -> torch.Tensor | None:
    """A zeroed workspace no launch uses yet on CUDA device ``index``, from the device's pool; None while capturing
    when the pool has no room left. Outside a capture the pool takes a new block once a quarter of its block or
    less is left, so that captures find room."""
    entries = sized(region)
    pool = _pools.get(index)
    room = 0 if pool is None else pool[0].numel() - pool[1]
    if room < entries or (not capturing and room < POOL_ENTRIES // 4):
        if capturing:
            return None
        pool = _pools[index] = [torch.zeros(max(POOL_ENTRIES, entries), dtype=torch.int32, device=index), 0]
        _kept.append(pool[0])
    work = pool[0][pool[1]:pool[1] + entries]
    pool[1] += entries
    return work


def workspace(index: int | None, stream: int | None, region: int, largest: int) -> tuple | None:
    """The workspace of a launch whose counts take ``region`` entries (``largest``: the most a call of its shape
    takes), on ``stream`` of CUDA device ``index`` (None: the interpreter's CPU): (the tensor, its address, the entries
    of each of its regions), or None (a capture found the pool without room: the call takes two launches)."""
    capturing = index is not None and torch.cuda.is_current_stream_capturing()
    key = (index, stream, capture_id(stream) if capturing else None)
    if capturing and key[2] is None:
        work = _from_pool(index, region, True)
        return None if work is None else (work, work.data_ptr(), region)
    entry = _workspaces.get(key)
    if entry is None or entry[2] < region:
        if index is None:
            work = torch.zeros(sized(largest), dtype=torch.int32)
        else:
            work = _from_pool(index, largest, capturing)
            if work is None:
                return None
        if entry is not None:
            _kept.append(entry[0])  # a launch or a captured graph may still use the smaller one
        entry = _workspaces[key] = (work, work.data_ptr(), largest)
    return entry


_capture_info = None  # the driver's cuStreamGetCaptureInfo, once looked up (False: not available)


def capture_id(stream: int) -> int | None:
    """The id of the CUDA graph capture under way on ``stream`` (the CUDA driver's cuStreamGetCaptureInfo), or None
    where the driver gives none (no NVIDIA driver library: ROCm builds)."""
    global _capture_info
    if _capture_info is None:
        _capture_info = False
        try:
            driver = ctypes.CDLL("libcuda.so.1")
            for name in ("cuStreamGetCaptureInfo_v3", "cuStreamGetCaptureInfo_v2", "cuStreamGetCaptureInfo"):
                if hasattr(driver, name):  # each takes (stream, status*, id*, then optional outputs left NULL)
                    _capture_info = getattr(driver, name)
                    break
        except OSError:
            pass
    if not _capture_info:
        return None
    status, ident = ctypes.c_int(0), ctypes.c_uint64(0)
    error = _capture_info(ctypes.c_void_p(stream), ctypes.byref(status), ctypes.byref(ident), None, None, None, None)
    return ident.value if error == 0 and status.value == 1 else None  # 1: CU_STREAM_CAPTURE_STATUS_ACTIVE
