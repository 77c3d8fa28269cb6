"""The TRL backend's real-model route (``trl.testbed: false``): a Hugging Face model directory of
the user's, data written by ``gppo-sweep data prepare -b trl``, verl's scorers as the reward and
the evaluation. End to end on the verl smoke assets (a tiny random Qwen2 with a chat template and
``smoke`` data written by data prepare's own converter) through TRL's real trainer, into a
SQLite MLflow run checked against the backend protocol."""

from __future__ import annotations

import json

import pytest
import yaml

from gppo import metrics as M
from gppo.backends.base import get_backend
from gppo.errors import GppoError
from gppo.grid import load_plan

STEPS, K = 2, 2


def _spec(tmp_path, trl: dict) -> object:
    spec = {
        "name": "trl-real",
        "backend": "trl",
        "trl": trl,
        "grid": {"divergences": ["tv"], "estimators": ["mc"]},
        "seeds": [0],
        "eval": {"k": K},
    }
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize(
    ("trl", "names"),
    [
        ({"testbed": False}, ("model_path", "train_file", "val_files")),
        ({"testbed": False, "model_path": "/m", "val_files": {"aime24": "/a"}}, ("train_file",)),
        ({"model_path": "/m"}, ("testbed: true", "model_path")),
        ({"domain": "code"}, ("domain", "testbed: false")),
        # settings of a model of your own are refused beside the testbed, not ignored
        (
            {"max_prompt_length": 64, "eval_batch_size": 8},
            ("max_prompt_length", "eval_batch_size", "testbed: false"),
        ),
        ({"chat_template": False}, ("chat_template", "testbed: false")),
        ({"vllm_mode": "server"}, ("vllm_mode", "use_vllm: true")),
        (
            {
                "testbed": False,
                "model_path": "/m",
                "train_file": "/t",
                "val_files": {"a": "/a"},
                "num_gpus": 1,
                "use_vllm": True,
                "vllm_mode": "server",
            },
            ("vllm_mode: server", "vllm_server_url"),
        ),
    ],
)
def test_a_bad_route_is_refused_in_one_line_naming_the_field(tmp_path, trl, names):
    with pytest.raises(GppoError) as info:
        load_plan(_spec(tmp_path, trl))
    message = str(info.value)
    assert "\n" not in message and all(n in message for n in names), message


def test_check_names_the_model_and_data_files_this_machine_lacks(tmp_path):
    """``gppo-sweep check`` on a real-model cell: each missing path, by field, in one line."""
    from gppo.backends.trl.preflight import check_cell

    (tmp_path / "train.parquet").write_bytes(b"")
    trl = {
        "testbed": False,
        "model_path": str(tmp_path / "no-model"),
        "train_file": str(tmp_path / "train.parquet"),
        "val_files": {"aime24": str(tmp_path / "aime24.parquet")},
    }
    (cell,) = load_plan(_spec(tmp_path, trl)).cells
    result = check_cell(cell)
    assert not result.ok and result.stage == "config", result
    assert "model_path:" in result.detail and "val_files.aime24:" in result.detail
    assert "train_file" not in result.detail and "\n" not in result.line()


def test_data_prepare_for_trl_writes_the_rows_verl_reads(tmp_path):
    """``data prepare -b trl`` and ``-b verl`` write the same file: a spec's data serve both."""
    import pandas as pd

    src = tmp_path / "in.jsonl"
    rows = [{"problem": "What is 2 + 3?", "answer": 5}, {"question": "1+1?", "answer": "2"}]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    outs = {}
    for name in ("trl", "verl"):
        report = get_backend(name).prepare_data(
            src, tmp_path / f"{name}.parquet", "aime24", split="test", skip_invalid=False
        )
        assert report.written == 2
        outs[name] = pd.read_parquet(report.output)
    pd.testing.assert_frame_equal(outs["trl"], outs["verl"])
    assert outs["trl"]["reward_model"][0]["ground_truth"] == "5"


def test_evaluation_is_the_share_of_samples_scored_right(monkeypatch):
    """avg@k = hits over prompts x k samples, by compute_score's ``acc`` (``smoke``: the answer
    in the text); the reward TRL calls reads conversational completions."""
    from gppo.backends.trl import realmodel
    from gppo.backends.trl.settings import TrlSettings

    s = TrlSettings(testbed=False, model_path="/m", train_file="/t", val_files={"smoke": "/v"})
    rows = [
        {"prompt": "p", "data_source": "smoke", "ground_truth": t, "extra_info": {}}
        for t in ("12", "34", "56")
    ]
    evaluator = realmodel.Evaluator(s.model_copy(update={"eval_batch_size": 4}), None, {}, 2)
    # 2 prompts per generate call (4 // k); per prompt: one right and one wrong sample, but
    # prompt "56" gets both right -> (1 + 1 + 2) / 6
    answers = iter([["12", "x", "34", "y"], ["56", "56"]])
    monkeypatch.setattr(evaluator, "sample", lambda model, prompts: next(answers))
    assert evaluator._avg_at_k(None, rows) == pytest.approx(4 / 6)
    rewards = realmodel.reward(
        [[{"role": "assistant", "content": "4 4"}], [{"role": "assistant", "content": "ab"}]],
        data_source=["smoke", "smoke"],
        ground_truth=["44", "44"],
    )
    assert rewards == [1.0, 0.0]  # smoke: the share of digits and spaces


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_real_model_cell_trains_through_trl_and_keeps_the_protocol(tmp_path, monkeypatch):
    """A spec with ``testbed: false`` plans a cell whose benchmarks are ``val_files``' keys; the
    entrypoint evaluates the base at step 0, logs ``train/*`` at each step, evaluates the final
    policy and tags the run finished, with nothing missing (protocol_violations)."""
    from mlflow.tracking import MlflowClient

    from gppo.backends.cell_run import CellRun, protocol_violations
    from gppo.backends.trl.__main__ import run_cell
    from gppo.backends.verl.smoke import build_smoke_assets

    monkeypatch.delenv(M.ENV_RUN_ID, raising=False)
    assets = build_smoke_assets(tmp_path / "assets")
    trl = {
        "testbed": False,
        "model_path": str(assets.model_dir),
        "train_file": str(assets.train_file),
        "val_files": {"smoke": str(assets.val_file)},
        "steps": STEPS,
        "prompts_per_step": 2,
        "group_size": 4,
        "minibatches": 2,
        "max_new_tokens": 8,
        "max_prompt_length": 64,
        "eval_prompts": 4,
        "save_every": STEPS,
        "checkpoint_dir": str(tmp_path / "ckpt"),
    }
    (cell,) = load_plan(_spec(tmp_path, trl)).cells
    assert cell.benchmarks == ("smoke",)
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    run_id = client.create_run(client.create_experiment("trl-real")).info.run_id
    run = CellRun(client, run_id, eval_k=K, benchmarks=cell.benchmarks)
    scores = run_cell(cell, run)
    assert set(scores) == {"smoke"} and 0.0 <= scores["smoke"] <= 1.0
    problems = protocol_violations(
        client, run_id, eval_k=K, benchmarks=cell.benchmarks, final_step=STEPS
    )
    assert problems == []
    for name in (M.TRAIN_SCORE, M.train_metric("entropy"), M.train_metric("response_length")):
        steps = sorted(int(m.step) for m in client.get_metric_history(run_id, name))
        assert steps == list(range(1, STEPS + 1)), name
    assert (tmp_path / "ckpt" / f"{cell.id}-{cell.config_hash}" / "final" / "config.json").is_file()


def test_training_data_smaller_than_one_step_is_refused_in_one_line(tmp_path):
    """Fewer training prompts than ``prompts_per_step``: TRL's sampler would yield no batch and
    the cell would "finish" untrained; the load names the file, both counts and the field."""
    from gppo.backends.trl import realmodel
    from gppo.backends.trl.settings import TrlSettings
    from gppo.errors import BackendError

    from ..test_backend_contract import _trl_real_section

    section = _trl_real_section(tmp_path)
    s = TrlSettings.model_validate({**section, "prompts_per_step": 10_000, "minibatches": 1})
    with pytest.raises(BackendError) as info:
        realmodel.load(s, ["smoke"], K)
    message = str(info.value)
    assert "\n" not in message and "prompts_per_step: 10000" in message, message
    assert section["train_file"] in message and "max_prompt_length: 64" in message, message
