"""Long-prompt datasets for ``vllm bench serve --dataset-name custom`` whose token ids are all valid.

vLLM's random dataset samples token ids up to the tokenizer's vocabulary size, which can exceed the
model's embedding (``config.vocab_size``) and crash the embedding gather at long prompt lengths. These
prompts are real English text instead: Python's own documentation topics (``pydoc_data.topics``,
shipped with CPython), cut into windows of the model's tokens, kept only where every id of the
re-tokenised text is below ``config.vocab_size`` and the length is exact.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


def corpus() -> str:
    """About 0.7 MB of English prose from CPython's bundled documentation topics."""
    from pydoc_data.topics import topics

    return "\n\n".join(text.strip() for _, text in sorted(topics.items()))


@dataclass
class PromptSet:
    prompts: list[str]
    max_token_id: int  # over all prompts, re-tokenised the way a server will
    vocab_size: int  # the model's config.vocab_size
    rejected: int  # windows dropped: an id >= vocab_size, or a length change on re-tokenising


def make_prompts(tokenizer, vocab_size: int, tokens: int, count: int, seed: int = 0) -> PromptSet:
    """``count`` prompts of exactly ``tokens`` tokens (as ``tokenizer`` encodes them, no special tokens)."""
    import random

    if tokens < 1 or count < 1:
        raise ValueError("tokens and count must be >= 1")
    ids = tokenizer.encode(corpus(), add_special_tokens=False)
    if len(ids) < tokens + 1:
        raise ValueError(f"the corpus has {len(ids)} tokens, fewer than one prompt of {tokens}")
    rng = random.Random(seed)
    prompts, rejected, max_id = [], 0, 0
    attempts = 0
    while len(prompts) < count:
        attempts += 1
        if attempts > 50 * count + 1000:
            raise ValueError(f"only {len(prompts)} of {count} prompts fit vocab_size={vocab_size}")
        start = rng.randrange(0, len(ids) - tokens)
        text = tokenizer.decode(ids[start:start + tokens])
        again = tokenizer.encode(text, add_special_tokens=False)
        if len(again) != tokens or max(again) >= vocab_size:
            rejected += 1
            continue
        prompts.append(text)
        max_id = max(max_id, max(again))
    return PromptSet(prompts, max_id, vocab_size, rejected)


def write_custom_dataset(path: Path, prompt_set: PromptSet, output_tokens: int | None = None) -> None:
    """JSON lines with a "prompt" field (and "output_tokens" if given), as vLLM's custom dataset reads."""
    with Path(path).open("w") as f:
        for text in prompt_set.prompts:
            record = {"prompt": text}
            if output_tokens is not None:
                record["output_tokens"] = output_tokens
            f.write(json.dumps(record) + "\n")
