"""The ``moe-layer`` preset: vLLM's config choice and per-pair rule as this project reproduces them (checked against
vLLM's own functions where its source is here), the kernel's extraction from vLLM's source, the layer in Triton's
interpreter, the preset's shapes and its table. The timed arms need a GPU and vLLM's source."""

import ast
import json
import sys
import types
from pathlib import Path

import pytest
import torch

import moe_routing
from conftest import ON_GPU
from moe_routing.measure import moe_layer
from moe_routing.measure.moe_layer import (LAYER_SHAPES, LayerShape, choose_config, config_file_name, default_config,
                                           device_file_name, extract_jit_functions, layer_comparison,
                                           nearest_token_count, reference_layer, run_experts, vllm_per_pair_blocks)
from moe_routing.measure.suite import PRESETS

VLLM_SOURCE = Path("/tmp/vllm-sdist/vllm-0.33.0")
FUSED_MOE = VLLM_SOURCE / moe_layer.FUSED_MOE_FILE
needs_vllm_source = pytest.mark.skipif(not FUSED_MOE.is_file(), reason="vLLM 0.33's source is not unpacked here")

H100 = "NVIDIA H100 80GB HBM3"


def vllm_functions(names, namespace):
    """vLLM's own functions ``names`` from its fused_moe.py, executed with the stand-ins of ``namespace``."""
    tree = ast.parse(FUSED_MOE.read_text())
    body = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names]
    for node in body:
        node.decorator_list = []  # (functools.lru_cache: the stand-ins change between calls)
    exec(compile(ast.Module(body=body, type_ignores=[]), str(FUSED_MOE), "exec"), namespace)
    return [namespace[name] for name in names]


def vllm_stand_ins(**extra):
    platform = types.SimpleNamespace(is_rocm=lambda: False)
    envs = types.SimpleNamespace(VLLM_BATCH_INVARIANT=False, VLLM_TUNED_CONFIG_FOLDER=None)
    return {"envs": envs, "current_platform": platform, "next_power_of_2": lambda n: 1 << (n - 1).bit_length(),
            "should_moe_wna16_use_cuda": lambda *a: False, "Any": object, "torch": torch, **extra}


def write_configs(folder: Path, name: str, table: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(table))
    return path


def tuned(block_m):
    return {"BLOCK_SIZE_M": block_m, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4,
            "num_stages": 3}


# --- the config ---------------------------------------------------------------------------------------------------

def test_device_names_as_vllm_writes_them_in_file_names():
    assert device_file_name(H100) == "NVIDIA_H100_80GB_HBM3"
    assert device_file_name("NVIDIA H200") == "NVIDIA_H200"
    assert device_file_name("NVIDIA H200 NVL") == "NVIDIA_H200"  # the whole H200 family reads one file
    assert device_file_name("NVIDIA H100 PCIe/x") == "NVIDIA_H100_PCIe_x"
    assert config_file_name(64, 1408, H100) == "E=64,N=1408,device_name=NVIDIA_H100_80GB_HBM3.json"
    assert (config_file_name(32, 2048, "NVIDIA H200", "fp8_w8a8", [128, 128])
            == "E=32,N=2048,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json")


def test_the_tuned_file_at_the_nearest_token_count(tmp_path):
    folder = tmp_path / "configs"
    table = {"1": tuned(16), "16": tuned(32), "64": tuned(64), "triton_version": "3.6.0"}
    write_configs(folder, config_file_name(64, 1408, H100), table)
    for tokens, key in ((1, 1), (4, 1), (9, 16), (40, 16), (41, 64), (256, 64)):
        config, source = choose_config(tokens, 64, 1408, H100, [folder])
        assert config == tuned(table[str(key)]["BLOCK_SIZE_M"]), tokens
        assert source == f"E=64,N=1408,device_name=NVIDIA_H100_80GB_HBM3.json [{key}]"


def test_a_tie_takes_the_first_count_of_the_file():
    assert nearest_token_count([1, 3], 2) == 1
    assert nearest_token_count([3, 1], 2) == 3
    with pytest.raises(ValueError):
        nearest_token_count([], 2)


def test_the_user_folder_comes_first_and_default_without_a_file(tmp_path):
    name = config_file_name(32, 2048, H100)
    write_configs(tmp_path / "user", name, {"8": tuned(128)})
    write_configs(tmp_path / "vllm", name, {"8": tuned(16)})
    assert choose_config(8, 32, 2048, H100, [tmp_path / "user", tmp_path / "vllm"])[0]["BLOCK_SIZE_M"] == 128
    assert choose_config(8, 64, 2048, H100, [tmp_path / "user", tmp_path / "vllm"]) == (default_config(8, 64),
                                                                                        "default")
    with pytest.raises(ValueError):
        choose_config(0, 32, 2048, H100, [tmp_path])


@needs_vllm_source
def test_the_default_config_is_vllms():
    (vllm_default,) = vllm_functions(["get_default_config"], vllm_stand_ins())
    for experts in (8, 32, 64, 128, 256):
        for tokens in list(range(1, 600)) + [1024, 8192, 40000, 65536]:
            assert default_config(tokens, experts) == vllm_default(tokens, experts, 1408, 2048, 8, None), \
                (tokens, experts)


@needs_vllm_source
def test_the_choice_is_vllms(tmp_path, monkeypatch):
    """vLLM's try_get_optimal_moe_config over a fake configs folder gives the config choose_config gives."""
    folder = tmp_path / "configs"
    table = {"1": tuned(16), "2": tuned(16), "24": tuned(32), "48": tuned(64), "256": tuned(128)}
    write_configs(folder, config_file_name(64, 1408, H100), table)
    fused_moe_package = types.ModuleType("vllm.model_executor.layers.fused_moe")
    fused_moe_package.get_config = lambda: None
    for name in ("vllm", "vllm.model_executor", "vllm.model_executor.layers"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm.model_executor.layers.fused_moe", fused_moe_package)
    namespace = vllm_stand_ins(os=__import__("os"), json=json, logger=types.SimpleNamespace(
        info_once=lambda *a, **k: None, warning_once=lambda *a, **k: None),
        get_device_name_as_file_name=lambda: device_file_name(H100), __file__=str(folder / "fused_moe.py"))
    namespace["envs"].VLLM_TUNED_CONFIG_FOLDER = str(folder)
    (vllm_choice,) = vllm_functions(["try_get_optimal_moe_config", "get_moe_configs", "get_config_file_name",
                                     "get_default_config"], namespace)[:1]
    for experts in (64, 32):  # a tuned file, then none
        for tokens in (1, 2, 3, 12, 13, 24, 36, 37, 100, 152, 153, 4096):
            expected = vllm_choice((experts, 2816, 2048), (experts, 2048, 1408), 6, None, tokens)
            assert choose_config(tokens, experts, 1408, H100, [folder])[0] == expected, (experts, tokens)


# --- where vLLM aligns ----------------------------------------------------------------------------------------------

def test_per_pair_blocks_where_vllm_skips_the_align():
    assert vllm_per_pair_blocks(1, 6, 64, False)  # 24 <= 64
    assert not vllm_per_pair_blocks(4, 6, 64, False)  # 96 > 64
    assert vllm_per_pair_blocks(4, 8, 128, False)  # 128 <= 128: the bound is inclusive
    assert not vllm_per_pair_blocks(1, 8, 256, True)  # an expert map always aligns


@needs_vllm_source
def test_the_per_pair_rule_is_vllms():
    """vLLM's _prepare_expert_assignment decides as vllm_per_pair_blocks does (its align replaced by a marker)."""
    aligned = object()
    namespace = {"moe_align_block_size": lambda *args, **kwargs: aligned, "torch": torch, "Any": object}
    (prepare,) = vllm_functions(["_prepare_expert_assignment"], namespace)
    for experts, topk in ((64, 6), (128, 8), (256, 8)):
        for tokens in (1, 2, 3, 4, 5, 8, 16):
            for mapped in (False, True):
                ids = torch.zeros(tokens, topk, dtype=torch.int32)
                result = prepare(ids, {"BLOCK_SIZE_M": 16}, tokens, topk, experts,
                                 torch.arange(experts) if mapped else None, ignore_invalid_experts=True)
                per_pair = result is not aligned and result[0] is None
                assert per_pair == vllm_per_pair_blocks(tokens, topk, experts, mapped), (experts, tokens, mapped)
                if per_pair:  # each pair its own block: the ids, T * K * BLOCK_SIZE_M entries
                    assert torch.equal(result[1], ids.view(-1)) and int(result[2]) == tokens * topk * 16


# --- the kernel from vLLM's source ------------------------------------------------------------------------------------

@needs_vllm_source
def test_the_kernel_and_what_it_calls_come_out_of_vllms_file():
    functions = extract_jit_functions(FUSED_MOE, "fused_moe_kernel")
    assert set(functions) == {"fused_moe_kernel", "write_zeros_to_output"}
    assert "sorted_token_ids_ptr" in functions["fused_moe_kernel"].arg_names


def test_extraction_refuses_what_it_cannot_supply(tmp_path):
    path = tmp_path / "kernels.py"
    path.write_text("import triton\nimport triton.language as tl\nSCALE = 2\n\n"
                    "@triton.jit\ndef helper(x):\n    return x * SCALE\n\n"
                    "@triton.jit\ndef kernel(x_ptr):\n    tl.store(x_ptr, helper(tl.load(x_ptr)))\n\n"
                    "@triton.jit\ndef plain(x_ptr):\n    tl.store(x_ptr, tl.load(x_ptr) + 1)\n\n"
                    "def host():\n    pass\n")
    assert set(extract_jit_functions(path, "plain")) == {"plain"}
    with pytest.raises(ValueError, match="SCALE"):
        extract_jit_functions(path, "kernel")
    with pytest.raises(ValueError, match="no @triton.jit function 'host'"):
        extract_jit_functions(path, "host")
    with pytest.raises(FileNotFoundError):
        extract_jit_functions(tmp_path / "absent.py", "kernel")


@pytest.fixture
def interpreter_scalars(monkeypatch):
    """Triton 3.6's interpreter turns a scalar argument into a one-element array whose ``__index__`` NumPy 2
    refuses (``range(tl.cdiv(K, BLOCK_SIZE_K))`` in vLLM's kernel): read it with ``item()`` for these tests."""
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor

    def patch(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", patch)


@needs_vllm_source
@pytest.mark.skipif(ON_GPU, reason="the interpreter check runs on CPU; the GPU runs the preset's own check")
@pytest.mark.parametrize("tokens, local", [(1, 0), (3, 0), (3, 4)])
def test_the_layer_in_the_interpreter_matches_float32(tokens, local, interpreter_scalars):
    """vLLM's kernel launched as invoke_fused_moe_triton_kernel launches it, after route_plan's blocks and after
    vLLM's per-pair blocks, gives the float32 layer (float32 weights: the interpreter's dot)."""
    kernel = moe_layer.vllm_fused_moe_kernel(VLLM_SOURCE)
    experts, topk, hidden_size, n = 8, 2, 32, 16
    gen = torch.Generator().manual_seed(tokens + local)
    hidden = torch.randn(tokens, hidden_size, generator=gen)
    held = local or experts
    w13 = torch.randn(held, 2 * n, hidden_size, generator=gen) / hidden_size ** 0.5
    w2 = torch.randn(held, hidden_size, n, generator=gen) / n ** 0.5
    logits = torch.randn(tokens, experts, generator=gen)
    expert_map = None
    if local:
        expert_map = torch.full((experts,), -1, dtype=torch.int32)
        expert_map[:local] = torch.arange(local, dtype=torch.int32)
    config = default_config(tokens, held)
    plan = moe_routing.route_plan(logits, topk, scoring_func="softmax", block_size=config["BLOCK_SIZE_M"],
                                  expert_map=expert_map, ignore_invalid_experts=local > 0)
    out = run_experts(kernel, hidden, w13, w2, plan.weights, *plan[2:5], config, local > 0)
    expected = reference_layer(hidden, w13, w2, plan.weights, plan.ids, expert_map)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    if vllm_per_pair_blocks(tokens, topk, experts, local > 0):
        post_padded = torch.tensor([plan.ids.numel() * config["BLOCK_SIZE_M"]], dtype=torch.int32)
        per_pair = run_experts(kernel, hidden, w13, w2, plan.weights, None, plan.ids.view(-1), post_padded, config,
                               False)
        assert torch.equal(per_pair, out)


# --- the preset and its table -------------------------------------------------------------------------------------

def test_the_preset_holds_the_four_layers_at_five_token_counts():
    shapes = PRESETS["moe-layer"]
    assert shapes == LAYER_SHAPES and len(shapes) == 20
    assert {(s.model, s.experts, s.hidden, s.intermediate, s.topk, s.local_experts) for s in shapes} == {
        ("Moonlight", 64, 2048, 1408, 6, 0), ("Qwen3-30B-A3B", 128, 2048, 768, 8, 0),
        ("DeepSeek-V3", 256, 7168, 2048, 8, 0), ("DeepSeek-V3", 256, 7168, 2048, 8, 32)}
    assert sorted({s.tokens for s in shapes}) == [1, 4, 16, 64, 256]
    qwen = next(s for s in shapes if s.model == "Qwen3-30B-A3B")
    assert (qwen.scoring, qwen.bias, qwen.scale) == ("softmax", False, 1.0)
    v3 = [s for s in shapes if s.model == "DeepSeek-V3"]
    assert all((s.groups, s.topk_group, s.scale, s.scoring, s.bias) == (8, 4, 2.5, "sigmoid", True) for s in v3)
    assert {s.weight_experts for s in v3} == {256, 32}
    moonlight = next(s for s in shapes if s.model == "Moonlight")
    assert (moonlight.scale, moonlight.groups, moonlight.scoring) == (2.446, 1, "sigmoid")
    per_pair = {(s.model, s.tokens) for s in shapes if vllm_per_pair_blocks(s.tokens, s.topk, s.experts, s.mapped)}
    assert per_pair == {("Moonlight", 1), ("Qwen3-30B-A3B", 1), ("Qwen3-30B-A3B", 4), ("DeepSeek-V3", 1),
                        ("DeepSeek-V3", 4)}


def test_a_layer_shape_refuses_bad_sizes():
    with pytest.raises(ValueError):
        LayerShape("m", 64, 2048, 1408, 6, 0)
    with pytest.raises(ValueError):
        LayerShape("m", 64, 2048, 1408, 6, 1, local_experts=65)
    with pytest.raises(TypeError):
        LayerShape("m", 64, 2048, 1408, 6, 1, dtype=torch.int8)


def test_the_layer_table_gives_savings_ratio_and_agreement():
    shape = LAYER_SHAPES[0]
    common = {**moe_layer._fields(shape), "config": "default", "block_size_m": 16, "vllm_blocks": "per-pair",
              "ids_equal": True, "ids_same_sets": True, "weights_equal": True, "weights_max_diff": 0.0,
              "outputs_bitwise_equal": True, "outputs_max_diff": 0.0, "outputs_finite": True, "experts_used": 6,
              "vllm_rel_error": 1e-3, "ours_rel_error": 1e-3}
    times = {"vLLM layer": 30.0, "moe_routing layer": 26.0, "vLLM stage": 8.0, "moe_routing stage": 4.0}
    result = {"rows": [{**common, "arm": arm, "device_median": t, "device_drift": 0.01} for arm, t in times.items()]}
    lines = layer_comparison(result)
    row = next(line for line in lines if line.startswith(f"| {shape.label} | 1 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4] == "6" and cells[7] == "+4.00" and cells[10] == "+4.00" and cells[11] == "1.00"
    assert cells[12] == "26.7% / 15.4%"
    assert "ids equal" in cells[13] and "outputs bitwise equal" in cells[13]
    assert layer_comparison({"rows": []}) == []


@pytest.mark.skipif(not ON_GPU or not FUSED_MOE.is_file(), reason="needs a GPU and vLLM's source")
def test_one_layer_row_on_the_gpu():
    from moe_routing.measure.arms import ENGINE_SOURCES

    ENGINE_SOURCES["vllm"] = str(VLLM_SOURCE)
    shape = LAYER_SHAPES[0]
    bench = moe_layer.LayerBench([shape], rounds=1, calls_per_graph=4, replays=2)
    rows, notes = bench.measure(shape)
    assert {r["arm"] for r in rows} == set(moe_layer.ARMS) and not notes
    assert rows[0]["outputs_finite"] and rows[0]["ours_rel_error"] < 2e-2 and rows[0]["vllm_rel_error"] < 2e-2
