"""The TRL backend's evaluation samples at ``val_temperature`` (verl's name and default), not at
the training ``temperature``, on both routes; a bad value is refused in one line naming it."""

from __future__ import annotations

import pytest
import yaml

from gppo.backends.trl.settings import TrlSettings
from gppo.cell import Cell
from gppo.errors import GppoError
from gppo.grid import load_plan

K = 4


def test_the_real_model_evaluator_samples_at_val_temperature(tmp_path):
    """A real tiny model (the verl smoke assets' random Qwen2): near 0, the k samples of a prompt
    are one text even though training samples at 5; at 5, they differ even though training
    samples near 0."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gppo.backends.trl.realmodel import Evaluator
    from gppo.backends.verl.smoke import build_smoke_assets

    assets = build_smoke_assets(tmp_path / "assets")
    model = AutoModelForCausalLM.from_pretrained(assets.model_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(assets.model_dir, padding_side="left")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    own = {"testbed": False, "model_path": "/m", "train_file": "/t", "val_files": {"smoke": "/v"}}
    prompt = [{"role": "user", "content": "What is 2 + 3?"}]

    def samples(temperature: float, val_temperature: float) -> list[str]:
        s = TrlSettings(
            **own, temperature=temperature, val_temperature=val_temperature, max_new_tokens=12
        )
        torch.manual_seed(0)
        return Evaluator(s, tok, {}, K).sample(model, [prompt])

    cold = samples(temperature=5.0, val_temperature=1e-3)
    hot = samples(temperature=1e-3, val_temperature=5.0)
    assert len(cold) == len(hot) == K
    assert len(set(cold)) == 1, cold
    assert len(set(hot)) > 1, hot


def test_the_testbed_evaluator_scores_at_val_temperature(tmp_path):
    """The testbed route's score is the testbed evaluator's at ``val_temperature`` (near-greedy
    samples of the base score otherwise than at the default 1)."""
    from gppo.backends.trl.__main__ import testbed_parts
    from gppo.testbed.yardstick import score_model_dir

    cell = Cell(id="tv-mc-s0", method="gppo", seed=0, backend="trl", eval_k=2,
                loss_params={"divergence": "tv", "estimator": "mc"})  # fmt: skip
    s = TrlSettings(steps=1, prompts_per_step=2, minibatches=1, val_temperature=0.05)
    parts = testbed_parts(s, cell, ["add-small"])
    scores = parts.score(parts.model, parts.base_dir)
    at = {t: score_model_dir(parts.base_dir, "math", ["add-small"], 2, s.eval_seed, t)
          for t in (0.05, 1.0)}  # fmt: skip
    assert scores == at[0.05] != at[1.0], (scores, at)


@pytest.mark.parametrize("value", [0, -1.0])
def test_a_bad_val_temperature_is_refused_in_one_line_naming_it(tmp_path, value):
    spec = {
        "name": "trl-bad",
        "backend": "trl",
        "trl": {"val_temperature": value},
        "grid": {"divergences": ["tv"], "estimators": ["mc"]},
        "seeds": [0],
    }
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(GppoError) as info:
        load_plan(path)
    message = str(info.value)
    assert "\n" not in message and "val_temperature" in message, message
