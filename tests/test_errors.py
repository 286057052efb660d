"""Every bad call raises TypeError or ValueError naming the argument, in the op and the reference alike."""

import pytest
import torch

import moe_routing
from conftest import DEVICE

ENTRY_POINTS = {"route": moe_routing.route, "reference": moe_routing.reference.route}


def logits(tokens=4, experts=64, dtype=torch.float32):
    return torch.randn(tokens, experts).to(dtype).to(DEVICE)


def bias(experts=64, dtype=torch.float32, device=DEVICE):
    return torch.zeros(experts, dtype=dtype, device=device)


# (description, args, kwargs, exception, argument named in the message)
BAD_CALLS = [
    ("logits not a tensor", ([[0.0] * 4], 1), {}, TypeError, "gating_output"),
    ("logits 1-D", (torch.zeros(8), 1), {}, ValueError, "gating_output"),
    ("logits 3-D", (torch.zeros(2, 2, 8), 1), {}, ValueError, "gating_output"),
    ("logits int", (torch.zeros(2, 8, dtype=torch.int32), 1), {}, TypeError, "gating_output"),
    ("logits float64", (torch.zeros(2, 8, dtype=torch.float64), 1), {}, TypeError, "gating_output"),
    ("logits no experts", (torch.zeros(2, 0), 1), {}, ValueError, "gating_output"),
    ("too many experts", (torch.zeros(1, moe_routing.MAX_EXPERTS + 1), 1), {}, ValueError, "gating_output"),
    ("topk 0", (logits(), 0), {}, ValueError, "topk"),
    ("topk negative", (logits(), -3), {}, ValueError, "topk"),
    ("topk float", (logits(), 2.0), {}, TypeError, "topk"),
    ("topk bool", (logits(), True), {}, TypeError, "topk"),
    ("topk above experts", (logits(experts=8), 9), {}, ValueError, "topk"),
    ("topk above kept groups", (logits(), 9), {"num_expert_group": 8, "topk_group": 1}, ValueError, "topk"),
    ("topk above maximum", (logits(experts=128), moe_routing.MAX_TOPK + 1), {}, ValueError, "topk"),
    ("scoring unknown", (logits(), 2), {"scoring_func": "relu"}, ValueError, "scoring_func"),
    ("scoring not str", (logits(), 2), {"scoring_func": 1}, TypeError, "scoring_func"),
    ("groups 0", (logits(), 2), {"num_expert_group": 0}, ValueError, "num_expert_group"),
    ("groups float", (logits(), 2), {"num_expert_group": 2.0}, TypeError, "num_expert_group"),
    ("groups not dividing", (logits(), 2), {"num_expert_group": 3, "topk_group": 1}, ValueError, "num_expert_group"),
    ("too many groups", (logits(experts=256), 2), {"num_expert_group": 128, "topk_group": 4}, ValueError,
     "num_expert_group"),
    ("topk_group 0", (logits(), 2), {"num_expert_group": 8, "topk_group": 0}, ValueError, "topk_group"),
    ("topk_group None", (logits(), 2), {"num_expert_group": 8, "topk_group": None}, TypeError, "topk_group"),
    ("renormalize int", (logits(), 2), {"renormalize": 1}, TypeError, "renormalize"),
    ("scale str", (logits(), 2), {"routed_scaling_factor": "2"}, TypeError, "routed_scaling_factor"),
    ("scale nan", (logits(), 2), {"routed_scaling_factor": float("nan")}, ValueError, "routed_scaling_factor"),
    ("scale inf", (logits(), 2), {"routed_scaling_factor": float("inf")}, ValueError, "routed_scaling_factor"),
    ("bias not a tensor", (logits(), 2), {"correction_bias": [0.0] * 64}, TypeError, "correction_bias"),
    ("bias short", (logits(), 2), {"correction_bias": bias(63)}, ValueError, "correction_bias"),
    ("bias 2-D", (logits(), 2), {"correction_bias": bias(64).view(1, 64)}, ValueError, "correction_bias"),
    ("bias int", (logits(), 2), {"correction_bias": bias(64, torch.int64)}, TypeError, "correction_bias"),
    ("bias bool", (logits(), 2), {"correction_bias": bias(64, torch.bool)}, TypeError, "correction_bias"),
    ("bias other device", (logits(), 2), {"correction_bias": bias(64, device="meta")}, ValueError,
     "correction_bias"),
    ("out not a pair", (logits(), 2), {"out": torch.empty(4, 2)}, TypeError, "out"),
    ("out weights dtype", (logits(), 2),
     {"out": (torch.empty(4, 2, dtype=torch.float16, device=DEVICE), torch.empty(4, 2, dtype=torch.int32, device=DEVICE))},
     TypeError, "weights"),
    ("out ids dtype", (logits(), 2),
     {"out": (torch.empty(4, 2, device=DEVICE), torch.empty(4, 2, dtype=torch.int64, device=DEVICE))},
     TypeError, "ids"),
    ("out shape", (logits(), 2),
     {"out": (torch.empty(4, 3, device=DEVICE), torch.empty(4, 3, dtype=torch.int32, device=DEVICE))},
     ValueError, "weights"),
    ("out ids shape", (logits(), 2),
     {"out": (torch.empty(4, 2, device=DEVICE), torch.empty(5, 2, dtype=torch.int32, device=DEVICE))},
     ValueError, "ids"),
    ("out device", (logits(), 2),
     {"out": (torch.empty(4, 2, device="meta"), torch.empty(4, 2, dtype=torch.int32, device=DEVICE))},
     ValueError, "weights"),
]


@pytest.mark.parametrize("entry", list(ENTRY_POINTS), ids=str)
@pytest.mark.parametrize("description,args,kwargs,error,argument", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_calls_raise_naming_the_argument(entry, description, args, kwargs, error, argument):
    with pytest.raises(error, match=argument):
        ENTRY_POINTS[entry](*args, **kwargs)


def test_biased_grouped_topk_checks_too():
    with pytest.raises(ValueError, match="correction_bias"):
        moe_routing.biased_grouped_topk(logits(), bias(32), 2, True, 8, 4)
    with pytest.raises(ValueError, match="num_expert_group"):
        moe_routing.biased_grouped_topk(logits(), bias(), 2, True, 5, 2)


@pytest.mark.parametrize("entry", list(ENTRY_POINTS), ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_zero_tokens_return_empty_outputs(entry, dtype):
    route = ENTRY_POINTS[entry]
    weights, ids = route(logits(tokens=0, dtype=dtype), 8, correction_bias=bias(), num_expert_group=8, topk_group=4)
    assert weights.shape == (0, 8) and weights.dtype == torch.float32
    assert ids.shape == (0, 8) and ids.dtype == torch.int32
    out = (torch.empty(0, 8, device=DEVICE), torch.empty(0, 8, dtype=torch.int32, device=DEVICE))
    weights, ids = route(logits(tokens=0, dtype=dtype), 8, out=out)
    assert weights is out[0] and ids is out[1]
