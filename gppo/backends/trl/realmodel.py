"""The ``testbed: false`` route of a TRL cell: a Hugging Face model of your own on prepared data.

Data are the parquet files ``gppo-sweep data prepare -b trl`` writes (verl's RL schema,
:mod:`gppo.backends.rldata`): one row per prompt with ``prompt`` (chat messages),
``data_source`` (selects the scorer), ``reward_model.ground_truth`` and ``extra_info``. Here

* :func:`read_rows` turns a file into TRL's rows ``{"prompt", "data_source", "ground_truth",
  "extra_info"}``: ``prompt`` stays a message list (TRL applies the tokenizer's chat template,
  its conversational format) or, with ``chat_template: false``, becomes the contents joined as
  plain text; prompts over ``max_prompt_length`` tokens are left out, as verl's
  ``filter_overlong_prompts`` does;
* :func:`reward` is the training reward TRL calls with those columns as keyword lists: each
  completion's ``score`` from :func:`gppo.backends.rewards.compute_score` (the scorer verl's
  cells use, by ``data_source``);
* :class:`Evaluator` scores a model: avg@k per benchmark, k samples per prompt at the cell's
  ``val_temperature``, each counted by ``compute_score``'s ``acc`` (0 or 1), averaged over (prompt,
  sample), as verl's ``mean@k`` validation does.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from transformers import BatchEncoding, PreTrainedTokenizerBase

from gppo.backends.trl.console import say
from gppo.backends.trl.settings import TrlSettings
from gppo.errors import BackendError

#: ``(completions, data_source, ground_truth, extra_info) -> rewards``, TRL's reward signature
RewardFn = Callable[..., list[float]]
#: ``(model, its saved directory or None) -> {benchmark: avg@k}``
ScoreFn = Callable[[Any, Path | None], dict[str, float]]


@dataclass
class CellParts:
    """What a route hands the training loop of :func:`gppo.backends.trl.__main__.run_cell`:
    the policy and its tokenizer (left padding), the training rows (a ``datasets.Dataset``
    with a ``prompt`` column and the reward's columns), the reward, and how a model is scored
    (``score(model, saved_dir)``; the base is scored as ``score(model, base_dir)``)."""

    model: Any
    tokenizer: Any
    data: Any
    reward: RewardFn
    score: ScoreFn
    base_dir: Path | None


#: a row's prompt as TRL takes it: the messages (conversational) or plain text
Prompt = str | list[dict[str, str]]


# --- data ---------------------------------------------------------------------------------------
def prompt_of(messages: Sequence[dict[str, str]], chat_template: bool) -> Prompt:
    """What TRL is given as a row's prompt: the messages (conversational), or their contents
    joined by blank lines (plain text)."""
    if chat_template:
        return [{"role": m["role"], "content": m["content"]} for m in messages]
    return "\n\n".join(m["content"] for m in messages)


def prompt_ids(tokenizer: PreTrainedTokenizerBase, prompt: Prompt) -> list[int]:
    """The prompt's token ids exactly as TRL builds them: the chat template with the generation
    prompt for messages, the tokenizer's own encoding for text."""
    if isinstance(prompt, str):
        return list(tokenizer(text=prompt)["input_ids"])
    out = tokenizer.apply_chat_template(
        prompt, add_generation_prompt=True, tokenize=True, return_dict=True
    )
    return list(cast("BatchEncoding", out)["input_ids"])  # return_dict=True: a BatchEncoding


def read_rows(
    path: str | Path, s: TrlSettings, tokenizer: PreTrainedTokenizerBase
) -> list[dict[str, Any]]:
    """The rows of one prepared parquet as TRL rows (the module docstring), prompts over
    ``max_prompt_length`` tokens left out; raises :class:`BackendError` when none is left."""
    from gppo.backends.rldata import read_rows as read_file

    src = Path(path).expanduser()
    if not src.is_file():
        raise BackendError(f"{src}: no such file (write it with `gppo-sweep data prepare -b trl`)")
    rows, long = [], 0
    for number, raw in read_file(src):
        if not isinstance(raw, dict) or not isinstance(raw.get("prompt"), list):
            raise BackendError(
                f"{src}: row {number} is not a prepared row (chat-message prompt); write the "
                "file with `gppo-sweep data prepare -b trl`"
            )
        prompt = prompt_of(raw["prompt"], s.chat_template)
        if len(prompt_ids(tokenizer, prompt)) > s.max_prompt_length:
            long += 1
            continue
        truth = (raw.get("reward_model") or {}).get("ground_truth")
        rows.append(
            {
                "prompt": prompt,
                "data_source": raw["data_source"],
                "ground_truth": truth,
                "extra_info": raw.get("extra_info") or {},
            }
        )
    if long:
        say(f"{src.name}: {long} prompts over {s.max_prompt_length} tokens left out")
    if not rows:
        raise BackendError(
            f"{src}: no prompt fits max_prompt_length: {s.max_prompt_length} ({long} over it)"
        )
    return rows


def check_scorers(data_sources: set[str]) -> None:
    """Every data source has a scorer here: a known name, and verl installed for the scorers that
    are verl's (math, code); one-line :class:`BackendError` otherwise."""
    from gppo.backends.rewards import SCORER_OF, TESTBED_SCORERS

    unknown = sorted(data_sources - set(SCORER_OF))
    if unknown:
        raise BackendError(
            f"no scorer for data_source {', '.join(unknown)}; known: {', '.join(sorted(SCORER_OF))}"
        )
    ours = {"smoke", *TESTBED_SCORERS}
    needs_verl = sorted(d for d in data_sources if SCORER_OF[d] not in ours)
    if needs_verl and importlib.util.find_spec("verl") is None:
        raise BackendError(
            f"data_source {', '.join(needs_verl)} is scored by verl's scorers "
            "(verl.utils.reward_score): install the verl extra beside trl ('.[trl,verl]')"
        )


# --- reward -------------------------------------------------------------------------------------
def completion_text(completion: Any) -> str:
    """A completion's text: TRL hands conversational ones as ``[{"role", "content"}]``."""
    if isinstance(completion, list):
        return completion[-1]["content"] if completion else ""
    return completion


def reward(
    completions: list[Any],
    data_source: list[str],
    ground_truth: list[Any],
    extra_info: list[dict[str, Any]] | None = None,
    **_: Any,
) -> list[float]:
    """TRL reward function: ``compute_score(...)["score"]`` of each completion (len B)."""
    from gppo.backends.rewards import compute_score

    no_info: list[dict[str, Any] | None] = [None] * len(completions)
    extra = extra_info or no_info
    return [
        float(compute_score(d, completion_text(c), t, e)["score"])
        for c, d, t, e in zip(completions, data_source, ground_truth, extra, strict=True)
    ]


# --- evaluation ---------------------------------------------------------------------------------
class Evaluator:
    """avg@k of a model on each benchmark's rows (``{benchmark: rows}``, as :func:`read_rows`):
    k samples per prompt at ``val_temperature`` (top-p 1, no top-k, no repetition penalty: TRL's
    sampling), ``max_new_tokens`` each, batched ``eval_batch_size`` sequences at a time, seeded
    with ``eval_seed`` (the caller's random state is left as it was)."""

    def __init__(
        self, s: TrlSettings, tokenizer: Any, rows: dict[str, list[dict[str, Any]]], k: int
    ) -> None:
        self.s, self.tokenizer, self.k = s, tokenizer, k
        self.rows = {b: r[: s.eval_prompts] if s.eval_prompts else r for b, r in rows.items()}

    def __call__(self, model: Any, saved_dir: Path | None = None) -> dict[str, float]:
        import torch

        devices = [model.device] if model.device.type == "cuda" else []
        was_training = model.training
        model.eval()
        try:
            with torch.random.fork_rng(devices=devices), torch.no_grad():
                torch.manual_seed(self.s.eval_seed)
                return {b: self._avg_at_k(model, rows) for b, rows in self.rows.items()}
        finally:
            model.train(was_training)

    def _avg_at_k(self, model: Any, rows: list[dict[str, Any]]) -> float:
        per_call = max(1, self.s.eval_batch_size // self.k)
        hits = 0.0
        for i in range(0, len(rows), per_call):
            batch = rows[i : i + per_call]
            texts = self.sample(model, [r["prompt"] for r in batch])  # len(batch) * k
            hits += sum(
                self._acc(row, text)
                for row, text in zip([r for r in batch for _ in range(self.k)], texts, strict=True)
            )
        return hits / (len(rows) * self.k)

    @staticmethod
    def _acc(row: dict[str, Any], text: str) -> float:
        from gppo.backends.rewards import compute_score

        result = compute_score(row["data_source"], text, row["ground_truth"], row["extra_info"])
        return float(result["acc"])

    def sample(self, model: Any, prompts: list[Any]) -> list[str]:
        """``k`` completions of each prompt (prompt-major: B * k texts), cut at the first end of
        sequence token, special tokens dropped."""
        tok = self.tokenizer
        ids = [prompt_ids(tok, p) for p in prompts]
        batch = tok.pad({"input_ids": ids}, padding=True, return_tensors="pt").to(model.device)
        out = model.generate(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            do_sample=True,
            temperature=self.s.val_temperature,
            top_p=1.0,
            top_k=0,
            repetition_penalty=1.0,
            max_new_tokens=self.s.completion_length,
            num_return_sequences=self.k,
            pad_token_id=tok.pad_token_id,
            use_cache=True,
        )
        eos = set(_as_list(model.generation_config.eos_token_id) + _as_list(tok.eos_token_id))
        texts = []
        for row in out[:, batch["input_ids"].shape[1] :].tolist():
            end = next((j for j, t in enumerate(row) if t in eos), len(row))
            texts.append(tok.decode(row[:end], skip_special_tokens=True))
        return texts


def _as_list(value: Any) -> list[int]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


# --- the route ----------------------------------------------------------------------------------
def missing_paths(s: TrlSettings) -> list[str]:
    """What of ``model_path``, ``train_file`` and ``val_files`` is not on this machine, each as
    ``field: path (why)``; empty when all are."""
    out = []
    model = Path(str(s.model_path)).expanduser()
    if not (model / "config.json").is_file():
        out.append(f"model_path: {model} (no Hugging Face config.json)")
    files = {"train_file": s.train_file, **{f"val_files.{b}": f for b, f in s.val_files.items()}}
    for field, path in files.items():
        if not Path(str(path)).expanduser().is_file():
            out.append(f"{field}: {path} (no such file)")
    return out


def load(s: TrlSettings, benchmarks: Sequence[str], k: int) -> CellParts:
    """Model and tokenizer from ``model_path`` (on this process's GPU with ``num_gpus``), the training
    rows of ``train_file``, the reward, and an :class:`Evaluator` over ``benchmarks``'
    ``val_files`` (every data source's scorer checked before anything trains)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    missing = missing_paths(s)
    if missing:
        raise BackendError(f"not found: {'; '.join(missing)}")
    model_dir = Path(str(s.model_path)).expanduser()
    unknown = [b for b in benchmarks if b not in s.val_files]
    if unknown:
        raise BackendError(
            f"benchmark {', '.join(unknown)} has no val_files entry; known: "
            f"{', '.join(s.val_files)}"
        )
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if s.chat_template and tokenizer.chat_template is None:
        raise BackendError(
            f"model_path: {model_dir} has no chat template; set chat_template: false (prompts "
            "as plain text)"
        )
    train = read_rows(s.train_file, s, tokenizer)  # type: ignore[arg-type]  # validated: set when not testbed
    if len(train) < s.prompts_per_step:  # TRL's sampler would then yield no batch at all
        raise BackendError(
            f"train_file: {s.train_file} has {len(train)} prompt(s) within max_prompt_length: "
            f"{s.max_prompt_length}, fewer than prompts_per_step: {s.prompts_per_step}"
        )
    val = {b: read_rows(s.val_files[b], s, tokenizer) for b in benchmarks}
    check_scorers({r["data_source"] for rows in (train, *val.values()) for r in rows})
    dtype = torch.bfloat16 if s.dtype == "bfloat16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    if s.num_gpus:
        from accelerate import PartialState

        model = model.to(PartialState().device)
    return CellParts(
        model=model,
        tokenizer=tokenizer,
        data=Dataset.from_list(train),
        reward=reward,
        score=Evaluator(s, tokenizer, val, k),
        base_dir=None,
    )
