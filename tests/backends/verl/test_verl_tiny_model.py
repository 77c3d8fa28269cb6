"""The tiny model of ``gppo.backends.verl.tiny.tiny_causal_lm`` as verl and vLLM load it: its tokenizer,
reloaded from the saved directory by transformers' ``AutoTokenizer`` (as verl and vLLM do),
encodes ``"\\n"`` to one token, round-trips text and applies its chat template; its config has
heads vLLM's CPU attention accepts."""

from __future__ import annotations

import json

import pytest
from transformers import AutoConfig, AutoTokenizer

from gppo.backends.verl.tiny import (
    MIN_HEAD_DIM,
    TINY_SPECIAL_TOKENS,
    tiny_causal_lm,
)

SAMPLES = ("12+34=\n", "What is 7*6? Answer: 42.\n\n", "  indented\tline\r\n", "héllo ✓ 数学")


@pytest.fixture(scope="module")
def reloaded(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_newline_is_exactly_one_token(reloaded):
    """verl/utils/tokenizer/continuous_token.py:558 raises unless "\\n" is one token."""
    assert reloaded.encode("\n", add_special_tokens=False) == [ord("\n")]


@pytest.mark.parametrize("text", SAMPLES)
def test_text_round_trips_through_bytes(reloaded, text):
    ids = reloaded.encode(text, add_special_tokens=False)
    assert ids == list(text.encode("utf-8"))
    assert reloaded.decode(ids) == text


def test_special_tokens_are_single_ids_matching_the_config(reloaded, tiny_model_dir):
    ids = [reloaded.convert_tokens_to_ids(token) for token in TINY_SPECIAL_TOKENS]
    assert ids == [256, 257, 258] and len(reloaded) == 259
    assert reloaded.encode("<|im_end|>", add_special_tokens=False) == [258]
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert (config["eos_token_id"], config["pad_token_id"]) == (
        reloaded.eos_token_id,
        reloaded.pad_token_id,
    )
    assert config["vocab_size"] >= len(reloaded)


def test_chat_template_renders_and_tokenizes(reloaded):
    messages = [{"role": "user", "content": "12+34="}]
    text = reloaded.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\n12+34=<|im_end|>\n<|im_start|>assistant\n"
    ids = reloaded.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert ids == reloaded.encode(text, add_special_tokens=False)
    assert reloaded.decode(ids) == text


def test_verls_qwen_continuous_token_builder_merges_a_turn_as_the_template_renders_it(reloaded):
    """The builder verl picks for Qwen2 (it checks "\\n" and ``<|im_end|>`` when built): a
    generation stopped at ``<|im_end|>``, then a new user turn, gives the tokens the chat template
    renders for the whole conversation (the missing newline inserted, nothing else)."""
    from verl.utils.tokenizer.continuous_token import QwenContinuousTokenBuilder

    builder = QwenContinuousTokenBuilder(reloaded)
    before = [{"role": "user", "content": "1+1="}, {"role": "assistant", "content": "2"}]
    after = [*before, {"role": "user", "content": "2+2="}]
    prompt = reloaded.apply_chat_template(
        before[:1], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    generated = prompt + reloaded.encode("2<|im_end|>", add_special_tokens=False)
    merged = builder.merge_context_tokens(before, after, generated)
    whole = reloaded.apply_chat_template(
        after, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert merged.inserted_token_ids == [ord("\n")]
    assert merged.token_ids == whole


def test_heads_are_large_enough_for_vllm_cpu(tiny_model_dir):
    config = AutoConfig.from_pretrained(tiny_model_dir)
    assert config.model_type == "qwen2"
    assert config.hidden_size // config.num_attention_heads >= MIN_HEAD_DIM


@pytest.mark.parametrize("kwargs", [{"vocab_size": 64}, {"hidden": 32}])
def test_sizes_the_tokenizer_or_vllm_cannot_use_are_refused(tmp_path, kwargs):
    with pytest.raises(ValueError):
        tiny_causal_lm(tmp_path / "m", **kwargs)
