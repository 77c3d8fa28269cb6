"""Report edge cases and the live progress panel, on real Optuna studies (no Ray)."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import optuna
import yaml
from rich.console import Console

from gppo.grid.load import load_plan
from gppo.sweep.tuning import load_tune_spec, write_report
from gppo.sweep.tuning.percell import cell_specs, default_params
from gppo.sweep.tuning.study_progress import Progress

from .conftest import spec_dict, write


def _study(tmp_path: Path, values: list[float | None]) -> optuna.Study:
    study = optuna.create_study(
        storage=f"sqlite:///{tmp_path}/o.db", study_name="tp", direction="maximize"
    )
    for i, v in enumerate(values):
        t = study.ask()
        t.suggest_categorical("divergence", ["tv", "kl"])
        t.suggest_categorical("estimator", ["mc", "atomic"])
        t.suggest_float("r_min", 0.7, 0.9, log=True)
        t.suggest_float("lr", 1e-4, 1e-2, log=True)
        t.set_user_attr("gppo.config", f"config {i}")
        if v is None:
            study.tell(t, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(t, v)
    return study


def test_report_without_enough_trials(tmp_path: Path) -> None:
    spec = load_tune_spec(write(tmp_path, spec_dict(tmp_path)))
    rep = write_report(spec, _study(tmp_path, [None]), tmp_path / "r0")
    assert rep.rows == [] and rep.best_spec is None
    assert any("no COMPLETE trial" in n for n in rep.notes)
    (tmp_path / "x").mkdir()
    rep = write_report(spec, _study(tmp_path / "x", [0.3, None]), tmp_path / "r1")
    assert [p.name for p in rep.files] == [
        "best_trials.md", "optimization_history.html", "optimization_history.png", "best.yaml",
        "best-axes.yaml",
    ]  # fmt: skip
    # best.yaml's configuration with axes around it: lr x/÷ 2 and r_min x/÷ 1.1, in range
    around = yaml.safe_load((tmp_path / "r1" / "best-axes.yaml").read_text())
    best = yaml.safe_load((tmp_path / "r1" / "best.yaml").read_text())
    r, lr = best["calibration"]["r_min"], best[best["backend"]]["lr"]
    axes = around["axes"]
    assert float(f"{r:.4g}") in axes["calibration.r_min"]
    assert all(0.7 <= v <= 0.9 for v in axes["calibration.r_min"])
    assert axes[f"{best['backend']}.lr"] == sorted(
        {float(f"{v:.4g}") for v in (lr / 2, lr, lr * 2) if 1e-4 <= v <= 1e-2}
        | {float(f"{lr:.4g}")}
    )
    assert len(load_plan(tmp_path / "r1" / "best-axes.yaml").cells) > len(
        load_plan(tmp_path / "r1" / "best.yaml").cells
    )
    assert any("parameter importances need" in n for n in rep.notes)
    assert "config 0" in (tmp_path / "r1" / "best_trials.md").read_text()


def test_progress_panel_and_per_cell_specs(tmp_path: Path) -> None:
    spec = load_tune_spec(
        write(tmp_path, spec_dict(tmp_path, tune={"per_cell": True, "default_first": True}))
    )
    subs = cell_specs(spec)
    assert [s.study_name for s in subs] == ["tp.tv-mc", "tp.tv-atomic", "tp.kl-mc", "tp.kl-atomic"]
    assert all(s.tune.space.divergences == [s.study_name[3:5]] for s in subs)
    assert default_params(subs[0]) == {"r_min": 0.8, "lr": 1e-3}
    study = _study(tmp_path, [0.2, 0.5, None])
    running = SimpleNamespace(number=3, label="kl/mc r_min=0.8", last_step=2, reported={2: 0.125})
    tuner = SimpleNamespace(study=study, spec=spec, active={3: running})
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    console.print(Progress(console).render(tuner))
    text = out.getvalue()
    assert "done 2/6 (complete 2, pruned 0)" in text and "failed 1" in text
    assert "best so far: 0.5000 (trial 1: config 1)" in text and "0.1250" in text
