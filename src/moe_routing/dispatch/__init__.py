"""Dispatch: the gate that decides whether an engine's routing call is served by route()."""

from .gate import COUNTERS, SUBSTITUTED, RoutingRequest, Settings, configure, counters, decide, report, settings

__all__ = ["COUNTERS", "SUBSTITUTED", "RoutingRequest", "Settings", "configure", "counters", "decide", "report",
           "settings"]
