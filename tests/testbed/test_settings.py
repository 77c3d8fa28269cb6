"""The testbed's settings have one home: every section that trains on the testbed reads its RL
defaults and its base-model settings from :mod:`gppo.testbed.settings`, so the sections agree."""

from __future__ import annotations

import inspect
from dataclasses import fields

import pytest
from pydantic import ValidationError

from gppo.backends.local.settings import LocalSettings
from gppo.backends.trl.settings import TrlSettings
from gppo.backends.verl.settings import VerlSettings
from gppo.testbed.settings import EVAL_TEMPERATURE, RL, BaseModelSettings, base_settings
from gppo.testbed.warmstart import warmstart_hash


@pytest.mark.parametrize("name", [f.name for f in fields(RL)])
def test_local_and_trl_default_to_the_testbeds_rl_settings(name):
    local, trl = LocalSettings(), TrlSettings()
    assert getattr(local, name) == getattr(trl, name) == getattr(RL, name), name


def test_verl_scores_a_testbed_cell_with_the_testbeds_seed():
    assert VerlSettings.model_fields["eval_seed"].default == RL.eval_seed


def test_every_evaluator_samples_at_the_testbeds_temperature():
    """avg@k's temperature has one home: the testbed's evaluator, its yardstick for exported
    models, and TRL's and verl's ``val_temperature`` default to it."""
    from gppo.testbed.evaluate import avg_at_k, evaluate
    from gppo.testbed.yardstick import score_model_dir

    defaults = {
        inspect.signature(f).parameters["temperature"].default
        for f in (avg_at_k, evaluate, score_model_dir)
    }
    defaults |= {
        TrlSettings().val_temperature,
        VerlSettings.model_fields["val_temperature"].default,
    }
    assert defaults == {EVAL_TEMPERATURE}


def test_local_settings_are_the_base_model_settings_and_more():
    base = set(BaseModelSettings.model_fields)
    assert base < set(LocalSettings.model_fields)
    assert {k for k in base if k.startswith("warmstart_")} == {
        k for k in LocalSettings.model_fields if k.startswith("warmstart_")
    }


@pytest.mark.parametrize("target", [None, 0.1, 0.03, 0.01])
def test_a_trl_cell_picks_the_base_a_local_cell_with_its_target_trains(target):
    trl = TrlSettings(warmstart_target=target)
    local = LocalSettings(warmstart_target=target)
    assert warmstart_hash(trl.base) == warmstart_hash(local) == warmstart_hash(base_settings(
        "math", target))  # fmt: skip


def test_warmstart_target_needs_the_testbed_route():
    with pytest.raises(ValidationError, match=r"warmstart_target .* needs testbed: true"):
        TrlSettings(
            testbed=False,
            warmstart_target=0.03,
            model_path="/m",
            train_file="/t.parquet",
            val_files={"aime24": "/a.parquet"},
        )
    with pytest.raises(ValidationError, match="warmstart_target picks a testbed base"):
        VerlSettings(
            warmstart_target=0.03,
            model_path="/m",
            train_file="/t.parquet",
            val_files={"aime24": "/a.parquet"},
        )
