"""The testbed as a Hugging Face task: its base model, benchmarks and training stream on disk.

What a trainer that is not our own loop (verl's and TRL's ``testbed: true``, any later one)
trains on, built on the launching machine (nothing downloaded) under
``<cache root>/hf-testbed/<version>/<domain>-<base key>/`` (:func:`gppo.testbed.cache.cache_root`;
``<base key>`` is the base's warm-start hash, so each member of the base family has its own):

* ``model/``: the testbed's base model (the shipped one for the default settings and the
  exploration family) exported as ``GPT2LMHeadModel`` with its char-level tokenizer
  (:func:`gppo.testbed.hf_export.export_policy`);
* ``<benchmark>.parquet``: each of the domain's four held-out benchmarks in verl's RL schema, its
  own ``data_source`` (the benchmark's name), the exact prompts the testbed evaluates;
* ``train-s<seed>-<rows>.parquet``: the training prompts the testbed draws for that seed, in the
  testbed's order (``Domain.sample_train`` on ``Random("gppo-local/train/<seed>")``,
  ``prompts_per_step`` per step): read without shuffling, verl's step ``i`` sees the testbed's
  step ``i`` prompts. Built by the cell's entrypoint (:func:`ensure_train_stream`) since it
  depends on the cell's seed.

Rows are in verl's RL schema (``prompt`` as chat messages, ``data_source``,
``reward_model.ground_truth``), which TRL reads too. Rewards are the testbed's own scorer
(:func:`gppo.testbed.reward.testbed_score`) for every ``data_source`` this module writes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gppo.testbed.cache import build_once, cache_root
from gppo.testbed.settings import BaseModelSettings, base_settings
from gppo.testbed.tasks import train_rng

#: Bump when the model export or the data layout change: a new directory.
ASSETS_VERSION = "v1"
#: ``data_source`` of the training rows: ``testbed-<domain>``.
TRAIN_SOURCE_PREFIX = "testbed-"


def train_source(domain: str) -> str:
    return f"{TRAIN_SOURCE_PREFIX}{domain}"


def assets_root(base: BaseModelSettings) -> Path:
    """Where the assets of ``base`` live (keyed by its warm-start hash)."""
    from gppo.testbed.warmstart import warmstart_hash

    key = warmstart_hash(base)
    return cache_root() / "hf-testbed" / ASSETS_VERSION / f"{base.domain}-{key}"


@dataclass(frozen=True)
class TestbedAssets:
    """Paths of one base's testbed assets (``base``: the base model's settings)."""

    __test__ = False  # not a test class (pytest collects names starting with "Test")

    base: BaseModelSettings
    root: Path

    @classmethod
    def for_base(cls, base: BaseModelSettings) -> TestbedAssets:
        return cls(base, assets_root(base))

    @classmethod
    def for_domain(cls, domain: str, warmstart_target: float | None = None) -> TestbedAssets:
        """The assets of ``domain``'s base picked by its warm-start target (None: the default)."""
        return cls.for_base(base_settings(domain, warmstart_target))

    @property
    def domain(self) -> str:
        return self.base.domain

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    @property
    def benchmarks(self) -> tuple[str, ...]:
        from gppo.testbed.tasks import get_domain

        return get_domain(self.domain).benchmark_names

    def benchmark_file(self, name: str) -> Path:
        return self.root / f"{name}.parquet"

    def train_file(self, seed: int, rows: int) -> Path:
        return self.root / f"train-s{seed}-{rows}.parquet"

    @property
    def complete(self) -> Path:
        return self.root / "complete"


def _row(problem: Any, data_source: str, index: int, split: str) -> dict[str, Any]:
    """One verl RL row: the raw prompt as one user message (the exported tokenizer's chat
    template passes it through unchanged)."""
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": problem.prompt}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": problem.answer},
        "extra_info": {"index": index, "split": split, "family": problem.family},
    }


def _write(rows: list[dict[str, Any]], path: Path) -> None:
    import pandas as pd

    tmp = path.with_suffix(f".tmp{os.getpid()}")
    pd.DataFrame(rows).to_parquet(tmp, index=False)
    os.replace(tmp, path)


def build_testbed_assets(
    domain: str = "math", warmstart_target: float | None = None
) -> TestbedAssets:
    """Export the base model (``domain``'s, picked by its warm-start target; None: the default)
    and write the benchmarks (once: :func:`~gppo.testbed.cache.build_once`)."""
    assets = TestbedAssets.for_domain(domain, warmstart_target)

    def build() -> None:
        from gppo.testbed.hf_export import export_policy
        from gppo.testbed.tasks import get_domain
        from gppo.testbed.warmstart import load_base_model

        base = load_base_model(assets.base)
        export_policy(base.policy, assets.model_dir)
        dom = get_domain(domain)
        for name in dom.benchmark_names:
            rows = [_row(p, name, i, "test") for i, p in enumerate(dom.benchmark(name))]
            _write(rows, assets.benchmark_file(name))
        assets.complete.write_text(f"{ASSETS_VERSION} {base.source} {base.path}\n")

    build_once(assets.complete, build)
    return assets


def train_problems(domain: str, seed: int, steps: int, prompts_per_step: int) -> list[Any]:
    """The testbed's training prompts of ``seed``, step after step (the stream of
    ``local`` backend's trainer: :func:`gppo.testbed.tasks.train_rng`)."""
    from gppo.testbed.tasks import get_domain

    rng = train_rng(seed)
    dom = get_domain(domain)
    out: list[Any] = []
    for _ in range(steps):
        out.extend(dom.sample_train(rng, prompts_per_step))
    return out


def ensure_train_stream(
    assets: TestbedAssets, seed: int, steps: int, prompts_per_step: int
) -> Path:
    """The training parquet of ``seed`` (written once, atomically): ``steps * prompts_per_step``
    rows."""
    path = assets.train_file(seed, steps * prompts_per_step)

    def build() -> None:
        source = train_source(assets.domain)
        probs = train_problems(assets.domain, seed, steps, prompts_per_step)
        _write([_row(p, source, i, "train") for i, p in enumerate(probs)], path)

    build_once(path, build)
    return path


def check_testbed_fits(
    domain: str, max_prompt_length: int, max_response_length: int, cpu: bool
) -> None:
    """Refuse (``ValueError``, one line naming the field) a testbed cell verl or vLLM cannot run:
    a head dimension below vLLM's CPU minimum, prompts longer than ``max_prompt_length`` (verl
    truncates nothing: ``data.truncation=error``), or prompt + response beyond the model's
    positions (vLLM's ``max_model_len``)."""
    from gppo.testbed.hf_export import MIN_HEAD_DIM
    from gppo.testbed.tasks import get_domain
    from gppo.testbed.warmstart import policy_config

    cfg = policy_config(base_settings(domain))
    head_dim = cfg.d_model // cfg.n_heads
    if cpu and head_dim < MIN_HEAD_DIM:
        raise ValueError(
            f"testbed: the {domain} base has head dimension {head_dim} (d_model {cfg.d_model} / "
            f"{cfg.n_heads} heads); vLLM's CPU attention needs at least {MIN_HEAD_DIM}"
        )
    dom = get_domain(domain)
    longest = max(
        len(p.prompt) for b in dom.benchmark_names for p in (*dom.benchmark(b), *dom.validation(b))
    )
    if max_prompt_length < longest:
        raise ValueError(
            f"max_prompt_length: {max_prompt_length} is below the {domain} testbed's longest "
            f"prompt ({longest} tokens)"
        )
    if max_prompt_length + max_response_length > cfg.max_len:
        raise ValueError(
            f"max_prompt_length + max_response_length: {max_prompt_length} + "
            f"{max_response_length} exceeds the {domain} testbed base's {cfg.max_len} positions"
        )
    if max_response_length < dom.max_new_tokens:
        raise ValueError(
            f"max_response_length: {max_response_length} is below the {domain} testbed's "
            f"response length ({dom.max_new_tokens} tokens)"
        )
