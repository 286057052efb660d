"""The ``moe-layer`` preset: vLLM's config choice and per-pair rule as this project reproduces them (checked against
vLLM's own functions where its source is here), the kernel's extraction from vLLM's source, the layer in Triton's
interpreter, the preset's shapes and its table. The timed arms need a GPU and vLLM's source."""

import ast
import dataclasses
import json
import sys
import types
from pathlib import Path

import pytest
import torch
import triton

import moe_routing
from conftest import ON_GPU
from moe_routing.measure import moe_layer
from moe_routing.measure.moe_layer import (FP8_DTYPE, LAYER_SHAPES, ExpertWeights, LayerShape, choose_config,
                                           config_file_name, default_config, default_fp8_block_config,
                                           dequantize_weight_blocks, device_file_name, extract_jit_functions,
                                           layer_comparison, load_fp8_quant, nearest_token_count, quantize_groups,
                                           quantize_weight_blocks, reference_layer, run_experts, vllm_per_pair_blocks,
                                           vllm_swap_ab)
from moe_routing.measure.suite import PRESETS

# vLLM 0.33's unpacked sdist, where this machine has one
VLLM_SOURCE = next((path for path in (Path("/tmp/vllm-sdist/vllm-0.33.0"), Path("/tmp/vllm-0.33.0"))
                    if (path / moe_layer.FUSED_MOE_FILE).is_file()), Path("/tmp/vllm-sdist/vllm-0.33.0"))
FUSED_MOE = VLLM_SOURCE / moe_layer.FUSED_MOE_FILE
FP8_UTILS = VLLM_SOURCE / moe_layer.FP8_UTILS_FILE
needs_vllm_source = pytest.mark.skipif(not FUSED_MOE.is_file(), reason="vLLM 0.33's source is not unpacked here")

H100 = "NVIDIA H100 80GB HBM3"


def vllm_functions(names, namespace, path=FUSED_MOE):
    """vLLM's own functions ``names`` from its file ``path`` (fused_moe.py), executed with the stand-ins of
    ``namespace``."""
    tree = ast.parse(path.read_text())
    body = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names]
    for node in body:
        node.decorator_list = []  # (functools.lru_cache: the stand-ins change between calls)
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), namespace)
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


def test_fp8_reads_the_block_quantised_file_and_else_the_block_default(tmp_path):
    fp8_name = config_file_name(32, 2048, "NVIDIA H200 NVL", "fp8_w8a8", [128, 128])
    assert fp8_name == "E=32,N=2048,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
    folder = tmp_path / "configs"
    write_configs(folder, fp8_name, {"1": tuned(16), "64": tuned(64)})
    write_configs(folder, config_file_name(32, 2048, "NVIDIA H200"), {"1": tuned(128)})  # the bf16 file
    assert choose_config(16, 32, 2048, "NVIDIA H200 NVL", [folder], "fp8") == (tuned(16), f"{fp8_name} [1]")
    assert choose_config(16, 32, 2048, "NVIDIA H200", [folder])[0]["BLOCK_SIZE_M"] == 128  # bf16 keeps its own
    assert choose_config(16, 32, 2048, H100, [folder], "fp8") == (default_fp8_block_config(16), "default")
    with pytest.raises(ValueError, match="weights_dtype"):
        choose_config(16, 32, 2048, H100, [folder], "int4")


def test_the_fp8_block_default_rule():
    """get_default_config's block-quantised branch on CUDA: K tile = the block's K, N tile 64 up to 8 tokens."""
    expected = {  # tokens: (BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M, num_stages)
        1: (16, 64, 1, 4), 4: (16, 64, 1, 4), 5: (16, 64, 1, 3), 8: (16, 64, 1, 3), 9: (16, 128, 1, 3),
        16: (16, 128, 1, 3), 17: (16, 128, 32, 3), 64: (16, 128, 32, 3), 65: (64, 128, 32, 3), 256: (64, 128, 32, 3)}
    for tokens, (block_m, block_n, group_m, stages) in expected.items():
        assert default_fp8_block_config(tokens) == {
            "BLOCK_SIZE_M": block_m, "BLOCK_SIZE_N": block_n, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": group_m,
            "SPLIT_K": 1, "num_warps": 4, "num_stages": stages}, tokens
    assert default_fp8_block_config(4, (96, 128))["BLOCK_SIZE_N"] == 96  # a block N not a multiple of 64 is kept


def test_swap_ab_on_hopper_only_for_thin_m_tiles():
    assert vllm_swap_ab({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64}, (9, 0))
    assert not vllm_swap_ab({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128}, (9, 0))
    assert not vllm_swap_ab({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32}, (9, 0))
    assert not vllm_swap_ab({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 128}, (10, 0))


@needs_vllm_source
def test_the_default_config_is_vllms():
    (vllm_default,) = vllm_functions(["get_default_config"], vllm_stand_ins())
    for experts in (8, 32, 64, 128, 256):
        for tokens in list(range(1, 600)) + [1024, 8192, 40000, 65536]:
            assert default_config(tokens, experts) == vllm_default(tokens, experts, 1408, 2048, 8, None), \
                (tokens, experts)
    for tokens in list(range(1, 600)) + [8192]:
        assert default_fp8_block_config(tokens) == vllm_default(tokens, 256, 2048, 7168, 8, "fp8_w8a8", [128, 128])


FUSED_MOE_UTILS = VLLM_SOURCE / "vllm/model_executor/layers/fused_moe/utils.py"


@pytest.mark.skipif(not FUSED_MOE_UTILS.is_file(), reason="vLLM 0.33's fused_moe/utils.py is not unpacked here")
def test_the_swap_ab_rule_is_vllms():
    for capability in ((9, 0), (8, 9), (10, 0)):
        platform = types.SimpleNamespace(is_device_capability=lambda c, capability=capability:
                                         c == 10 * capability[0] + capability[1])
        (enable_swap_ab,) = vllm_functions(["enable_swap_ab"], {"current_platform": platform}, FUSED_MOE_UTILS)
        for block_m in (16, 32, 64, 128):
            for block_n in (32, 64, 128, 256):
                config = {"BLOCK_SIZE_M": block_m, "BLOCK_SIZE_N": block_n}
                assert vllm_swap_ab(config, capability) == enable_swap_ab(block_m, block_n), (capability, config)


@needs_vllm_source
def test_vllms_fp8_files_for_the_preset():
    """The preset's fp8 shapes on H200 read vLLM's tuned file for the expert-parallel rank (E=32) and the default
    for all 256 experts; on H100 the default for both. BLOCK_SIZE_K is the block's K either way."""
    folders = [VLLM_SOURCE / moe_layer.CONFIGS_FOLDER]
    config, source = choose_config(16, 32, 2048, "NVIDIA H200", folders, "fp8")
    assert source == "E=32,N=2048,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json [16]"
    assert config["BLOCK_SIZE_K"] == 128
    assert choose_config(16, 256, 2048, "NVIDIA H200", folders, "fp8")[1] == "default"
    assert choose_config(16, 32, 2048, H100, folders, "fp8")[1] == "default"


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
    write_configs(folder, config_file_name(64, 1408, H100, "fp8_w8a8", [128, 128]), {"1": tuned(64), "64": tuned(16)})
    for experts in (64, 32):  # a tuned file, then none
        for tokens in (1, 2, 3, 12, 13, 24, 36, 37, 100, 152, 153, 4096):
            expected = vllm_choice((experts, 2816, 2048), (experts, 2048, 1408), 6, None, tokens)
            assert choose_config(tokens, experts, 1408, H100, [folder])[0] == expected, (experts, tokens)
            expected = vllm_choice((experts, 2816, 2048), (experts, 2048, 1408), 6, "fp8_w8a8", tokens, [128, 128])
            assert choose_config(tokens, experts, 1408, H100, [folder], "fp8")[0] == expected, (experts, tokens)


# --- fp8 w8a8 weights and activations ------------------------------------------------------------------------------

def test_weight_blocks_round_trip_within_e4m3s_rounding():
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(3, 256, 384, generator=gen)
    weight[0, :128, :128] *= 1e3  # blocks of very different ranges keep their own scales
    weight[1, 128:, 256:] *= 1e-4
    weight[2, :128, 128:256] = 0.0
    q, scales = quantize_weight_blocks(weight)
    assert q.dtype == FP8_DTYPE and q.shape == weight.shape
    assert scales.dtype == torch.float32 and scales.shape == (3, 2, 3)
    amax = weight.reshape(3, 2, 128, 3, 128).abs().amax(dim=(2, 4))
    assert torch.equal(scales[amax > 0], amax[amax > 0] / 448)
    back = dequantize_weight_blocks(q, scales)
    spread = scales.repeat_interleave(128, dim=1).repeat_interleave(128, dim=2)
    # e4m3: 3 mantissa bits (half a step: 2^-4 relative), subnormal steps of 2^-9 of the scale
    assert bool(((back - weight).abs() <= weight.abs() * 2 ** -4 + spread * 2 ** -10 + 1e-12).all())
    assert bool((back[2, :128, 128:256] == 0).all())  # a zero block stays zero, no NaN
    assert float((back - weight).abs().max()) > 0  # (it does round)
    largest = weight[0, :128, :128].abs().argmax()
    assert float(back[0, :128, :128].flatten()[largest].abs()) == pytest.approx(float(amax[0, 0, 0]), rel=1e-6)
    again, again_scales = quantize_weight_blocks(weight.clone())
    assert torch.equal(again.view(torch.uint8), q.view(torch.uint8)) and torch.equal(again_scales, scales)


def test_weight_blocks_refuse_sizes_off_the_block():
    with pytest.raises(ValueError, match="multiples of the block"):
        quantize_weight_blocks(torch.zeros(2, 200, 256))
    with pytest.raises(ValueError, match="multiples of the block"):
        quantize_weight_blocks(torch.zeros(256, 100))
    with pytest.raises(ValueError, match="intermediate"):
        LayerShape("m", 64, 2048, 1000, 6, 1, weights_dtype="fp8")
    with pytest.raises(ValueError, match="hidden"):
        LayerShape("m", 64, 2000, 1024, 6, 1, weights_dtype="fp8")
    with pytest.raises(ValueError, match="weights_dtype"):
        LayerShape("m", 64, 2048, 1024, 6, 1, weights_dtype="int8")
    with pytest.raises(ValueError, match="weights_dtype"):
        LayerShape("m", 64, 2048, 1024, 6, 1, dtype=torch.float16)  # "bf16" weights, fp16 activations


def test_fp8_weights_are_the_bf16_arms_quantised():
    bf16 = LayerShape("m", 4, 256, 128, 2, 1)
    fp8 = LayerShape("m", 4, 256, 128, 2, 1, weights_dtype="fp8")
    assert fp8.weights_key != bf16.weights_key and "fp8 w8a8" in fp8.label and "fp8" not in bf16.label
    plain, quantized = ExpertWeights.random(bf16, "cpu"), ExpertWeights.random(fp8, "cpu")
    assert plain.scales == {} and set(quantized.scales) == {"w13_scale", "w2_scale"}
    assert plain.w13.dtype == torch.bfloat16 and float(plain.w13.float().std()) == pytest.approx(256 ** -0.5, rel=0.05)
    assert float(plain.w2.float().std()) == pytest.approx(128 ** -0.5, rel=0.05)
    for name, scale_shape in (("w13", (4, 2, 2)), ("w2", (4, 2, 1))):
        q, scales = quantize_weight_blocks(getattr(plain, name))
        assert getattr(quantized, name).dtype == FP8_DTYPE
        assert torch.equal(getattr(quantized, name).view(torch.uint8), q.view(torch.uint8)), name
        assert getattr(quantized, f"{name}_scale").shape == scale_shape
        assert torch.equal(getattr(quantized, f"{name}_scale"), scales), name
    empty = ExpertWeights.empty(fp8, "cpu")
    assert empty.w13.dtype == FP8_DTYPE and empty.w2_scale.shape == quantized.w2_scale.shape


def test_group_quantisation_of_the_activations():
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    x[1, 128:] = 0
    q, scales = quantize_groups(x)
    assert q.dtype == FP8_DTYPE and scales.shape == (3, 2)
    amax = x.float().reshape(3, 2, 128).abs().amax(-1)
    assert torch.equal(scales, amax.clamp_min(1e-10) * (1.0 / 448))
    back = q.float() * scales.repeat_interleave(128, dim=1)
    assert bool(((back - x.float()).abs() <= x.float().abs() * 2 ** -4 + 1e-6).all())
    with pytest.raises(ValueError, match="multiple of 128"):
        quantize_groups(torch.zeros(2, 100))


def test_an_fp8_launch_refuses_what_vllm_would_assert():
    kernel = object()  # never reached
    a, b, c = torch.zeros(2, 256, dtype=FP8_DTYPE), torch.zeros(4, 256, 256, dtype=FP8_DTYPE), torch.zeros(2, 1, 256)
    ids, weights = torch.zeros(2, dtype=torch.int32), torch.ones(2, 1)
    config = default_fp8_block_config(2)
    args = (kernel, a, b, c, weights, None, ids, torch.tensor([32], dtype=torch.int32), False, 1, config)
    with pytest.raises(ValueError, match="B_scale must be"):
        moe_layer.launch_fused_moe(*args, A_scale=torch.ones(2, 2), B_scale=torch.ones(4, 2, 3))
    with pytest.raises(ValueError, match="A_scale must be"):
        moe_layer.launch_fused_moe(*args, A_scale=torch.ones(2, 1), B_scale=torch.ones(4, 2, 2))
    with pytest.raises(TypeError, match="fp8 w8a8"):
        moe_layer.launch_fused_moe(kernel, a.float(), *args[2:], A_scale=torch.ones(2, 2), B_scale=torch.ones(4, 2, 2))
    with pytest.raises(ValueError, match="B_scale too"):
        moe_layer.launch_fused_moe(*args, swap_ab=True)


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


FAKE_QUANT = """import triton
import triton.language as tl


def host():
    pass


@triton.jit
def _per_token_group_quant_fp8(y_ptr, y_q_ptr, y_s_ptr, group_size, y_num_columns, y_row_stride, eps,
                               fp8_min: tl.constexpr, fp8_max: tl.constexpr, use_ue8m0: tl.constexpr,
                               BLOCK: tl.constexpr):
    g = tl.program_id(0)
    tl.store(y_s_ptr + g, (group_size * 100000 + y_num_columns * 10 + BLOCK // 128 + use_ue8m0).to(tl.float32))
"""


def test_the_quantisation_kernel_comes_out_of_a_fp8_utils_file(tmp_path):
    """load_fp8_quant takes _per_token_group_quant_fp8 out of DIR's fp8_utils.py under the file's own name, and
    launch_group_quant binds its arguments as vLLM does (the fake kernel writes what it was given)."""
    path = tmp_path / moe_layer.FP8_UTILS_FILE
    path.parent.mkdir(parents=True)
    path.write_text(FAKE_QUANT)
    kernel, note = load_fp8_quant(tmp_path, (9, 0))
    assert note is None
    assert kernel.fn.__name__ == "_per_token_group_quant_fp8" and kernel.fn.__code__.co_filename == str(path)
    assert kernel.arg_names[:6] == ["y_ptr", "y_q_ptr", "y_s_ptr", "group_size", "y_num_columns", "y_row_stride"]
    if not ON_GPU:  # the interpreter runs it on CPU tensors
        x = torch.randn(3, 256, dtype=torch.bfloat16)
        x_q, x_s = moe_layer.launch_group_quant(kernel, x)
        assert x_q.dtype == FP8_DTYPE and x_q.shape == (3, 256)
        assert x_s.shape == (3, 2) and bool((x_s == 128 * 100000 + 256 * 10 + 1).all())  # every group, no UE8M0
    with pytest.raises(ValueError, match="multiple of 128"):
        moe_layer.launch_group_quant(kernel, torch.zeros(2, 200))


def test_without_the_quantisation_kernel_the_fp8_rows_are_a_note(tmp_path):
    """No fp8_utils.py, a file without the kernel, or a GPU without fp8: a note, never an exception; the bench
    returns the note and no rows for an fp8 shape and measures bf16 shapes as before."""
    kernel, note = load_fp8_quant(tmp_path / "no-vllm-here")
    assert kernel is None and note.startswith("fp8 w8a8 rows skipped") and "FileNotFoundError" in note
    assert moe_layer.FP8_UTILS_FILE in note
    path = tmp_path / moe_layer.FP8_UTILS_FILE
    path.parent.mkdir(parents=True)
    path.write_text("import triton\n\n@triton.jit\ndef _other(x_ptr):\n    pass\n")
    kernel, note = load_fp8_quant(tmp_path)
    assert kernel is None and "no @triton.jit function '_per_token_group_quant_fp8'" in note
    kernel, note = load_fp8_quant(tmp_path, (8, 0))
    assert kernel is None and "compute capability 8.0" in note
    bench = object.__new__(moe_layer.LayerBench)  # (its constructor needs a GPU; measure's skip does not)
    bench.fp8_note = note
    fp8_shape = next(shape for shape in LAYER_SHAPES if shape.fp8)
    assert bench.measure(fp8_shape) == ([], [note])
    assert bench.skip_note(LAYER_SHAPES[0]) is None


@needs_vllm_source
def test_vllms_quantisation_kernel_loads_from_its_file():
    kernel, note = load_fp8_quant(VLLM_SOURCE, (9, 0))
    assert note is None and kernel.fn.__code__.co_filename == str(FP8_UTILS.resolve())
    assert set(extract_jit_functions(FP8_UTILS, "_per_token_group_quant_fp8")) == {"_per_token_group_quant_fp8"}


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


class LaunchRecorder:
    """Stands in for a Triton kernel: records each launch's grid and arguments instead of running it."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((grid, args, kwargs))

    def bound(self, names):
        grid, args, kwargs = self.launches[-1]
        return grid, {**dict(zip(names, args)), **kwargs}


@needs_vllm_source
def test_the_fp8_launches_pass_what_vllm_passes():
    """Each argument of fused_moe_kernel and _per_token_group_quant_fp8, by its name in vLLM's source, as vLLM's
    invoke_fused_moe_triton_kernel and per_token_group_quant_fp8 pass it for 128 x 128 blocks."""
    names = moe_layer.vllm_fused_moe_kernel(VLLM_SOURCE).arg_names
    recorder = LaunchRecorder()
    a, a_scale = torch.zeros(3, 512, dtype=FP8_DTYPE), torch.ones(3, 4)
    c = torch.zeros(3, 2, 384, dtype=torch.bfloat16)
    ids, weights, post_padded = torch.zeros(6, dtype=torch.int32), torch.ones(3, 2), torch.tensor([96])
    config = dict(default_fp8_block_config(3), BLOCK_SIZE_K=256)
    for rows, scale_rows, stride_bsn in ((384, 3, 4), (128, 1, 0)):  # a B_scale of one N block: vLLM's stride 0
        b, b_scale = torch.zeros(4, rows, 512, dtype=FP8_DTYPE), torch.ones(4, scale_rows, 4)
        moe_layer.launch_fused_moe(recorder, a, b, c[..., :rows], weights, None, ids, post_padded, True, 2, config,
                                   A_scale=a_scale, B_scale=b_scale, swap_ab=True)
        grid, bound = recorder.bound(names)
        assert set(bound) - set(names) == {"num_warps", "num_stages"} and set(names) <= set(bound)
        assert bound["a_scale_ptr"] is a_scale and bound["b_scale_ptr"] is b_scale and bound["b_bias_ptr"] is None
        assert (bound["stride_asm"], bound["stride_ask"]) == (4, 1)
        assert (bound["stride_bse"], bound["stride_bsk"], bound["stride_bsn"]) == (4 * scale_rows, 1, stride_bsn)
        assert (bound["group_n"], bound["group_k"], bound["BLOCK_SIZE_K"]) == (128, 128, 128)
        assert bound["use_fp8_w8a8"] and not (bound["use_int8_w8a8"] or bound["per_channel_quant"])
        assert bound["SWAP_AB"] and not bound["USE_TD"] and bound["compute_type"] == moe_layer.tl.bfloat16
        assert (bound["N"], bound["K"], bound["EM"], bound["num_valid_tokens"]) == (rows, 512, 6 * 16, 6)
        assert grid == (6 * triton.cdiv(rows, config["BLOCK_SIZE_N"]),)

    names = load_fp8_quant(VLLM_SOURCE)[0].arg_names
    x = torch.zeros(3, 640, dtype=torch.bfloat16)
    x_q, x_s = moe_layer.launch_group_quant(recorder, x)
    grid, bound = recorder.bound(names)
    assert grid == (15,) and bound["y_ptr"] is x and bound["y_q_ptr"] is x_q and bound["y_s_ptr"] is x_s
    assert x_s.shape == (3, 5) and x_s.stride() == (5, 1)  # row-major scales, as fused_experts asks
    assert (bound["group_size"], bound["y_num_columns"], bound["y_row_stride"], bound["eps"]) == (128, 640, 640, 1e-10)
    assert (bound["fp8_min"], bound["fp8_max"], bound["use_ue8m0"], bound["BLOCK"]) == (-448.0, 448.0, False, 128)
    assert (bound["num_warps"], bound["num_stages"]) == (1, 1)


@needs_vllm_source
@pytest.mark.skipif(ON_GPU, reason="the interpreter check runs on CPU; the GPU runs the preset's own check")
@pytest.mark.parametrize("tokens, local, swap_ab", [(1, 0, True), (3, 4, True), (3, 0, False)])
def test_the_fp8_layer_in_the_interpreter_matches_float32(tokens, local, swap_ab, interpreter_scalars):
    """vLLM's kernel launched for fp8 w8a8 in 128 x 128 blocks (both A/B orders), on activations quantised per token
    group as vLLM's kernel quantises them, gives the w8a8 layer in float32 (weights dequantised block by block)."""
    kernel = moe_layer.vllm_fused_moe_kernel(VLLM_SOURCE)
    experts, topk, hidden_size, n = 8, 2, 256, 128
    gen = torch.Generator().manual_seed(10 * tokens + local)
    hidden = torch.randn(tokens, hidden_size, generator=gen)
    held = local or experts
    w13, w13_scale = quantize_weight_blocks(torch.randn(held, 2 * n, hidden_size, generator=gen) / hidden_size ** 0.5)
    w2, w2_scale = quantize_weight_blocks(torch.randn(held, hidden_size, n, generator=gen) / n ** 0.5)
    logits = torch.randn(tokens, experts, generator=gen)
    expert_map = None
    if local:
        expert_map = torch.full((experts,), -1, dtype=torch.int32)
        expert_map[:local] = torch.arange(local, dtype=torch.int32)
    config = default_fp8_block_config(tokens)
    plan = moe_routing.route_plan(logits, topk, scoring_func="softmax", block_size=config["BLOCK_SIZE_M"],
                                  expert_map=expert_map, ignore_invalid_experts=local > 0)
    fp8 = dict(w13_scale=w13_scale, w2_scale=w2_scale, quantize=lambda x, warmup=False: quantize_groups(x),
               swap_ab=swap_ab)
    out = run_experts(kernel, hidden, w13, w2, plan.weights, *plan[2:5], config, local > 0, **fp8)
    expected = reference_layer(hidden, w13, w2, plan.weights, plan.ids, expert_map, w13_scale, w2_scale)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    unquantized = reference_layer(hidden, w13.float(), w2.float(), plan.weights, plan.ids, expert_map)
    assert not torch.allclose(out, unquantized, atol=1e-3)  # (the scales are applied)
    if vllm_per_pair_blocks(tokens, topk, experts, local > 0):
        post_padded = torch.tensor([plan.ids.numel() * config["BLOCK_SIZE_M"]], dtype=torch.int32)
        per_pair = run_experts(kernel, hidden, w13, w2, plan.weights, None, plan.ids.view(-1), post_padded, config,
                               False, **fp8)
        assert torch.equal(per_pair, out)


@needs_vllm_source
@pytest.mark.skipif(ON_GPU, reason="the GPU runs it in the preset")
def test_vllms_quantisation_kernel_in_the_interpreter(interpreter_scalars):
    """vLLM's _per_token_group_quant_fp8 as launch_group_quant launches it: the scales quantize_groups computes, and
    its values where the interpreter's own e4m3 cast can be trusted (Triton 3.6's interpreter rounds a value just
    under a power of two down a binade; the GPU's cast rounds to nearest)."""
    kernel, _ = load_fp8_quant(VLLM_SOURCE)
    x = torch.randn(5, 384, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    x_q, x_s = moe_layer.launch_group_quant(kernel, x)
    q, scales = quantize_groups(x)
    assert x_q.dtype == FP8_DTYPE and torch.equal(x_s, scales)
    trusted = torch.frexp(q.float())[0].abs() != 0.5
    assert float(trusted.float().mean()) > 0.8
    assert torch.equal(x_q.float()[trusted], q.float()[trusted])


# --- the preset and its table -------------------------------------------------------------------------------------

def test_the_preset_holds_the_four_layers_at_five_token_counts_and_deepseek_v3_in_fp8():
    assert PRESETS["moe-layer"] == LAYER_SHAPES and len(LAYER_SHAPES) == 30
    shapes = [s for s in LAYER_SHAPES if not s.fp8]
    assert len(shapes) == 20 and {s.weights_dtype for s in shapes} == {"bf16"}
    fp8 = [s for s in LAYER_SHAPES if s.fp8]
    assert [(s.model, s.local_experts, s.tokens) for s in fp8] == [
        ("DeepSeek-V3", local, t) for local in (0, 32) for t in (1, 4, 16, 64, 256)]
    for shape in fp8:  # the bf16 shape of the same layer, weights quantised
        twin = next(s for s in shapes if s.label == shape.label.replace(" fp8 w8a8", "") and s.tokens == shape.tokens)
        assert shape == dataclasses.replace(twin, weights_dtype="fp8") and shape.weights_key != twin.weights_key
        assert shape.label.startswith("DeepSeek-V3 fp8 w8a8 (256 / 8, H 7168, N 2048)")
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
    assert not any("fp8" in line for line in lines)


def test_the_layer_table_labels_the_fp8_rows():
    bf16 = next(s for s in LAYER_SHAPES if s.model == "DeepSeek-V3" and not s.fp8 and s.tokens == 16)
    fp8 = dataclasses.replace(bf16, weights_dtype="fp8")
    rows = []
    for shape, config, outputs_equal in ((bf16, "default", True), (fp8, "default", False)):
        common = {**moe_layer._fields(shape), "config": config, "block_size_m": 16, "vllm_blocks": "align",
                  "ids_equal": True, "ids_same_sets": True, "weights_equal": True, "weights_max_diff": 0.0,
                  "outputs_bitwise_equal": outputs_equal, "outputs_max_diff": 0.0 if outputs_equal else 2e-3,
                  "outputs_finite": True, "experts_used": 80, "vllm_rel_error": 1e-2, "ours_rel_error": 1e-2}
        times = {"vLLM layer": 300.0, "moe_routing layer": 290.0, "vLLM stage": 20.0, "moe_routing stage": 10.0}
        rows += [{**common, "arm": arm, "device_median": t, "device_drift": 0.01} for arm, t in times.items()]
    assert rows[-1]["weights_dtype"] == "fp8" and rows[-1]["block_shape"] == [128, 128]
    assert rows[0]["weights_dtype"] == "bf16" and rows[0]["block_shape"] is None
    lines = layer_comparison({"rows": rows})
    table = [line for line in lines if line.startswith("| DeepSeek-V3")]
    assert [line.split("|")[1].strip() for line in table] == [
        "DeepSeek-V3 (256 / 8, H 7168, N 2048)", "DeepSeek-V3 fp8 w8a8 (256 / 8, H 7168, N 2048)"]
    assert "outputs Δ 2.0e-03" in table[1] and "outputs bitwise equal" in table[0]
    assert any("fp8 w8a8 rows: e4m3 weights in 128 x 128 blocks" in line for line in lines)


@pytest.mark.skipif(not ON_GPU or not FUSED_MOE.is_file(), reason="needs a GPU and vLLM's source")
def test_one_layer_row_on_the_gpu():
    from moe_routing.measure.arms import ENGINE_SOURCES

    ENGINE_SOURCES["vllm"] = str(VLLM_SOURCE)
    shape = LAYER_SHAPES[0]
    bench = moe_layer.LayerBench([shape], rounds=1, calls_per_graph=4, replays=2)
    rows, notes = bench.measure(shape)
    assert {r["arm"] for r in rows} == set(moe_layer.ARMS) and not notes
    assert rows[0]["outputs_finite"] and rows[0]["ours_rel_error"] < 2e-2 and rows[0]["vllm_rel_error"] < 2e-2


@pytest.mark.skipif(not ON_GPU or not FP8_UTILS.is_file(), reason="needs a GPU and vLLM's source")
def test_one_fp8_layer_row_on_the_gpu():
    """DeepSeek-V3's expert-parallel rank in fp8 w8a8 at 16 tokens (vLLM aligns): vLLM's kernels on both arms give
    the w8a8 layer, and equal ids and weights give bitwise equal outputs."""
    from moe_routing.measure.arms import ENGINE_SOURCES

    ENGINE_SOURCES["vllm"] = str(VLLM_SOURCE)
    shape = next(s for s in LAYER_SHAPES if s.fp8 and s.mapped and s.tokens == 16)
    bench = moe_layer.LayerBench([shape], rounds=1, calls_per_graph=4, replays=2)
    assert bench.fp8_note is None
    rows, notes = bench.measure(shape)
    assert {r["arm"] for r in rows} == set(moe_layer.ARMS) and not notes
    row = rows[0]
    assert row["weights_dtype"] == "fp8" and row["outputs_finite"] and row["experts_used"] > 0
    assert row["ours_rel_error"] < 2e-2 and row["vllm_rel_error"] < 2e-2
    assert row["outputs_bitwise_equal"] or not (row["ids_equal"] and row["weights_equal"])
    assert row["swap_ab"] == moe_layer.vllm_swap_ab(row["config_values"], torch.cuda.get_device_capability())
