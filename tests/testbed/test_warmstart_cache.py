"""The base-model cache: keyed by the settings it depends on, built once under concurrent starts."""

from __future__ import annotations

import multiprocessing as mp

import pytest
import torch

from gppo.backends.local.settings import LocalSettings
from gppo.testbed.warmstart import load_base_model, warmstart_hash

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


@pytest.mark.slow  # four spawned Pythons
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


def test_opt_in_recipe_parts_stay_out_of_the_key_when_off() -> None:
    from gppo.testbed.shipped import shipped_record
    from gppo.testbed.warmstart import warmstart_key

    default = LocalSettings()
    assert "warmstart_fine_check_every" not in warmstart_key(default)  # off: not in the key
    assert warmstart_key(default)["warmstart_restart_after"] == 4000  # on by default
    # the shipped bases are the default settings' (re-keyed for the restart rule)
    for domain in ("math", "code"):
        assert shipped_record(domain)["hash"] == warmstart_hash(LocalSettings(domain=domain))
    off = LocalSettings(warmstart_restart_after=None)
    assert "warmstart_restart_after" not in warmstart_key(off)
    assert warmstart_hash(off) != warmstart_hash(default)
    on = LocalSettings(warmstart_restart_after=2500, warmstart_fine_check_every=10)
    assert warmstart_key(on)["warmstart_fine_check_every"] == 10
    assert warmstart_hash(on) != warmstart_hash(default)


def test_checks_come_faster_once_validation_reaches_half_the_target() -> None:
    from gppo.testbed.warmstart import WarmstartRun, _check_every

    s = LocalSettings(warmstart_check_every=50, warmstart_fine_check_every=10)
    assert _check_every(s, WarmstartRun(target=0.25)) == 50  # no check yet
    assert _check_every(s, WarmstartRun(target=0.25, validation=0.12)) == 50
    assert _check_every(s, WarmstartRun(target=0.25, validation=0.125)) == 10
    off = LocalSettings(warmstart_check_every=50)  # the default: no fine checks
    assert _check_every(off, WarmstartRun(target=0.25, validation=0.2)) == 50


def test_an_attempt_that_stays_below_half_the_target_restarts_from_fresh_weights() -> None:
    from gppo.testbed.warmstart import train_base

    torch.set_num_threads(1)
    # target 1.0: no check reaches half of it, so every attempt runs its 10 steps and restarts
    s = LocalSettings(**{**TINY, "warmstart_steps": 25}, warmstart_target=1.0,
                      warmstart_check_every=5, warmstart_restart_after=10)  # fmt: skip
    restarted, run = train_base(s)
    assert run.restarts == [10, 20] and run.steps == 25 and not run.reached
    assert [step for step, _ in run.checks] == [5, 10, 15, 20, 25]
    # the last attempt trained 5 steps from fresh weights: not the run that never restarted,
    # and not a rerun of the first attempt's 5 steps (another seed)
    never = s.model_copy(update={"warmstart_restart_after": None})
    fresh5 = s.model_copy(update={"warmstart_steps": 5})
    assert not torch.equal(restarted.tok.weight, train_base(never)[0].tok.weight)
    assert not torch.equal(restarted.tok.weight, train_base(fresh5)[0].tok.weight)
    assert warmstart_hash(s) != warmstart_hash(never)
