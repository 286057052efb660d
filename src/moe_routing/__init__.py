"""moe-routing: exact, fast router top-k for Mixture-of-Experts models.

>>> import moe_routing
>>> weights, ids = moe_routing.route(logits, 8, correction_bias=bias, num_expert_group=8, topk_group=4)
"""

from . import reference
from .call import MAX_EXPERTS, MAX_GROUPS, MAX_TOPK
from .op import biased_grouped_topk, route, route_hash
from .plan import RoutePlan, align, group, route_plan
from .precompile import MODEL_SHAPES, RoutingShape, warmup

__version__ = "0.1.0"

__all__ = ["MAX_EXPERTS", "MAX_GROUPS", "MAX_TOPK", "MODEL_SHAPES", "RoutePlan", "RoutingShape", "align",
           "biased_grouped_topk", "group", "reference", "route", "route_hash", "route_plan", "warmup"]
