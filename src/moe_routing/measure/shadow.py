"""``moe-routing shadow``: run a model in shadow mode and tabulate how route() compares with its routing.

The model is a local directory, or a tiny embedded configuration per family built with random weights
(``from_config``: nothing is downloaded). Tiny DeepSeek-style models get a random correction bias (a
fresh model's is zero), so that the bias and group stages matter as in a trained model.
"""

from __future__ import annotations

import torch

TINY_FAMILIES = ("deepseek_v3", "glm4_moe", "qwen3_moe", "mixtral", "gpt_oss")


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
    raise ValueError(f"family must be one of {', '.join(TINY_FAMILIES)}, got {family!r}")


def tiny_model(family: str, seed: int = 0, dtype: torch.dtype = torch.float32, device: str = "cpu"):
    """A tiny model of ``family`` with random weights (and, for DeepSeek-style routers, a random bias)."""
    import transformers

    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(family), dtype=dtype)
    for module in model.modules():
        bias = getattr(module, "e_score_correction_bias", None)
        if isinstance(bias, torch.Tensor):
            with torch.no_grad():
                bias.normal_(0.0, 0.05)
    return model.to(device).eval()


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


def run_shadow(model, prompts: int = 4, prompt_tokens: int = 32, new_tokens: int = 8, seed: int = 0):
    """Prefill random prompts and decode a few tokens in shadow mode; returns the recorder."""
    from ..integrations.transformers import patch, unpatch

    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, model.config.vocab_size, (prompts, prompt_tokens), generator=gen).to(device)
    recorder = patch(model, "shadow")
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
        rows.append({"model": name, **summary})
    return rows
