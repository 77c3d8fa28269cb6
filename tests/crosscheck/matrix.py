"""The combinations of the independent check (issue 57): one small probe sweep per combination of
seeds (fixed, adaptive) x axis (none, one that moves the base, one that does not) x identical
cells x a failed seed x a budget that cuts x a kill -9 of the launcher and a relaunch; each run
on a given Ray head and checked by :mod:`crosscheck.recompute` against ``table1.csv``,
``scores.csv``, the report page and ``gppo-sweep status``.

Scores are fixed by cell, seed and point: the probe's ``score`` (tv/mc 50, kl/mc 30 points) plus
0.05 x a normal draw fixed by the cell's id (its seed and axis suffix in it); the base model's
is ``probe.base_score`` (10 points, or the axis's value)."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from crosscheck.adaptive_rule import Adaptive
from crosscheck.recompute import disagreements, runs_frame, status_disagreements
from gppo import metrics as M

TESTS = Path(__file__).resolve().parents[1]
AXES = {
    "none": {},
    "moves": {"probe.base_score": [0.1, 0.3]},  # the base's own score: moves the base row
    "still": {"probe.note": ["a", "b"]},  # a new run at each point, the base unmoved
}


@dataclass(frozen=True)
class Combo:
    seeds: str = "fixed"  # fixed | adaptive
    axis: str = "none"  # none | moves | still
    same: bool = False  # chi2/mc on tv/mc's runs
    fail: bool = False  # kl/mc's seed 1 fails at every point, no retry
    budget: bool = False  # a run budget below what the sweep would run
    kill9: bool = False  # the launcher killed -9 after its first finished run, then relaunched

    def name(self) -> str:
        flags = [f for f in ("same", "fail", "budget", "kill9") if getattr(self, f)]
        return "-".join([self.seeds, self.axis, *flags])


#: pairwise: every pair of two features' values in at least one combination (7 sweeps)
PAIRWISE = [
    Combo("fixed", "none"),
    Combo("fixed", "none", budget=True, kill9=True),
    Combo("fixed", "moves", fail=True, kill9=True),
    Combo("adaptive", "moves", same=True, budget=True),
    Combo("fixed", "still", same=True, kill9=True),
    Combo("adaptive", "still", fail=True, budget=True),
    Combo("adaptive", "none", same=True, fail=True, kill9=True),
]


def full_product() -> list[Combo]:
    values = (("fixed", "adaptive"), tuple(AXES), *[(False, True)] * 4)
    return [Combo(*v) for v in itertools.product(*values)]


def pairs_covered(combos: list[Combo]) -> set[tuple]:
    fields = ("seeds", "axis", "same", "fail", "budget", "kill9")
    return {
        (a, getattr(c, a), b, getattr(c, b))
        for c in combos
        for a, b in itertools.combinations(fields, 2)
    }


def spec_of(combo: Combo, folder: Path, address: str | None) -> dict:
    divs = ["tv", "chi2", "kl"] if combo.same else ["tv", "kl"]
    overrides: dict = {"kl-mc": {"probe": {"score": 0.3}}}
    if combo.fail:
        overrides["kl-mc-s1"] = {"probe": {"always_fail": True}}
    points = len(next(iter(AXES[combo.axis].values()), [None]))
    spec = {
        "name": f"cc-{combo.name()}",
        "backend": "probe",
        "probe": {
            "steps": 2 if combo.kill9 else 1,
            "sleep_s": 1.0 if combo.kill9 else 0.0,
            "score_sd": 0.05,
            "marker_dir": str(folder / "m"),
        },
        "grid": {"divergences": divs, "estimators": ["mc"]},
        "seeds": {"min": 2, "max": 3} if combo.seeds == "adaptive" else 2,
        "overrides": overrides,
        "tracking": {"uri": f"sqlite:///{folder}/mlflow.db"},
        "ray": {"address": address, "max_concurrent": 4, "resources": {"num_cpus": 0.5}},
        "retries": {"max": 0, "backoff_s": 0.2},
        "analysis": {"figures": False},  # the check reads the tables and the page, not figures
    }
    if AXES[combo.axis]:
        spec["axes"] = AXES[combo.axis]
    if combo.budget:  # one run fewer than the first round (fixed: than every trained run)
        spec["budget"] = {"runs": 2 * 2 * points - 1}
    return spec


def _cli() -> list[str]:
    code = (
        f"import sys; sys.path.insert(0, {str(TESTS)!r}); import sweep.probe_backend; "
        "from gppo.cli import app; app()"
    )
    return [sys.executable, "-c", code]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RAY_ADDRESS"))}
    env["COLUMNS"] = "200"
    return env


def _cli_run(args: list[str], cwd: Path, timeout: float = 300) -> tuple[int, str]:
    done = subprocess.run([*_cli(), *args], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def _cli_in_process(args: list[str], cwd: Path) -> tuple[int, str]:
    """``report`` or ``status`` in this process (typer's ``CliRunner``, the CLI's own app), in
    ``cwd``, without the caller's MLflow or Ray variables: the same command without a new
    interpreter's 5-8 s of CPU for its imports (MLflow, SQLAlchemy, torch, scipy) each time."""
    import contextlib
    import traceback

    import sweep.probe_backend  # noqa: F401  (registers the probe backend)
    from typer.testing import CliRunner

    from gppo.cli import app

    unset = {k: None for k in os.environ if k.startswith(("MLFLOW_", "RAY_ADDRESS"))}
    with contextlib.chdir(cwd):
        got = CliRunner().invoke(app, args, env={**unset, "COLUMNS": "200"})
    out = got.output
    if got.exception is not None and not isinstance(got.exception, SystemExit):
        out += "".join(traceback.format_exception(got.exception))
    return got.exit_code, out


def _kill9_after_first_run(spec: Path, folder: Path) -> None:
    proc = subprocess.Popen([*_cli(), "launch", str(spec)], cwd=folder, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    marks = folder / "m"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        ends = (
            [p for p in marks.glob("*.times") if "end" in p.read_text()] if marks.exists() else []
        )
        if ends:
            break
        time.sleep(0.3)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def run_combo(combo: Combo, folder: Path, address: str | None) -> list[str]:
    """Run the combination's sweep in ``folder``; every disagreement (empty: all agree)."""
    folder.mkdir(parents=True, exist_ok=True)
    spec = spec_of(combo, folder, address)
    path = folder / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    if combo.kill9:
        _kill9_after_first_run(path, folder)
    code, out = _cli_run(["launch", str(path)], folder)
    if "Traceback" in out:
        return [f"launch crashed (exit {code}): {out[-3000:]}"]
    report = folder / "report"
    code, rep = _cli_in_process(["report", str(path), "--out", str(report)], folder)
    if code != 0:
        return [f"report exit {code}: {rep[-3000:]}"]
    every = runs_frame(spec["tracking"]["uri"], spec["name"])
    runs = every[every["finished"]]
    adaptive = Adaptive.of_spec(spec) if combo.seeds == "adaptive" else None
    bad = disagreements(report, every, list(AXES[combo.axis]), adaptive=adaptive)
    code, status = _cli_in_process(["status", str(path)], folder)
    bad += status_disagreements(status, every) if code == 0 else [f"status exit {code}: {status}"]
    bad += _simple_facts(combo, spec, runs)
    return bad


def _simple_facts(combo: Combo, spec: dict, runs) -> list[str]:
    """What the combination itself says: no failed seed finished; a budget caps the runs."""
    bad = []
    if combo.fail and (runs["seed"].eq(1) & runs["label"].eq("kl/mc")).any():
        bad.append("kl/mc seed 1 always fails, yet a run of it finished")
    trained = runs[runs["same_runs"].isna()]
    for cid in trained[~trained["has_cost"]]["cell_id"]:
        bad.append(f"cost per run: {cid} trained and has no {M.COST_CPU_HOURS}")
    if combo.budget and len(trained) > spec["budget"]["runs"]:
        bad.append(f"{len(trained)} runs trained over a budget of {spec['budget']['runs']}")
    if combo.same and not runs[runs["label"] == "chi2/mc"]["same_runs"].notna().all():
        bad.append("a chi2/mc run trained on its own")
    seeds = 3 if combo.seeds == "adaptive" else 2
    if (runs["seed"] >= seeds).any():
        bad.append(f"a seed past {seeds} ran")
    if runs.duplicated(["cell_id"]).any():
        bad.append(
            f"a cell finished twice: {runs[runs.duplicated(['cell_id'])]['cell_id'].tolist()}"
        )
    return bad


if __name__ == "__main__":  # one combination by hand: python tests/crosscheck/matrix.py fixed none
    args = sys.argv[1:]
    combo = Combo(args[0], args[1], *[f in args[2:] for f in ("same", "fail", "budget", "kill9")])
    import tempfile

    problems = run_combo(combo, Path(tempfile.mkdtemp(prefix="cc-")), None)
    print("\n".join(problems) or f"{combo.name()}: every number agrees")
    sys.exit(1 if problems else 0)
