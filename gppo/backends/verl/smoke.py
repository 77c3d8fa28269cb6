"""The assets of a verl smoke run (``verl.smoke_assets: true``: the CPU preset and
``scripts/gpu-smoke.sh``), built on the launching machine (nothing downloaded): a tiny
random Qwen2 (:func:`gppo.backends.verl.tiny.tiny_causal_lm`) and two small arithmetic data
sets written by ``gppo-sweep data prepare``'s own converter with data source ``smoke`` (the
reward of :func:`gppo.backends.rewards.smoke_score`, which varies within a group even for a
random policy, so advantages and gradients are non-zero).

They live in ``verl-cpu-smoke/<version>`` under the cache root (:func:`gppo.testbed.cache.cache_root`),
built once under a file lock; a new :data:`ASSETS_VERSION` builds a new set.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The data source (and benchmark name) of the smoke data.
SMOKE_SOURCE = "smoke"
#: Bump when the model or data change: a new directory, so old runs keep their assets.
ASSETS_VERSION = "v3"
TRAIN_ROWS, VAL_ROWS = 64, 8


@dataclass(frozen=True)
class SmokeAssets:
    """Paths of one built set of smoke assets."""

    root: Path

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    @property
    def train_file(self) -> Path:
        return self.root / "train.parquet"

    @property
    def val_file(self) -> Path:
        return self.root / f"{SMOKE_SOURCE}.parquet"

    @property
    def complete(self) -> Path:
        return self.root / "complete"


def assets_root() -> Path:
    """``verl-cpu-smoke/<version>`` under the cache root (:func:`gppo.testbed.cache.cache_root`)."""
    from gppo.testbed.cache import cache_root

    return cache_root() / "verl-cpu-smoke" / ASSETS_VERSION


def _problems(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for _ in range(n):
        a, b = rng.randrange(10, 100), rng.randrange(10, 100)
        # chat messages, so the converter adds no instruction: the prompt fits the tiny model
        prompt = [{"role": "user", "content": f"What is {a} + {b}?"}]
        rows.append({"prompt": prompt, "answer": str(a + b)})
    return rows


def build_smoke_assets(root: Path | None = None) -> SmokeAssets:
    """Build (once: :func:`~gppo.testbed.cache.build_once`) and return the smoke assets
    under ``root`` (default :func:`assets_root`)."""
    from gppo.testbed.cache import build_once

    assets = SmokeAssets(Path(root) if root is not None else assets_root())

    def build() -> None:
        from gppo.backends.rldata import prepare
        from gppo.backends.verl.tiny import tiny_causal_lm

        tiny_causal_lm(assets.model_dir)
        for rows, out, split, seed in (
            (TRAIN_ROWS, assets.train_file, "train", 0),
            (VAL_ROWS, assets.val_file, "test", 1),
        ):
            source = assets.root / f"{out.stem}.jsonl"
            source.write_text("".join(json.dumps(r) + "\n" for r in _problems(rows, seed)))
            prepare(source, out, SMOKE_SOURCE, split=split)
        assets.complete.write_text(ASSETS_VERSION + "\n")

    build_once(assets.complete, build)
    return assets
