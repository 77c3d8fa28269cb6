"""The tempered family (docs/studies/rare-learnable.md): ``local.base_temperature`` τ is a typed
setting, and a spec at each level loads the shipped math base with τ folded into its final layer
(the final LayerNorm's weight and bias / τ, everything else the shipped bits), which keeps every
token's argmax and scores the level's shipped record (``base_models/tempered-math.json``).

Tolerances: avg@8 as the shipped bases' tests (10 of a benchmark's 512 samples); the teacher-forced
numbers have no sampling, so only float rounding moves them.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from gppo.backends.local.settings import LocalSettings
from gppo.errors import SpecError
from gppo.grid import load_plan
from gppo.testbed.answer_prob import answer_summary
from gppo.testbed.base_eval import cached_base_eval
from gppo.testbed.evaluate import evaluate
from gppo.testbed.policy import fold_temperature
from gppo.testbed.shipped import SHIPPED_DIR, shipped_record
from gppo.testbed.tasks import get_domain
from gppo.testbed.tempered import tempered_record, tempered_records
from gppo.testbed.vocab import encode, left_pad
from gppo.testbed.warmstart import load_base_model

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "configs" / "rare-learnable.yaml"
AXIS = "local.base_temperature"
#: the study's levels (the spec's axis), coolest first
LEVELS = (1.0, 1.5, 2.2, 2.6)
RECORD_TOL = 0.02
ANSWER_TOL = 1e-3
FOLDED = ("ln_f.weight", "ln_f.bias")


def _shipped_state() -> dict[str, torch.Tensor]:
    rec = shipped_record("math")
    assert rec is not None
    blob = torch.load(str(SHIPPED_DIR / rec["file"]), map_location="cpu", weights_only=True)
    return {k: v.float() for k, v in blob["state_dict"].items()}


def _level_settings() -> dict[float, LocalSettings]:
    """The spec's cells' settings by level, each level's one set (every cell of a level shares
    its base)."""
    by_level: dict[float, LocalSettings] = {}
    for cell in load_plan(SPEC).cells:
        tau = cell.axes[AXIS]
        s = LocalSettings.model_validate(cell.settings)
        assert by_level.setdefault(tau, s) == s, (tau, cell.id)
    return by_level


def _prompt_logits(policy: torch.nn.Module) -> torch.Tensor:
    """The next-token logits at every real position of 64 benchmark prompts (16 a family)."""
    domain = get_domain("math")
    prompts = [p.prompt for b in domain.benchmark_names for p in domain.benchmark(b)[:16]]
    ids, valid = left_pad([encode(p) for p in prompts])
    with torch.no_grad():
        logits, _ = policy(ids, valid)
    return logits[valid.bool()]


@pytest.mark.parametrize("bad", [0, -1.5, math.inf, math.nan])
def test_base_temperature_is_validated(bad) -> None:
    with pytest.raises(ValidationError, match="base_temperature"):
        LocalSettings(base_temperature=bad)


def test_a_spec_with_a_bad_base_temperature_stops_in_one_line_naming_it(tmp_path) -> None:
    spec = tmp_path / "grid.yaml"
    spec.write_text(SPEC.read_text().replace("[1.0, 1.5, 2.2, 2.6]", "[1.0, 0.0]"))
    with pytest.raises(SpecError) as err:
        load_plan(spec)
    assert "local.base_temperature" in str(err.value) and "\n" not in str(err.value).strip()


def test_the_neutral_temperature_stays_out_of_the_settings_hash() -> None:
    """τ = 1 is not in a cell's settings, so a cell written before the knob keeps its hash (and
    its run); any other τ is."""
    assert "base_temperature" not in LocalSettings().model_dump(mode="json")
    assert LocalSettings(base_temperature=1.0).model_dump() == LocalSettings().model_dump()
    assert LocalSettings(base_temperature=2.2).model_dump()["base_temperature"] == 2.2


def test_the_spec_runs_the_shipped_levels() -> None:
    recs = tempered_records("math")
    assert recs is not None
    shipped = tuple(lv["base_temperature"] for lv in recs["levels"])
    assert shipped == LEVELS
    assert tuple(sorted(_level_settings())) == LEVELS
    plan = load_plan(SPEC)
    assert len(plan.cells) == 2 * 3 * len(LEVELS) * 5  # TV, KL x MC, Atomic, Binary x 5 seeds


def test_tau_one_loads_the_shipped_base_bit_for_bit(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GPPO_CACHE_DIR", str(tmp_path / "empty-cache"))
    settings = _level_settings()[1.0]
    base = load_base_model(settings, say=pytest.fail)  # building anything would fail here
    assert base.source == "shipped" and base.temperature == 1.0
    got, want = base.policy.state_dict(), _shipped_state()
    assert got.keys() == want.keys()
    for name, tensor in want.items():
        assert torch.equal(got[name], tensor), name


@pytest.mark.parametrize("tau", LEVELS[1:])
def test_a_level_loads_the_shipped_base_with_its_final_layer_over_tau(
    tau, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("GPPO_CACHE_DIR", str(tmp_path / "empty-cache"))
    base = load_base_model(_level_settings()[tau], say=pytest.fail)
    rec = shipped_record("math")
    assert rec is not None and base.source == "shipped" and base.path.endswith(rec["file"])
    got, want = base.policy.state_dict(), _shipped_state()
    for name, tensor in want.items():
        expected = tensor / tau if name in FOLDED else tensor
        assert torch.equal(got[name], expected), (tau, name)
    plain = load_base_model(LocalSettings(), say=pytest.fail).policy
    cool, hot = _prompt_logits(plain), _prompt_logits(base.policy)
    assert torch.equal(hot.argmax(-1), cool.argmax(-1)), tau  # every position's first token kept
    torch.testing.assert_close(hot, cool / tau, rtol=1e-5, atol=1e-5)


def test_a_power_of_two_temperature_divides_the_logits_exactly() -> None:
    """The docs' claim: for τ = 2 the folded logits are the base's / 2 to the last bit."""
    policy = load_base_model(LocalSettings(), say=pytest.fail).policy
    cool = _prompt_logits(policy)
    assert torch.equal(_prompt_logits(fold_temperature(policy, 2.0)), cool / 2)


@pytest.mark.parametrize("tau", LEVELS)
def test_a_level_scores_its_record(tau, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GPPO_CACHE_DIR", str(tmp_path / "empty-cache"))
    rec = tempered_record("math", tau)
    assert rec is not None, f"no record for base_temperature {tau}"
    settings = _level_settings()[tau]
    policy = load_base_model(settings, say=pytest.fail).policy
    domain = get_domain("math")
    got = evaluate(policy, domain, domain.benchmark_names, 8, settings.eval_seed)
    for name, want in rec["avg_at_8"].items():
        assert abs(got[name] - want) <= RECORD_TOL, (tau, name, got[name], want)
    for name in domain.benchmark_names:
        answers = answer_summary(policy, domain.benchmark(name))
        for key, want in rec["answers"][name].items():
            assert abs(answers[key] - want) <= ANSWER_TOL, (tau, name, key, answers[key], want)


def test_the_correct_answers_get_rarer_level_by_level() -> None:
    recs = [tempered_record("math", tau) for tau in LEVELS]
    assert all(recs)
    means = [r["answers_mean"] for r in recs if r]
    p = [m["p_answer"] for m in means]
    mu = [m["answer_token_mu"] for m in means]
    assert p == sorted(p, reverse=True) and mu == sorted(mu, reverse=True)
    assert p[-1] < 0.02 < 0.25 < p[0]  # from the quick start's base down to rare
    default = shipped_record("math")
    assert default is not None and recs[0] is not None
    assert recs[0]["avg_at_8"] == default["avg_at_8"]  # τ = 1 is the shipped base's own record


def test_a_tempered_base_does_not_reuse_the_plain_bases_step0_evaluation(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("GPPO_CACHE_DIR", str(tmp_path / "cache"))
    settings = LocalSettings()
    plain = load_base_model(settings, say=pytest.fail)
    hot = load_base_model(LocalSettings(base_temperature=2.2), say=pytest.fail)
    cached_base_eval(plain, settings, ["add"], 8, lambda: {"add": 0.4})
    got, reused = cached_base_eval(hot, settings, ["add"], 8, lambda: {"add": 0.03})
    assert (got, reused) == ({"add": 0.03}, False)
    again, reused = cached_base_eval(plain, settings, ["add"], 8, lambda: {"add": -1.0})
    assert (again, reused) == ({"add": 0.4}, True)
