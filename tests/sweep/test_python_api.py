"""README's "From Python" example, run as written: a launch, then its report, joined by the
sweep handle (``LaunchResult.ref``), on a real local Ray head and a SQLite store (probe cells)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mlflow import MlflowClient

from gppo import metrics as M

from .conftest import write_spec

pytestmark = pytest.mark.slow  # Ray jobs

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_example() -> str:
    """The Python block of README's "From Python" section."""
    section = README.read_text().split("### From Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_launches_then_reports(tmp_path, ray_cluster, monkeypatch, capsys):
    grid = {"divergences": ["tv", "kl"], "estimators": ["mc"]}
    spec = write_spec(tmp_path, ray_cluster.address, name="pyapi", grid=grid)
    code = readme_example()
    assert 'load_plan("configs/quickstart.yaml")' in code  # the line the test points elsewhere
    monkeypatch.chdir(tmp_path)  # the report goes to ./reports/<sweep id>/
    scope: dict = {}
    exec(code.replace("configs/quickstart.yaml", str(spec)), scope)
    result, report, plan = scope["result"], scope["report"], scope["plan"]

    assert result.ok
    ref = result.ref
    client = MlflowClient(ref.tracking_uri)
    assert ref.sweep_id == plan.sweep_id
    assert client.get_experiment(ref.experiment_id).name == plan.spec.experiment
    parent = client.get_run(ref.parent_run_id)
    assert parent.data.tags[M.TAG_ROLE] == M.ROLE_SWEEP and parent.info.status == "FINISHED"
    assert sorted(ref.run_ids) == ["kl-mc-s0", "tv-mc-s0"]
    for cell_id, run_id in ref.run_ids.items():
        run = client.get_run(run_id)
        assert run.data.tags[M.TAG_CELL_ID] == cell_id and run.data.tags[M.TAG_FINISHED] == "true"
    # the report: the sweep's own folder, both cells in Table 1, printed by the example
    assert report.out_dir == Path("reports") / plan.sweep_id
    assert report.attached and report.parent_run_id == ref.parent_run_id
    printed = capsys.readouterr().out
    assert printed.strip() == (tmp_path / report.out_dir / "table1.md").read_text().strip()
    assert "MC (GRPO)" in printed and "KL" in printed
    # Table 1 was built from exactly the runs the launcher handed over
    assert set(report.tidy.dropna(subset=["run_id"])["run_id"]) >= set(ref.run_ids.values())
