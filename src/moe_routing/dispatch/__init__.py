"""Dispatch: the gate that decides whether an engine's routing call is served by route(), and its dispatch-plan
call by align()."""

from .gate import (ALIGN_SERVED_FROM_SLOTS, ALIGN_SERVED_SLOTS, COUNTERS, SUBSTITUTED, AlignRequest, RoutingRequest,
                   Settings, configure, counters, decide, decide_align, report, settings)

__all__ = ["ALIGN_SERVED_FROM_SLOTS", "ALIGN_SERVED_SLOTS", "COUNTERS", "SUBSTITUTED", "AlignRequest", "RoutingRequest",
           "Settings", "configure", "counters", "decide", "decide_align", "report", "settings"]
