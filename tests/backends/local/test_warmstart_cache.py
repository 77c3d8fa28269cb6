"""The base-model cache: keyed by the settings it depends on, built once under concurrent starts."""

from __future__ import annotations

import multiprocessing as mp

import torch

from gppo.backends.local.settings import LocalSettings
from gppo.backends.local.warmstart import load_base_model, warmstart_hash

TINY = {"d_model": 16, "n_layers": 1, "n_heads": 2, "warmstart_steps": 15, "warmstart_batch": 16}


def _start(args: tuple[str, int]) -> tuple[bool, str]:
    cache, seed = args
    torch.set_num_threads(1)
    s = LocalSettings(**TINY, cache_dir=cache, lr=1e-3 * (seed + 1))  # lr does not key the cache
    base = load_base_model(s)
    return base.built, base.path


def test_hash_depends_only_on_base_model_settings() -> None:
    a = LocalSettings(**TINY)
    assert warmstart_hash(a) == warmstart_hash(a.model_copy(update={"lr": 0.5, "steps": 3}))
    assert warmstart_hash(a) != warmstart_hash(a.model_copy(update={"warmstart_noise": 0.1}))
    assert warmstart_hash(a) != warmstart_hash(a.model_copy(update={"domain": "code"}))


def test_concurrent_starts_build_once_and_reuse(tmp_path) -> None:
    cache = str(tmp_path / "cache")
    ctx = mp.get_context("spawn")
    with ctx.Pool(4) as pool:
        results = pool.map(_start, [(cache, i) for i in range(4)])
    assert sum(built for built, _ in results) == 1
    assert len({path for _, path in results}) == 1
    # a later start reuses it, and the model is the deterministic warm start
    base = load_base_model(LocalSettings(**TINY, cache_dir=cache))
    assert base.source == "cached"
    policy = base.policy
    files = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert [f for f in files if f.endswith(".pt")] == [results[0][1].rsplit("/", 1)[1]]
    assert not [f for f in files if ".tmp" in f]
    assert sum(p.numel() for p in policy.parameters()) > 0
