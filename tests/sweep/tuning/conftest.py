"""Tuning specs on the tune probe backend, stores in tmp_path (Ray: the sweep tests' head)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from . import tune_probe  # noqa: F401  (registers the "tuneprobe" backend)

TESTS_DIR = Path(__file__).resolve().parents[2]

BASE: dict[str, Any] = {
    "name": "tp",
    "backend": "tuneprobe",
    "tuneprobe": {"steps": 6, "sleep_s": 0.3},
    "seeds": [3, 4],
    "eval": {"k": 4},
    "ray": {"resources": {"num_cpus": 0.5}},
    "tune": {
        "n_trials": 6,
        "n_parallel": 2,
        "poll_s": 0.2,
        "sampler": {"kind": "random", "seed": 1},
        "pruner": {"kind": "median", "n_startup_trials": 1, "n_warmup_steps": 1},
        "space": {
            "divergence": ["tv", "kl"],
            "estimator": ["mc", "atomic"],
            "radius": {"param": "r_min", "low": 0.7, "high": 0.9},
            "lr": {"low": 1.0e-4, "high": 1.0e-2},
        },
    },
}


#: sections replaced, not merged (a pruner of another kind has other keys)
REPLACED = ("pruner", "sampler")


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and k not in REPLACED:
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def spec_dict(tmp_path: Path, address: str | None = None, **extra: Any) -> dict[str, Any]:
    d = merge(BASE, {"tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db"}})
    d["ray"]["address"] = address
    return merge(d, extra)


def write(tmp_path: Path, data: Any, name: str = "tune.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path
