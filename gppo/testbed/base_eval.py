"""The base model's own avg@k (a cell's step 0), computed once per machine and reused.

Every cell of a sweep starts from the same base model and evaluates it with the same seed, so its
step-0 evaluation is the same computation in every cell (about 1 s on one core, 51 times in the
quick start). The first cell to need it computes it and stores it under the base-model cache
(``<cache>/evals/<key>.json``); later cells read it. The key holds everything the numbers depend
on: the base model file's bytes (sha256) and the temperature folded into it at load (when not 1),
the benchmarks, k, the evaluation seed and prompt cap, the thread count (another float reduction
order), the CPU kernels in effect (ATen's capability and the variables of :mod:`.cpu_kernels`: a
pinned and a natural cell do not share it) and the torch version. A corrupt or unreadable entry is
recomputed, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import torch

from gppo.testbed import cpu_kernels
from gppo.testbed.settings import BaseModelSettings
from gppo.testbed.warmstart import BaseModel, cache_dir

Evaluate = Callable[[], dict[str, float]]


class EvalSettings(Protocol):
    """What the key reads of a section's settings (the ``local`` backend's ``LocalSettings``)."""

    eval_seed: int
    eval_prompts: int | None
    num_threads: int


def base_eval_key(
    base: BaseModel, settings: EvalSettings, benchmarks: Sequence[str], k: int
) -> str:
    """sha256 (first 16 hex digits) of what the base model's avg@k depends on."""
    weights = hashlib.sha256(Path(base.path).read_bytes()).hexdigest()
    key = {
        "weights": weights,
        "benchmarks": list(benchmarks),
        "k": k,
        "eval_seed": settings.eval_seed,
        "eval_prompts": settings.eval_prompts,
        "num_threads": settings.num_threads,
        "kernels": [torch.backends.cpu.get_cpu_capability()]
        + [os.environ.get(name) for name in cpu_kernels.KERNEL_VARS],
        "torch": torch.__version__,
    }
    if base.temperature != 1.0:  # the same file, another policy; out at 1: the old keys hold
        key["base_temperature"] = base.temperature
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def cached_base_eval(
    base: BaseModel,
    settings: BaseModelSettings,
    benchmarks: Sequence[str],
    k: int,
    evaluate: Evaluate,
) -> tuple[dict[str, float], bool]:
    """``({benchmark: avg@k}, reused)``: the stored result for this base and evaluation, or
    ``evaluate()`` (then stored for the next cell). ``settings``: the base's settings with the
    evaluation's fields (:class:`EvalSettings`), as the ``local`` backend's ``LocalSettings``."""
    key = base_eval_key(base, settings, benchmarks, k)  # type: ignore[arg-type]  # EvalSettings fields, duck-typed
    path = cache_dir(settings) / "evals" / f"{key}.json"
    try:
        stored = json.loads(path.read_text())
        if sorted(stored) == sorted(benchmarks) and all(
            isinstance(v, float) for v in stored.values()
        ):
            return {b: stored[b] for b in benchmarks}, True
    except (OSError, ValueError):
        pass
    result = evaluate()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, path)  # atomic: a concurrent reader sees the whole file or none
    return result, False
