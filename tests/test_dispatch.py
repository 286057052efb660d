"""The substitution gate: parametrised accept / refuse cases, execution modes, counters."""

import dataclasses

import pytest
import torch

from moe_routing import dispatch
from moe_routing.dispatch import SUBSTITUTED, RoutingRequest, configure, decide


@pytest.fixture(autouse=True)
def fresh_gate():
    before = dispatch.settings()
    configure(grouped=False, eager=False, devices=("cuda", "cpu"))
    dispatch.COUNTERS.clear()
    yield
    configure(**before.__dict__)
    dispatch.COUNTERS.clear()


def request(experts=256, topk=8, groups=1, kept=1, dtype=torch.bfloat16, bias="fp32", scoring="sigmoid",
            ids=torch.int32, weights=torch.float32, device="cpu", tokens=4):
    logits = torch.zeros(tokens, experts, dtype=dtype, device=device)
    b = None
    if bias == "fp32":
        b = torch.zeros(experts, device=device)
    elif bias == "short":
        b = torch.zeros(experts - 1, device=device)
    elif bias == "strided":
        b = torch.zeros(2 * experts, device=device)[::2]
    elif bias == "int":
        b = torch.zeros(experts, dtype=torch.int64, device=device)
    return RoutingRequest("site", logits, b, topk, groups, kept, scoring, ids, weights)


GRAPH = lambda: "PIECEWISE"  # noqa: E731


@pytest.mark.parametrize("case,kwargs", [
    ("flat 1 of 1", {}),
    ("uneliminating 2 of 2", dict(groups=2, kept=2)),
    ("uneliminating 8 of 8", dict(groups=8, kept=8)),
    ("topk_group above groups", dict(groups=4, kept=6)),
    ("no bias", dict(bias=None)),
    ("softmax", dict(scoring="softmax", bias=None)),
    ("float32 logits", dict(dtype=torch.float32)),
    ("float16 logits", dict(dtype=torch.float16)),
    ("384 experts", dict(experts=384)),
    ("one token", dict(tokens=1)),
    ("int64 ids", dict(ids=torch.int64)),
    ("sqrt-softplus", dict(scoring="sqrtsoftplus")),
])
def test_gate_accepts(case, kwargs):
    assert decide(request(**kwargs), GRAPH) == (True, SUBSTITUTED), case


@pytest.mark.parametrize("case,kwargs,reason", [
    ("eliminating groups", dict(groups=8, kept=4), "eliminating groups"),
    ("bias of wrong length", dict(bias="short"), "bias"),
    ("strided bias", dict(bias="strided"), "bias"),
    ("integer bias", dict(bias="int"), "bias"),
    ("int16 ids", dict(ids=torch.int16), "ids"),
    ("bf16 weights buffer", dict(weights=torch.bfloat16), "weights"),
    ("float64 logits", dict(dtype=torch.float64), "logits"),
    ("too many experts", dict(experts=8192, topk=8), "experts"),
    ("topk too large", dict(experts=256, topk=65), "topk"),
    ("topk above kept experts", dict(experts=16, topk=17), "topk"),
    ("unknown scoring", dict(scoring="relu"), "scoring"),
    ("groups not dividing", dict(experts=100, groups=3, kept=3), "divide"),
])
def test_gate_refuses_with_a_reason(case, kwargs, reason):
    substitute, why = decide(request(**kwargs), GRAPH)
    assert not substitute and reason in why, (case, why)


def test_hash_tables_and_vision_bias():
    base = request(scoring="sqrtsoftplus", topk=6, bias=None)
    table, tokens = torch.zeros(100, 6, dtype=torch.int32), torch.zeros(4, dtype=torch.int64)
    hashed = dataclasses.replace(base, hash_table=table, input_ids=tokens)
    assert decide(hashed, GRAPH) == (True, SUBSTITUTED)
    assert decide(dataclasses.replace(hashed, padded=True), GRAPH) == (True, SUBSTITUTED)
    for change, reason in ((dict(scoring="softmax"), "hash table with softmax"),
                           (dict(input_ids=None), "token ids"), (dict(input_ids=tokens[:3]), "token ids"),
                           (dict(hash_table=table[:, :5]), "hash table not"),
                           (dict(hash_table=table.float()), "hash table not")):
        substitute, why = decide(dataclasses.replace(hashed, **change), GRAPH)
        assert not substitute and reason in why, (change, why)
    assert decide(dataclasses.replace(base, vision=True), GRAPH) == (False, "per-token vision bias (bias_vl) not supported")
    assert decide(dataclasses.replace(hashed, vision=True), GRAPH)[0] is False


def test_grouped_path_when_enabled():
    configure(grouped=True)
    assert decide(request(groups=8, kept=4), GRAPH)[0]
    assert not decide(request(experts=256, groups=128, kept=4, topk=2), GRAPH)[0]  # too many groups


@pytest.mark.parametrize("mode,eager,expected", [
    ("PIECEWISE", False, True), ("FULL", False, True), ("NONE", False, False), ("NONE", True, True),
    (None, False, False), (None, True, False),
])
def test_execution_mode(mode, eager, expected):
    configure(eager=eager)
    substitute, reason = decide(request(), lambda: mode)
    assert substitute == expected, reason
    if mode is None:
        assert reason == "no forward context"


def test_devices_setting():
    configure(devices=("cuda",))
    assert decide(request(), GRAPH) == (False, "device cpu not enabled")


def test_counters_by_site_and_reason():
    decide(request(), GRAPH)
    decide(request(), GRAPH)
    decide(request(), lambda: "NONE")
    assert dispatch.counters() == {"site": {SUBSTITUTED: 2, "eager step (eager path disabled)": 1}}
    assert "site: 3 calls (substituted: 2, eager step (eager path disabled): 1)" == dispatch.report()


def test_settings_from_environment(monkeypatch):
    monkeypatch.setenv("MOE_ROUTING_GROUPED", "1")
    monkeypatch.setenv("MOE_ROUTING_EAGER", "1")
    monkeypatch.setenv("MOE_ROUTING_DEVICES", "cuda, cpu")
    s = dispatch.Settings.from_environment()
    assert s.grouped and s.eager and s.devices == ("cuda", "cpu")
    assert not s.source_rows and not dispatch.Settings().source_rows
    monkeypatch.setenv("MOE_ROUTING_SOURCE_ROWS", "1")
    assert dispatch.Settings.from_environment().source_rows


def test_sites_that_must_write_token_expert_indices_only_when_enabled():
    asked = dataclasses.replace(request(), source_rows=True)
    assert decide(asked, GRAPH) == (False, "token_expert_indices asked for (source-rows sites disabled)")
    configure(source_rows=True)
    assert decide(asked, GRAPH) == (True, SUBSTITUTED)


def align_request(ids=None, block_size=16, experts=64, expert_map="none", scatter_relabel=False):
    ids = torch.zeros(5, 6, dtype=torch.int32) if ids is None else ids
    table = {"none": lambda: None, "int32": lambda: torch.full((experts,), -1, dtype=torch.int32),
             "int64": lambda: torch.full((experts,), -1, dtype=torch.int64),
             "short": lambda: torch.zeros(experts - 1, dtype=torch.int32), "float": lambda: torch.zeros(experts),
             "with mask": lambda: torch.zeros(experts + 2, dtype=torch.int32)}[expert_map]()
    return dispatch.AlignRequest("moe_align_block_size", ids, block_size, experts, table, scatter_relabel)


@pytest.mark.parametrize("case,kwargs,reason", [
    ("plain", {}, SUBSTITUTED),
    ("int64 ids", dict(ids=torch.zeros(3, 8, dtype=torch.int64)), SUBSTITUTED),
    ("no tokens", dict(ids=torch.zeros(0, 8, dtype=torch.int32)), SUBSTITUTED),
    ("int32 map", dict(expert_map="int32"), SUBSTITUTED),
    ("int64 map", dict(expert_map="int64"), SUBSTITUTED),
    ("float ids", dict(ids=torch.zeros(5, 6)), "ids not 2-D int32/int64"),
    ("1-D ids", dict(ids=torch.zeros(30, dtype=torch.int32)), "ids not 2-D int32/int64"),
    ("block 0", dict(block_size=0), "block_size or num_experts not an int >= 1"),
    ("float block", dict(block_size=16.0), "block_size or num_experts not an int >= 1"),
    ("no experts", dict(experts=0, expert_map="none"), "block_size or num_experts not an int >= 1"),
    ("short map", dict(expert_map="short"), "expert_map not an int32/int64 [E] tensor on the ids' device"),
    ("float map", dict(expert_map="float"), "expert_map not an int32/int64 [E] tensor on the ids' device"),
    ("AITER mask map", dict(expert_map="with mask"), "expert_map not an int32/int64 [E] tensor on the ids' device"),
    ("scatter, relabel", dict(expert_map="int32", scatter_relabel=True),
     "scatter index with a relabelling map (vLLM refuses it)"),
    ("512 slots", dict(ids=torch.zeros(64, 8, dtype=torch.int32)), SUBSTITUTED),
    ("513 slots", dict(ids=torch.zeros(513, 1, dtype=torch.int32)),
     "513 to 65535 slots (not measured faster than vLLM's op there)"),
    ("65535 slots", dict(ids=torch.zeros(13107, 5, dtype=torch.int32)),
     "513 to 65535 slots (not measured faster than vLLM's op there)"),
    ("65536 slots", dict(ids=torch.zeros(8192, 8, dtype=torch.int32)), SUBSTITUTED),
])
def test_align_gate_accepts_what_align_serves_exactly(case, kwargs, reason):
    assert dispatch.decide_align(align_request(**kwargs), GRAPH) == (reason == SUBSTITUTED, reason), case
    assert dispatch.counters() == {"moe_align_block_size": {reason: 1}}


def test_align_gate_follows_the_device_and_mode_settings():
    configure(devices=("cuda",))
    assert dispatch.decide_align(align_request(), GRAPH) == (False, "device not enabled")
    configure(devices=("cuda", "cpu"))
    assert dispatch.decide_align(align_request(), lambda: "NONE") == (False, "eager step (eager path disabled)")
    assert dispatch.decide_align(align_request(), lambda: None) == (False, "no forward context")
    configure(eager=True)
    assert dispatch.decide_align(align_request(), lambda: "NONE") == (True, SUBSTITUTED)
    assert dispatch.decide_align(align_request(ids=[[1, 2]]), GRAPH) == (False, "ids not a tensor")
