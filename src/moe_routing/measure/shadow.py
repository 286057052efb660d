"""``moe-routing shadow``: run a model in shadow mode and tabulate how route() compares with its routing.

The model is a local directory, or a tiny embedded configuration per family built with random weights
(``from_config``: nothing is downloaded). Routers get a random correction bias (a fresh model's is zero), so
that the bias and group stages matter as in a trained model, and DeepSeek-V4's hash layers a random table.

``TINY_FAMILIES`` have their models' real routing shapes (experts, top-k, groups); ``PATTERN_FAMILIES`` are every
transformers family whose router ``patch()`` serves, each from its own configuration class with small sizes
(16 experts, top-4, 4 groups keep 2 where it groups), for the tests and ``moe-routing shadow --family``.
"""

from __future__ import annotations

import torch

TINY_FAMILIES = ("deepseek_v3", "glm4_moe", "qwen3_moe", "mixtral", "gpt_oss", "deepseek_v4")

# model type -> the class its router is, by pattern (integrations.transformers.FAMILIES)
PATTERN_FAMILIES = (
    # P1: sigmoid + bias, groups by top-2 sums
    "deepseek_v3", "deepseek_v32", "kimi_linear", "glm4_moe", "glm4_moe_lite", "glm4v_moe", "glm5_next",
    "glm_moe_dsa", "hy_v4", "exaone_moe", "mimo_v2_flash", "solar_open", "nemotron_h", "axk1", "dots1",
    # P2: softmax, then top-k
    "qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe", "qwen3_vl_moe", "olmoe", "flex_olmo", "mellum", "mixtral",
    "minimax", "hunyuan_v1_moe", "jamba",
    # P3: top-k of the logits, then softmax over the k
    "gpt_oss", "granitemoe", "granitemoeshared", "granitemoehybrid", "jetmoe", "aria",
    # P4: sigmoid + bias, no groups
    "minimax_m2", "minimax_m3_vl", "step3p7", "laguna", "hy_v3", "afmoe", "lfm2_moe",
    # DeepSeek-V4: sqrt-softplus top-k and hash layers
    "deepseek_v4",
)
_EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
_PER_FAMILY = {  # what the common small sizes need besides, per family
    "jamba": dict(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=1, expert_layer_offset=0,
                  use_mamba_kernels=False, mamba_dt_rank=8),
    "granitemoehybrid": dict(layer_types=["mamba", "attention"], mamba_n_heads=4, mamba_d_head=16, mamba_d_state=16,
                             mamba_chunk_size=16, shared_intermediate_size=32),
    "lfm2_moe": dict(layer_types=["conv", "full_attention"], num_dense_layers=0),
    "dots1": dict(n_shared_experts=1),
    "deepseek_v4": dict(mlp_layer_types=["hash_moe", "moe"], layer_types=["sliding_attention", "sliding_attention"],
                        q_lora_rank=16, o_lora_rank=16, o_groups=1, index_n_heads=2, index_head_dim=16,
                        num_nextn_predict_layers=0),
}


def pattern_config(family: str):
    """A small config of ``family`` (a transformers model type) from its own configuration class."""
    from transformers import AutoConfig

    base = AutoConfig.for_model(family)
    text = getattr(base, "text_config", None)
    defaults = (text or base).to_dict()
    sizes = dict(hidden_size=32, intermediate_size=32, moe_intermediate_size=16, num_hidden_layers=2,
                 num_attention_heads=2, num_key_value_heads=1, head_dim=16, vocab_size=64, num_experts_per_tok=4,
                 max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                 first_k_dense_replace=0, n_group=4, num_expert_group=4, topk_group=2, moe_topk=4,
                 num_experts_per_token=4, sliding_window=64, num_sliding_attention_heads=2,
                 kv_lora_rank=16, q_lora_rank=None, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
    sizes.update({key: 16 for key in _EXPERT_KEYS})
    if defaults.get("qk_rope_head_dim"):  # multi-head latent attention with a rotary part: kv heads as heads
        sizes.update(head_dim=24 if family == "deepseek_v4" else 8, num_key_value_heads=2)
    elif defaults.get("qk_rope_head_dim") == 0:  # without one: the model's head dims, halved to 16
        sizes.update(qk_rope_head_dim=0, head_dim=0, qk_head_dim=16, qk_nope_head_dim=16, v_head_dim=16,
                     index_head_dim=16, num_key_value_heads=2)
    if defaults.get("q_lora_rank") is not None:
        sizes["q_lora_rank"] = 16
    for key, value in defaults.items():  # per-layer lists of the default depth: two layers
        if isinstance(value, list) and len(value) == defaults.get("num_hidden_layers") and key.endswith("types"):
            if key == "layer_types":  # two kinds of layer where the model mixes them (full attention among them)
                kinds = list(dict.fromkeys(value))
                sizes[key] = (kinds + kinds)[:2]
            else:  # the last layer routed
                routed = [v for v in value if v not in ("dense", "mlp")]
                sizes[key] = [value[0], routed[-1] if routed else value[-1]]
    rope = defaults.get("rope_parameters")
    if isinstance(rope, dict) and family == "glm4v_moe":  # its multimodal rotary sections, for 16-wide heads
        sizes["rope_parameters"] = {**rope, "mrope_section": [2, 1, 1]}
    sizes.update(_PER_FAMILY.get(family, {}))
    kept = {k: v for k, v in sizes.items() if k in defaults}
    if text is not None:
        return AutoConfig.for_model(family, text_config={**text.to_dict(), **kept})
    return AutoConfig.for_model(family, **kept)


def tiny_config(family: str):
    """A small config of ``family`` with the real routing shape (experts, top-k, groups) of its models."""
    import transformers

    common = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    if family == "deepseek_v3":  # DeepSeek-V3 / R1 routing: 256 experts, 8 groups keep 4, top-8
        return transformers.DeepseekV3Config(
            **{**common, "num_key_value_heads": 4}, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            moe_intermediate_size=16, n_routed_experts=256, num_experts_per_tok=8, n_group=8,
            topk_group=4, n_shared_experts=1, first_k_dense_replace=0, routed_scaling_factor=2.5,
            kv_lora_rank=16, q_lora_rank=None, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, head_dim=8)
    if family == "glm4_moe":  # GLM-4.5 routing: 160 experts, top-8, no group elimination
        return transformers.Glm4MoeConfig(
            **common, moe_intermediate_size=16, n_routed_experts=160, num_experts_per_tok=8, n_group=1,
            topk_group=1, n_shared_experts=1, first_k_dense_replace=0, routed_scaling_factor=2.5, head_dim=16)
    if family == "qwen3_moe":  # Qwen3-30B-A3B routing: 128 experts, top-8, softmax, renormalised
        return transformers.Qwen3MoeConfig(**common, moe_intermediate_size=16, num_experts=128,
                                           num_experts_per_tok=8, norm_topk_prob=True, head_dim=16)
    if family == "mixtral":  # Mixtral routing: 8 experts, top-2
        return transformers.MixtralConfig(**common, num_local_experts=8, num_experts_per_tok=2)
    if family == "gpt_oss":  # gpt-oss-20b routing: 32 experts, top-4
        # the default YaRN factor 32 over 4096 positions: max_position_embeddings as the checkpoints have it
        return transformers.GptOssConfig(**{**common, "max_position_embeddings": 131072}, num_local_experts=32,
                                         num_experts_per_tok=4, head_dim=16, sliding_window=64,
                                         layer_types=["sliding_attention", "full_attention"])
    if family == "deepseek_v4":  # DeepSeek-V4 routing: 256 experts, top-6, sqrt-softplus, scale 1.5, a hash layer
        return transformers.DeepseekV4Config(
            **{**common, "num_key_value_heads": 1}, moe_intermediate_size=16, n_routed_experts=256,
            num_experts_per_tok=6, routed_scaling_factor=1.5, scoring_func="sqrtsoftplus", head_dim=32,
            qk_rope_head_dim=8, q_lora_rank=16, o_lora_rank=16, o_groups=1, index_n_heads=2, index_head_dim=16,
            num_nextn_predict_layers=0, mlp_layer_types=["hash_moe", "moe"],
            layer_types=["sliding_attention", "sliding_attention"])
    if family in PATTERN_FAMILIES:
        return pattern_config(family)
    raise ValueError(f"family must be one of {', '.join(sorted(set(TINY_FAMILIES + PATTERN_FAMILIES)))}, "
                     f"got {family!r}")


def tiny_model(family: str, seed: int = 0, dtype: torch.dtype = torch.float32, device: str = "cpu",
               small: bool = False):
    """A tiny model of ``family`` with random weights, a random correction bias and random hash tables:
    ``TINY_FAMILIES`` at their real routing shapes, any of ``PATTERN_FAMILIES`` at small ones (``small``, or a
    family without a real-shape config here)."""
    import transformers

    torch.manual_seed(seed)
    config = pattern_config(family) if small or family not in TINY_FAMILIES else tiny_config(family)
    try:
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    except ValueError:  # a multimodal configuration: its language model
        model = _text_model_class(family, config.get_text_config())._from_config(config.get_text_config(),
                                                                                 dtype=dtype)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for module in model.modules():
            for name in ("e_score_correction_bias", "expert_bias"):
                bias = getattr(module, name, None)
                if isinstance(bias, torch.Tensor) and bias.is_floating_point():
                    bias.copy_(torch.randn(bias.shape, generator=generator) * 0.05)
            table = getattr(module, "tid2eid", None)
            if isinstance(table, torch.Tensor):
                experts = module.weight.shape[0]
                table.copy_(torch.stack([torch.randperm(experts, generator=generator)[: table.shape[1]]
                                         for _ in range(table.shape[0])]))
    return model.to(device).eval()


def _text_model_class(family: str, text_config):
    """The language-model class of a multimodal ``family`` (its causal LM where it has one)."""
    import importlib

    modeling = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    candidates = [getattr(modeling, name) for name in dir(modeling)
                  if getattr(getattr(modeling, name), "config_class", None) is type(text_config)]
    candidates.sort(key=lambda cls: (not cls.__name__.endswith("ForCausalLM"), not cls.__name__.endswith("Model")))
    return candidates[0]


def router_inputs(family: str, device: str, *token_counts: int) -> list[tuple]:
    """(logits, bias, topk, scoring, groups, kept) of the router calls a tiny ``family`` model makes for each of
    ``token_counts`` (the report compiles their kernels ahead)."""
    from ..integrations.transformers import router_calls

    model = tiny_model(family, device=device)
    jobs = []
    for tokens in token_counts:
        for logits, kw in router_calls(model, tokens):
            jobs.append((logits, kw.get("correction_bias"), kw["topk"], kw["scoring_func"],
                         kw.get("num_expert_group", 1), kw.get("topk_group", 1)))
    return jobs


def load_model(path: str, device: str, dtype: torch.dtype = torch.bfloat16):
    """A local checkpoint directory (nothing is downloaded)."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    return model.to(device).eval()


def run_shadow(model, prompts: int = 4, prompt_tokens: int = 32, new_tokens: int = 8, seed: int = 0,
               experts: bool = True):
    """Prefill random prompts and decode a few tokens in shadow mode; returns the recorder (with ``experts``, the
    experts' dispatch plan shadowed too where the model can switch its experts: ``recorder.experts``)."""
    from ..integrations.transformers import patch, unpatch

    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, model.config.vocab_size, (prompts, prompt_tokens), generator=gen).to(device)
    recorder = patch(model, "shadow", experts=experts).recorder
    try:
        with torch.no_grad():
            model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=new_tokens,
                           min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    finally:
        unpatch(model)
    return recorder


def shadow_table(results: dict) -> list[dict]:
    """One table row per model: the recorder's summary."""
    rows = []
    for name, recorder in results.items():
        summary = recorder.summary()
        summary["max |Δweight|"] = f"{summary['max |Δweight|']:.1e}"
        if "experts max |Δoutput|" in summary:
            summary["experts max |Δoutput|"] = f"{summary['experts max |Δoutput|']:.1e}"
        rows.append({"model": name, **summary})
    return rows
