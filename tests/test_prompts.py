"""`moe-routing prompts`: exact lengths, every token id below config.vocab_size, vLLM's custom format."""

import json

import pytest
from click.testing import CliRunner

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

from moe_routing.cli import main  # noqa: E402
from moe_routing.integrations.prompts import corpus, make_prompts  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A local "model": a BPE tokenizer of 3000 tokens and a config whose embedding has only 2800 rows.

    About 1% of the corpus' tokens are ids >= 2800 (CPython 3.11 and 3.12 ship different documentation
    topics, hence different tokenizers): a window of 256 tokens is often, not always, valid. With 2500
    rows (3% of tokens invalid) almost no window was, and on 3.12 the search gave up.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders

    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator([corpus()], trainers.BpeTrainer(vocab_size=3000, special_tokens=["[UNK]"]))
    path = tmp_path_factory.mktemp("model")
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer).save_pretrained(path)
    transformers.MixtralConfig(vocab_size=2800).save_pretrained(path)
    return path


def test_prompts_have_exact_length_and_valid_ids(model_dir):
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    prompt_set = make_prompts(tok, 2800, 256, 12)
    assert len(prompt_set.prompts) == 12 and prompt_set.max_token_id < 2800
    assert len(tok) > 2800 and prompt_set.rejected > 0  # windows with invalid ids occurred and were dropped
    for text in prompt_set.prompts:
        ids = tok.encode(text, add_special_tokens=False)
        assert len(ids) == 256 and max(ids) < 2800
    assert len(set(prompt_set.prompts)) == 12


def test_prompts_command_writes_vllms_custom_dataset(model_dir, tmp_path):
    out = tmp_path / "p.jsonl"
    result = CliRunner().invoke(main, ["prompts", "--model", str(model_dir), "--tokens", "128", "--count", "5",
                                       "--output-tokens", "32", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "< config.vocab_size 2800" in result.output and "--dataset-name custom" in result.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 5 and all(set(r) == {"prompt", "output_tokens"} and r["output_tokens"] == 32
                                     for r in records)


def test_prompts_refuse_impossible_requests(model_dir):
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    with pytest.raises(ValueError, match="fit vocab_size"):
        make_prompts(tok, 10, 64, 3)  # no window keeps every id below 10
    with pytest.raises(ValueError, match=">= 1"):
        make_prompts(tok, 2800, 0, 3)
