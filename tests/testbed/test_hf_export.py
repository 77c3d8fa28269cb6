"""The testbed policy as a Hugging Face GPT-2 and back: the same logits, the same tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gppo.backends.local.settings import LocalSettings
from gppo.testbed.hf_export import (
    char_tokenizer,
    export_policy,
    import_policy,
    mask_positions,
)
from gppo.testbed.policy import Policy, PolicyConfig
from gppo.testbed.tasks import get_domain
from gppo.testbed.vocab import EOS, PAD, VOCAB_SIZE, encode, left_pad
from gppo.testbed.warmstart import load_base_model

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def shipped_math(tmp_path_factory: pytest.TempPathFactory) -> tuple[Policy, Path]:
    base = load_base_model(LocalSettings(domain="math"), say=lambda _: None)
    assert base.source == "shipped"
    return base.policy, export_policy(base.policy, tmp_path_factory.mktemp("hf") / "math")


def _benchmark_prompts() -> list[str]:
    dom = get_domain("math")
    return [p.prompt for b in dom.benchmark_names for p in dom.benchmark(b)]


def test_hf_logits_equal_the_testbed_on_left_padded_batches(shipped_math) -> None:
    policy, model_dir = shipped_math
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    assert type(model).__name__ == "GPT2LMHeadModel"
    prompts = _benchmark_prompts()[::5]  # all four benchmarks: widths 8 and 9, so padded rows
    ids, valid = left_pad([encode(p) for p in prompts])
    assert not bool(valid.all())
    with torch.no_grad():
        ours, _ = policy(ids, valid)
        theirs = model(
            input_ids=ids, attention_mask=valid.long(), position_ids=mask_positions(valid)
        ).logits
    torch.testing.assert_close(theirs[valid], ours[valid], atol=1e-5, rtol=1e-5)


def test_a_random_policy_round_trips_bit_for_bit(tmp_path: Path) -> None:
    torch.manual_seed(3)
    policy = Policy(PolicyConfig(d_model=64, n_layers=3, n_heads=2, max_len=30))
    back = import_policy(export_policy(policy, tmp_path / "m"))
    assert back.cfg == policy.cfg
    for (name, a), b in zip(policy.state_dict().items(), back.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_the_tokenizer_round_trips_every_benchmark_prompt_and_answer(shipped_math) -> None:
    _, model_dir = shipped_math
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    assert len(tok) == VOCAB_SIZE
    assert (tok.pad_token_id, tok.eos_token_id) == (PAD, EOS)
    dom = get_domain("math")
    for name in dom.benchmark_names:
        for p in dom.benchmark(name):
            for text in (p.prompt, p.answer):
                ids = tok.encode(text, add_special_tokens=False)
                assert ids == encode(text)
                assert tok.decode(ids) == text
    chat = [{"role": "user", "content": "123+045="}]
    assert tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == "123+045="
    assert tok.decode([*encode("861"), EOS, PAD], skip_special_tokens=True) == "861"


def test_the_tokenizer_refuses_a_character_outside_the_vocabulary() -> None:
    with pytest.raises(Exception, match=r"(?i)unk|missing|vocab"):
        char_tokenizer().encode("12?", add_special_tokens=False)
