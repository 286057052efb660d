"""``moe-routing e2e``: decode throughput of a transformers model, its own routing vs ``route()``.

A DeepSeek-V3-architecture model with random weights and the real routing shape (256 experts, 8 groups
keep 4, top-8, a random correction bias) but few layers and a small hidden size, in bf16 on the GPU.
Three arms: the model as transformers runs it, its routers patched, and its routers patched with its experts
switched to the ``moe_routing`` experts implementation (the plan from ``group()``). Arms alternate A B C A B C;
every block starts from a fresh KV cache and prefill, then times ``steps`` greedy decode steps (wall time around the
loop, synchronised). Reports tokens/s per arm (median over blocks) with the same-arm drift, and the routing share of
one decode step: the routers' eager time per step (timed alone with CUDA events at the step's token count) over the
step's time.
"""

from __future__ import annotations

import gc
import statistics
import time

import torch


def e2e_config(layers: int = 4, hidden: int = 512):
    import transformers

    return transformers.DeepseekV3Config(
        vocab_size=4096, hidden_size=hidden, intermediate_size=4 * hidden, moe_intermediate_size=hidden // 4,
        num_hidden_layers=layers, first_k_dense_replace=1, n_routed_experts=256, num_experts_per_tok=8,
        n_group=8, topk_group=4, n_shared_experts=1, routed_scaling_factor=2.5, num_attention_heads=8,
        num_key_value_heads=8, kv_lora_rank=64, q_lora_rank=None, qk_nope_head_dim=32, qk_rope_head_dim=16,
        v_head_dim=32, head_dim=16, max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )


def build_model(layers: int, hidden: int, experts_implementation: str | None, seed: int = 0):
    import transformers

    torch.manual_seed(seed)
    config = e2e_config(layers, hidden)
    if experts_implementation:
        config._experts_implementation = experts_implementation
    with torch.device("cuda"):  # weights made on the GPU: a CPU initialisation of billions of them takes minutes
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    for module in model.modules():
        bias = getattr(module, "e_score_correction_bias", None)
        if isinstance(bias, torch.Tensor):
            with torch.no_grad():
                bias.normal_(0.0, 0.05)
    return model


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def decode_block(model, batch: int, prompt: int, steps: int, seed: int) -> float:
    """Fresh cache and prefill, then ``steps`` greedy decode steps; returns decoded tokens per second."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (batch, prompt), generator=gen).to(device)
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids, past_key_values=cache, use_cache=True)
    token = out.logits[:, -1:].argmax(-1)
    _sync(device)
    gc.disable()  # a collection inside a block is noise, not routing
    try:
        begin = time.perf_counter()
        for _ in range(steps):
            out = model(input_ids=token, past_key_values=cache, use_cache=True)
            token = out.logits[:, -1:].argmax(-1)
        _sync(device)
        return batch * steps / (time.perf_counter() - begin)
    finally:
        gc.enable()


@torch.no_grad()
def router_step_us(model, batch: int, calls: int = 100, repeats: int = 5) -> float:
    """Eager time (µs) of all of the model's routers for one decode step of ``batch`` tokens (median)."""
    from ..integrations.transformers import supported

    routers = [m for m in model.modules() if supported(m)]
    hidden = torch.randn(batch, model.config.hidden_size, device="cuda", dtype=torch.bfloat16)
    for router in routers:
        router(hidden)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        for _ in range(calls):
            for router in routers:
                router(hidden)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / calls)
    return statistics.median(times)


def run_e2e(layers: int = 4, hidden: int = 512, batch: int = 8, prompt: int = 64, steps: int = 64,
            rounds: int = 6, experts_implementation: str | None = "grouped_mm", log=print) -> dict:
    from ..integrations.transformers import patch, unpatch
    from .shadow import run_shadow

    try:
        model = build_model(layers, hidden, experts_implementation)
        decode_block(model, 1, 4, 1, seed=0)
    except Exception as error:  # an experts implementation this torch lacks: the model's default
        log(f"experts implementation {experts_implementation!r} unavailable ({type(error).__name__}); default")
        experts_implementation = None
        model = build_model(layers, hidden, None)
    # patch() keywords of each arm: the routers alone, then the routers and the experts' dispatch plan
    arms = {"transformers routing": None, "moe_routing replace": dict(mode="replace", experts=False),
            "moe_routing replace + experts": dict(mode="replace", experts=True)}
    tokens_per_s = {name: [] for name in arms}
    router_us = {name: [] for name in arms}
    for mode in arms.values():  # one full untimed block per arm first (kernels, allocator, caches)
        if mode:
            patch(model, **mode)
        decode_block(model, batch, prompt, steps, seed=99)
        router_step_us(model, batch, calls=20, repeats=1)
        unpatch(model)
    for r in range(rounds):
        for name, mode in arms.items():
            if mode:
                patch(model, **mode)
            tokens_per_s[name].append(decode_block(model, batch, prompt, steps, seed=r))
            router_us[name].append(router_step_us(model, batch))
            unpatch(model)
            log(f"round {r}: {name}: {tokens_per_s[name][-1]:.1f} tokens/s, routers {router_us[name][-1]:.1f} µs/step")
    result = {"gpu": torch.cuda.get_device_name(), "layers": layers, "hidden": hidden, "batch": batch,
              "prompt": prompt, "steps": steps, "rounds": rounds, "experts_implementation": experts_implementation,
              "arms": {}}
    for name in arms:
        tps, rus = tokens_per_s[name], router_us[name]
        med = statistics.median(tps)
        step_us = batch / med * 1e6
        result["arms"][name] = {
            "tokens_per_s": tps, "median_tokens_per_s": med, "drift": (max(tps) - min(tps)) / med,
            "router_us_per_step": statistics.median(rus), "step_us": step_us,
            "routing_share": statistics.median(rus) / step_us,
        }
    names = list(arms)
    base = result["arms"][names[0]]["median_tokens_per_s"]
    drift = max(result["arms"][n]["drift"] for n in arms)
    result["speedup"] = {n: result["arms"][n]["median_tokens_per_s"] / base for n in names[1:]}
    result["claim"] = {n: (f"{100 * (ratio - 1):+.1f}% decode tokens/s" if abs(ratio - 1) > drift
                           else f"no difference beyond the same-arm drift ({100 * drift:.1f}%)")
                       for n, ratio in result["speedup"].items()}
    recorder = run_shadow(model, prompts=batch, prompt_tokens=prompt, new_tokens=8)
    result["shadow"] = recorder.summary()
    return result


def e2e_markdown(result: dict) -> str:
    lines = [
        f"Model: DeepSeek-V3 architecture, random weights, {result['layers']} layers (first dense), hidden "
        f"{result['hidden']}, 256 experts, 8 groups keep 4, top-8, bf16, experts implementation "
        f"`{result['experts_implementation']}`; batch {result['batch']}, prompt {result['prompt']}, "
        f"{result['steps']} greedy decode steps per block, {result['rounds']} interleaved rounds on {result['gpu']}.",
        "",
        "| arm | decode tokens/s (median) | same-arm drift | routers µs / step | step µs | routing share |",
        "|---|---|---|---|---|---|",
    ]
    for name, arm in result["arms"].items():
        lines.append(f"| {name} | {arm['median_tokens_per_s']:.1f} | {100 * arm['drift']:.1f}% | "
                     f"{arm['router_us_per_step']:.1f} | {arm['step_us']:.0f} | {100 * arm['routing_share']:.1f}% |")
    claims = "; ".join(f"{name}: {claim}" for name, claim in result["claim"].items())
    lines += ["", f"Against transformers' own routing and experts: {claims}.", "",
              "Shadow comparison on the same model: " + ", ".join(f"{k} {v}" for k, v in result["shadow"].items())]
    return "\n".join(lines) + "\n"
