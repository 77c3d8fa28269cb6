"""``gppo-sweep data prepare`` on small shipped fixtures, malformed rows included."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from gppo.backends.rewards import compute_score
from gppo.backends.rldata import DataPrepError, prepare
from gppo.cli.data import data_app

from .conftest import DATA

runner = CliRunner()


def test_malformed_rows_are_listed_and_nothing_is_written(tmp_path):
    out = tmp_path / "aime24.parquet"
    with pytest.raises(DataPrepError) as err:
        prepare(DATA / "math_raw.jsonl", out, "aime24", split="test")
    msg = str(err.value)
    assert "\n" not in msg and "4 of 8 rows" in msg and "Nothing was written" in msg
    assert "row 4: no answer" in msg and "row 5: invalid JSON" in msg
    assert "row 6: empty prompt" in msg and "row 7: prompt message 0" in msg
    assert not out.exists()


def test_skip_invalid_writes_verl_rows_and_a_rejects_file(tmp_path):
    out = tmp_path / "aime24.parquet"
    report = prepare(DATA / "math_raw.jsonl", out, "aime24", split="test", skip_invalid=True)
    assert report.written == 4 and [n for n, _ in report.rejected] == [4, 5, 6, 7]
    rejects = [json.loads(line) for line in report.rejects_file.read_text().splitlines()]
    assert [r["row"] for r in rejects] == [4, 5, 6, 7] and all(r["reason"] for r in rejects)
    frame = pd.read_parquet(out)
    assert list(frame.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    assert set(frame.data_source) == {"aime24"} and set(frame.ability) == {"math"}
    truths = [rm["ground_truth"] for rm in frame.reward_model]
    assert truths == ["24", "42", "2", "5"]
    first = list(frame.prompt[0])
    assert first[0]["role"] == "user" and "Answer:" in first[0]["content"]
    assert "2^10" in first[0]["content"]
    assert next(iter(frame.prompt[3]))["content"] == "Solve: 2+3. Answer: $Answer"  # kept as given
    assert frame.extra_info[0]["id"] == "aime24-1" and frame.extra_info[0]["split"] == "test"
    # the row scores with verl's scorer through our reward function
    good = compute_score("aime24", "work...\nAnswer: 24", truths[0])
    bad = compute_score("aime24", "Answer: 25", truths[0])
    assert good["acc"] == 1.0 and bad["acc"] == 0.0


def test_parquet_input_and_code_tests(tmp_path):
    rows = [json.loads(line) for line in (DATA / "code_raw.jsonl").read_text().splitlines()[:2]]
    src = tmp_path / "apps_raw.parquet"
    pd.DataFrame([{**r, "tests": json.dumps(r.get("tests"))} for r in rows]).to_parquet(src)
    report = prepare(src, tmp_path / "apps.parquet", "apps", split="test")
    assert report.written == 2 and not report.rejected
    frame = pd.read_parquet(tmp_path / "apps.parquet")
    tests = [json.loads(rm["ground_truth"]) for rm in frame.reward_model]
    assert tests[0]["inputs"] == ["3\n", "5\n"] and tests[1]["outputs"] == ["hi\n"]
    assert set(frame.ability) == {"code"} and "```python" in next(iter(frame.prompt[0]))["content"]


def test_code_fixture_rejections(tmp_path):
    report = prepare(DATA / "code_raw.jsonl", tmp_path / "taco.parquet", "taco", skip_invalid=True)
    reasons = dict(report.rejected)
    assert report.written == 2 and sorted(reasons) == [3, 4, 5, 6]
    assert "as many outputs as inputs" in reasons[3] and "not valid JSON" in reasons[4]
    assert "no test cases" in reasons[5] and "not an object" in reasons[6]


def test_cli_prepare(tmp_path):
    out = tmp_path / "smt25.parquet"
    args = ["prepare", str(DATA / "math_raw.jsonl"), str(out), "-b", "verl"]
    res = runner.invoke(data_app, [*args, "-s", "smt25"])
    assert res.exit_code == 2 and "cannot be converted" in res.output and not out.exists()
    res = runner.invoke(data_app, [*args, "-s", "smt25", "--skip-invalid"])
    assert res.exit_code == 0 and "wrote 4 rows (smt25)" in res.output and out.exists()
    res = runner.invoke(data_app, [*args, "-s", "gsm8k"])
    assert res.exit_code == 2 and "unknown data source 'gsm8k'; known:" in res.output


def test_data_prepare_is_the_backends_hook(tmp_path):
    """``--backend`` picks whose hook converts the file (by default a spec's default backend); a
    backend whose cells read no prepared data refuses in one line naming those that do (from the
    registry), an unknown one lists the known, nothing written."""
    out = tmp_path / "smt25.parquet"
    args = ["prepare", str(DATA / "math_raw.jsonl"), str(out), "-s", "smt25", "--skip-invalid"]
    res = runner.invoke(data_app, [*args, "--backend", "verl"])
    assert res.exit_code == 0 and "wrote 4 rows (smt25)" in res.output and out.exists()
    out.unlink()
    for backend, says in [
        ((), "backend 'local' reads no prepared data files"),
        (
            ("--backend", "local"),
            "for a backend that trains on a user's data: --backend trl | verl",
        ),
        (("--backend", "no-such"), "known: "),
    ]:
        res = runner.invoke(data_app, [*args, *backend])
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert res.exit_code != 0 and len(lines) == 1 and says in lines[0], res.output
        assert not out.exists()
