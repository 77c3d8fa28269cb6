"""``verl.testbed: true``: the testbed's base, tasks, reward and evaluator, handed to verl.

The pieces that make a verl cell comparable with a testbed cell: the same training prompts in the
same order, the same benchmarks under their own ``data_source``, the same 0/1 scorer, the same
float32 settings, and the testbed evaluator's numbers under the names Table 1 reads.
"""

from __future__ import annotations

import random
import subprocess
import sys

import pandas as pd
import pytest
from pydantic import ValidationError

from gppo import metrics as m
from gppo.backends.rewards import compute_score
from gppo.backends.verl.metrics_map import mapped_points
from gppo.backends.verl.overrides import build_overrides
from gppo.backends.verl.settings import VerlSettings
from gppo.cell import Cell
from gppo.testbed import hf_assets as testbed
from gppo.testbed.tasks import get_domain

from .conftest import REPO

PRESET = REPO / "configs" / "verl-cpu-testbed.yaml"


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPPO_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _settings(**extra) -> VerlSettings:
    raw = {
        "cpu": True,
        "testbed": True,
        "max_prompt_length": 9,
        "max_response_length": 5,
        "total_steps": 3,
        "prompts_per_step": 4,
        "mini_batch_prompts": 1,
        "gpus_per_node": 1,
        "dtype": "float32",
        "shuffle_mini_batches": True,
    }
    return VerlSettings.model_validate({**raw, **extra})


def _cell(settings: VerlSettings, seed: int = 2) -> Cell:
    return Cell(
        id=f"tv-mc-s{seed}",
        method="gppo",
        seed=seed,
        loss_params={"divergence": "tv", "estimator": "mc"},
        backend="verl",
        settings=settings.model_dump(mode="json"),
    )


def test_the_training_stream_is_the_testbeds_own_prompts_in_its_order(cache):
    from gppo.backends.local.settings import LocalSettings
    from gppo.backends.local.train import Trainer
    from gppo.testbed.policy import Policy, PolicyConfig

    assets = testbed.TestbedAssets.for_domain("math")
    path = testbed.ensure_train_stream(assets, seed=5, steps=3, prompts_per_step=4)
    rows = pd.read_parquet(path)
    dom = get_domain("math")
    local = LocalSettings(prompts_per_step=4)
    policy = Policy(PolicyConfig(d_model=32, n_layers=1, n_heads=1, max_len=22))
    trainer = Trainer(policy, dom, local, loss_fn=None, seed=5)  # the testbed's own RNG
    expected = [p for _ in range(3) for p in dom.sample_train(trainer.prompt_rng, 4)]
    assert [r[0]["content"] for r in rows["prompt"]] == [p.prompt for p in expected]
    assert [r["ground_truth"] for r in rows["reward_model"]] == [p.answer for p in expected]
    assert set(rows["data_source"]) == {"testbed-math"}
    held = dom.heldout_prompts
    assert not held & {p.prompt for p in expected}


def test_the_reward_is_the_testbeds_scorer():
    dom = get_domain("math")
    for name in dom.benchmark_names:
        rng = random.Random(name)
        for p in dom.benchmark(name)[:16]:
            wrong = dom.corrupt(p, rng)
            for text in (p.answer, wrong, p.answer + "0", ""):
                got = compute_score(name, text, p.answer)
                assert got == {"score": dom.score(p, text), "acc": dom.score(p, text)}
    assert compute_score("testbed-math", "3", "3")["score"] == 1.0


def test_settings_name_the_testbeds_files_per_seed(cache):
    s = _settings()
    assert s.model.endswith("/model")
    assert s.train_for(0) != s.train_for(1)
    assert s.train_for(1).endswith("train-s1-12.parquet")
    assert list(s.benchmark_files) == list(get_domain("math").benchmark_names)
    assert all(f.endswith(f"{b}.parquet") for b, f in s.benchmark_files.items())


def test_overrides_run_verl_in_float32_on_the_testbeds_stream(cache):
    s = _settings()
    ov = build_overrides(_cell(s), s)
    assert ov["data.train_files"] == [s.train_for(2)]
    assert ov["data.shuffle"] is False
    assert ov["actor_rollout_ref.actor.shuffle"] is True  # mini-batches of shuffled rows
    assert ov["actor_rollout_ref.rollout.dtype"] == "float32"
    assert ov["+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype"] == "fp32"
    assert "hf_model" in ov["actor_rollout_ref.actor.checkpoint.save_contents"]
    bf16 = _settings(dtype="bfloat16")
    assert "actor_rollout_ref.rollout.dtype" not in build_overrides(_cell(bf16), bf16)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"max_response_length": 20}, "exceeds the math testbed base's 22 positions"),
        ({"max_prompt_length": 6}, "max_prompt_length: 6 is below the math testbed's longest"),
        ({"max_response_length": 4}, "max_response_length: 4 is below the math testbed's"),
        ({"domain": "code"}, "testbed: true is built for domain math only"),
        ({"model_path": "/m"}, "testbed: true builds its own model and data; drop model_path"),
        ({"smoke_assets": True}, "smoke_assets and testbed are two sets of built assets"),
    ],
)
def test_a_testbed_cell_verl_cannot_run_is_refused(extra, message):
    with pytest.raises(ValidationError, match=message):
        _settings(**extra)


def test_verls_validation_is_kept_apart_from_the_testbed_evaluators_scores():
    history = {"val-core/add/acc/mean_at_8": [(0, 0.4), (60, 0.7)]}
    ours = mapped_points(history, ["add"], 8)
    assert {p.key for p in ours} == {
        m.eval_metric("add", 8),
        m.eval_domain_metric(8),
        m.eval_base_metric("add", 8),  # step 0: the base model, by the protocol's own name
    }
    testbed_run = mapped_points(history, ["add"], 8, verl_scores=False)
    assert {(p.key, p.step, p.value) for p in testbed_run} == {
        (m.verl_val_metric("add", 8), 0, 0.4),
        (m.verl_val_metric("add", 8), 60, 0.7),
    }


@pytest.mark.slow
def test_plan_refuses_a_preset_verl_cannot_run_in_one_line(tmp_path):
    spec = tmp_path / "grid.yaml"
    spec.write_text(PRESET.read_text().replace("max_response_length: 5", "max_response_length: 30"))
    proc = subprocess.run(
        [sys.executable, "-m", "gppo.cli", "plan", str(spec)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip() and "WARNING" not in x]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{spec}: verl: ")
    assert "exceeds the math testbed base's 22 positions" in lines[0]
    assert not (tmp_path / "mlflow.db").exists()
