"""The testbed policy as a Hugging Face model, both ways: ``GPT2LMHeadModel`` + a char-level tokenizer.

The testbed's :class:`~gppo.testbed.policy.Policy` is GPT-2 exactly: pre-LayerNorm blocks
(eps 1e-5), learned absolute positions, tied input/output embeddings, a fused qkv projection with
bias, exact (erf) GELU, no dropout. :func:`export_policy` writes a directory that
``transformers.AutoModelForCausalLM`` / ``AutoTokenizer``, vLLM and verl load as they are:

* ``config.json``: ``GPT2Config`` with ``activation_function="gelu"`` (GPT-2's default
  ``gelu_new`` is the tanh approximation), every dropout 0, the testbed's vocabulary (50) and
  special ids (pad 0, eos 1, no BOS), ``n_positions`` = the policy's ``max_len``, and
  ``num_key_value_heads`` = ``n_head``, which verl's FSDP set-up reads for every model
  (``verl/models/transformers/monkey_patch.py``, ``apply_monkey_patch``) and ``GPT2Config`` lacks;
* ``model.safetensors``: float32 weights. HF's ``Conv1D`` stores ``(in, out)``, so every
  ``nn.Linear`` weight is transposed (q, k, v stay in the same order inside ``c_attn``);
* a char-level fast tokenizer (:func:`char_tokenizer`): one token per character with exactly
  the testbed's ids, and a pass-through chat template (verl tokenizes every prompt through
  ``apply_chat_template``; the template gives back the raw prompt);
* ``generation_config.json``: eos/pad, sampling at temperature 1 with no top-k / top-p.

Positions with left padding: the testbed counts only real tokens (``cumsum(valid) - 1``). HF's
``generate``, vLLM (one sequence at a time) and verl (``position_ids = cumsum(mask) - 1``) do the
same; a plain HF forward without ``position_ids`` uses ``arange`` and is wrong on left-padded rows
(:func:`mask_positions` gives the right ones).

:func:`import_policy` reads such a directory back (a verl ``huggingface`` checkpoint or a TRL one)
into a testbed ``Policy``, so the testbed's own evaluator scores what another trainer trained.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import GPT2Config, PreTrainedTokenizerFast

import torch

from gppo.testbed.policy import Policy, PolicyConfig
from gppo.testbed.vocab import CHARS, EOS, PAD, VOCAB_SIZE

PAD_TOKEN, EOS_TOKEN = "<pad>", "</s>"
#: The chat template of the exported tokenizer: the messages' contents, nothing added.
PASS_THROUGH_CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
#: vLLM's CPU attention backend rejects smaller heads.
MIN_HEAD_DIM = 32
#: Written into config.json: what exported the directory (read back by :func:`import_policy`).
EXPORT_FORMAT = "gppo-testbed-gpt2/v1"


def char_tokenizer() -> PreTrainedTokenizerFast:
    """A ``PreTrainedTokenizerFast`` over the testbed's 50 ids: ``<pad>`` = 0, ``</s>`` = 1, then
    one token per character of :data:`~gppo.testbed.vocab.CHARS` (id = index + 2).

    Every character is its own pre-token (a ``Split`` on any character, kept isolated), looked up
    in a word-level vocabulary; the ``Fuse`` decoder joins tokens with nothing in between. There
    is no unknown token, so the vocabulary stays the testbed's: a character outside it fails to
    encode rather than mapping to a 51st id.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {PAD_TOKEN: PAD, EOS_TOKEN: EOS, **{c: i + 2 for i, c in enumerate(CHARS)}}
    assert len(vocab) == VOCAB_SIZE
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=None))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        padding_side="left",
        model_max_length=4096,
    )
    tok.chat_template = PASS_THROUGH_CHAT_TEMPLATE
    return tok


def hf_config(cfg: PolicyConfig) -> GPT2Config:
    """The ``GPT2Config`` of a testbed policy config (see the module docstring)."""
    from transformers import GPT2Config

    config = GPT2Config(
        vocab_size=cfg.vocab_size,
        n_positions=cfg.max_len,
        n_embd=cfg.d_model,
        n_layer=cfg.n_layers,
        n_head=cfg.n_heads,
        n_inner=4 * cfg.d_model,
        activation_function="gelu",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        tie_word_embeddings=True,
        bos_token_id=EOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        scale_attn_weights=True,
        # (transformers 5 types it `dtype` and still reads this older name; config.json keeps it)
        torch_dtype="float32",  # type: ignore[call-arg]  # kept in config.json (old name)
    )
    config.architectures = ["GPT2LMHeadModel"]  # verl's HFModelConfig asserts exactly one
    config.num_key_value_heads = cfg.n_heads
    config.gppo_export = EXPORT_FORMAT
    return config


def to_hf_state_dict(policy: Policy) -> dict[str, torch.Tensor]:
    """The testbed ``state_dict`` in ``GPT2LMHeadModel``'s names and layouts (float32)."""
    sd = {k: v.detach().float() for k, v in policy.state_dict().items()}
    out = {
        "transformer.wte.weight": sd["tok.weight"],
        "transformer.wpe.weight": sd["pos.weight"],
        "transformer.ln_f.weight": sd["ln_f.weight"],
        "transformer.ln_f.bias": sd["ln_f.bias"],
    }
    for i in range(policy.cfg.n_layers):
        src, dst = f"blocks.{i}.", f"transformer.h.{i}."
        for ours, theirs in (("ln1", "ln_1"), ("ln2", "ln_2")):
            out[f"{dst}{theirs}.weight"] = sd[f"{src}{ours}.weight"]
            out[f"{dst}{theirs}.bias"] = sd[f"{src}{ours}.bias"]
        for ours, theirs in (
            ("qkv", "attn.c_attn"),
            ("proj", "attn.c_proj"),
            ("mlp.0", "mlp.c_fc"),
            ("mlp.2", "mlp.c_proj"),
        ):
            out[f"{dst}{theirs}.weight"] = sd[f"{src}{ours}.weight"].T.contiguous()
            out[f"{dst}{theirs}.bias"] = sd[f"{src}{ours}.bias"]
    return out


def from_hf_state_dict(hf: dict[str, torch.Tensor], cfg: PolicyConfig) -> dict[str, torch.Tensor]:
    """Inverse of :func:`to_hf_state_dict` (``transformer.`` prefix optional; ``lm_head`` ignored:
    the embeddings are tied)."""
    sd = {k.removeprefix("transformer."): v.float() for k, v in hf.items()}
    out = {
        "tok.weight": sd["wte.weight"],
        "pos.weight": sd["wpe.weight"],
        "ln_f.weight": sd["ln_f.weight"],
        "ln_f.bias": sd["ln_f.bias"],
    }
    for i in range(cfg.n_layers):
        src, dst = f"h.{i}.", f"blocks.{i}."
        for ours, theirs in (("ln1", "ln_1"), ("ln2", "ln_2")):
            out[f"{dst}{ours}.weight"] = sd[f"{src}{theirs}.weight"]
            out[f"{dst}{ours}.bias"] = sd[f"{src}{theirs}.bias"]
        for ours, theirs in (
            ("qkv", "attn.c_attn"),
            ("proj", "attn.c_proj"),
            ("mlp.0", "mlp.c_fc"),
            ("mlp.2", "mlp.c_proj"),
        ):
            out[f"{dst}{ours}.weight"] = sd[f"{src}{theirs}.weight"].T.contiguous()
            out[f"{dst}{ours}.bias"] = sd[f"{src}{theirs}.bias"]
    return out


def export_policy(policy: Policy, out_dir: str | Path) -> Path:
    """Write ``policy`` as a Hugging Face model directory (config, float32 safetensors, the
    char-level tokenizer, a generation config); returns the directory."""
    from safetensors.torch import save_file
    from transformers import GenerationConfig

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = hf_config(policy.cfg)
    config.save_pretrained(out)
    weights = to_hf_state_dict(policy)
    weights["lm_head.weight"] = weights["transformer.wte.weight"]
    # tied: safetensors refuses shared storage, so the head is saved as its own copy
    save_file(
        {k: v.clone().contiguous() for k, v in weights.items()},
        str(out / "model.safetensors"),
        metadata={"format": "pt"},
    )
    char_tokenizer().save_pretrained(out)
    GenerationConfig(
        bos_token_id=EOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
    ).save_pretrained(out)
    return out


def policy_config_of(model_dir: str | Path) -> PolicyConfig:
    """The testbed ``PolicyConfig`` of an exported (or trained and saved) GPT-2 directory."""
    raw = json.loads((Path(model_dir) / "config.json").read_text())
    if raw.get("model_type") != "gpt2":
        raise ValueError(f"{model_dir}: model_type {raw.get('model_type')!r}, expected 'gpt2'")
    return PolicyConfig(
        d_model=raw["n_embd"],
        n_layers=raw["n_layer"],
        n_heads=raw["n_head"],
        max_len=raw["n_positions"],
        vocab_size=raw["vocab_size"],
    )


def _read_weights(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(model_dir.glob("*.safetensors"))
    if files:
        out: dict[str, torch.Tensor] = {}
        for f in files:
            out.update(load_file(str(f)))
        return out
    bins = sorted(model_dir.glob("pytorch_model*.bin"))
    if not bins:
        raise FileNotFoundError(f"{model_dir}: no *.safetensors or pytorch_model*.bin weights")
    out = {}
    for f in bins:
        out.update(torch.load(str(f), map_location="cpu", weights_only=True))
    return out


def import_policy(model_dir: str | Path) -> Policy:
    """A testbed ``Policy`` (float32, eval mode) from a GPT-2 directory written by
    :func:`export_policy` or saved by a trainer (verl's ``huggingface`` checkpoint, TRL)."""
    model_dir = Path(model_dir)
    cfg = policy_config_of(model_dir)
    policy = Policy(cfg)
    policy.load_state_dict(from_hf_state_dict(_read_weights(model_dir), cfg))
    policy.eval()
    return policy


def mask_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) position ids that count only real tokens (the testbed's, and verl's)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
