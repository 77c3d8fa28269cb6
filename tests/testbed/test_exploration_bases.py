"""The exploration family's bases (docs/studies/exploration.md) are what
their records and the docs say: each level's shipped file is the one a spec with that
``warmstart_target`` loads (nothing is built), it scores its recorded avg@8, and its correct
answers have the recorded probability and token μ, falling level by level (the knob does what
the study needs: the correct answers get rarer).

Tolerances: avg@8 as the default base's test (``RECORD_TOL``: 10 of a benchmark's 512 samples,
another float reduction order moves single samples); the teacher-forced numbers have no sampling,
so only float rounding moves them (``ANSWER_TOL``).
"""

from __future__ import annotations

import pytest

from gppo.backends.local.settings import LocalSettings
from gppo.testbed.answer_prob import answer_summary
from gppo.testbed.evaluate import evaluate
from gppo.testbed.shipped import shipped_record, shipped_records
from gppo.testbed.tasks import get_domain
from gppo.testbed.warmstart import load_base_model, warmstart_hash

#: the study's levels (configs/exploration.yaml's axis), highest first
LEVELS = (0.25, 0.1, 0.03, 0.01)
RECORD_TOL = 0.02
ANSWER_TOL = 1e-3


def _record(level: float) -> dict:
    rec = (
        shipped_record("math")
        if level == 0.25
        else shipped_record("math", {"warmstart_target": level})
    )
    assert rec is not None, f"no shipped math base for warmstart_target {level}"
    return rec


def test_every_level_ships_and_nothing_else_is_in_the_family() -> None:
    targets = sorted(r["key"]["warmstart_target"] for r in shipped_records("math"))
    assert targets == sorted(LEVELS)


@pytest.mark.parametrize("level", LEVELS)
def test_a_level_loads_its_shipped_base_and_scores_its_record(level, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GPPO_CACHE_DIR", str(tmp_path / "empty-cache"))
    rec = _record(level)
    settings = LocalSettings(domain="math", warmstart_target=level)
    assert rec["hash"] == warmstart_hash(settings)
    base = load_base_model(settings, say=pytest.fail)  # building anything would fail here
    assert base.source == "shipped" and base.path.endswith(rec["file"])
    domain = get_domain("math")
    got = evaluate(base.policy, domain, domain.benchmark_names, 8, settings.eval_seed)
    for name, want in rec["avg_at_8"].items():
        assert abs(got[name] - want) <= RECORD_TOL, (level, name, got[name], want)
    for name in domain.benchmark_names:
        answers = answer_summary(base.policy, domain.benchmark(name))
        for key, want in rec["answers"][name].items():
            assert abs(answers[key] - want) <= ANSWER_TOL, (level, name, key, answers[key], want)


def test_the_correct_answers_get_rarer_level_by_level() -> None:
    means = [_record(level)["answers_mean"] for level in LEVELS]
    accuracies = [_record(level)["avg_at_8_mean"] for level in LEVELS]
    assert accuracies == sorted(accuracies, reverse=True)
    assert [m["p_answer"] for m in means] == sorted((m["p_answer"] for m in means), reverse=True)
    assert [m["answer_token_mu"] for m in means] == sorted(
        (m["answer_token_mu"] for m in means), reverse=True
    )
    assert [m["answer_rare_frac"] for m in means] == sorted(m["answer_rare_frac"] for m in means)
    for level, acc in zip(LEVELS, accuracies, strict=True):
        assert level / 2 <= acc <= level * 1.6, (level, acc)  # each stops near its own target
