"""scripts/exploration_report.py (issue 57, item 8): every table's header comes from the same
order as its cells, and the study pages' gain tables are what the script prints from their
per-run data (rare-learnable's had Atomic's numbers under Binary and Binary's under Atomic).
Issue 59: the per-run frame has the low side's clip fractions and abs_log_ratio, collected from
a run's history as the high side's are, and the script prints their tables (or that an older
CSV has none). Issue 59's second study has two axes (``--axis`` twice): a column per axis, a level
per combination in the axes' numeric order, a panel per second axis's value, and a CSV that
reports as the store did; and the manipulation check's table and strongest level."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pandas as pd
import pytest
from mlflow import MlflowClient
from scipy import stats

from gppo import metrics as M
from gppo.analysis.tables import exploration_contrasts as C
from gppo.analysis.vocabulary import EST_NAMES
from gppo.objectives.buckets import MU_BUCKETS
from gppo.store.records import RunRecord

ROOT = Path(__file__).resolve().parents[2]


def _load_script():
    """The script as a module, loaded at collection (its matplotlib import may build the font
    cache, a process, which a fast test may not start)."""
    spec = importlib.util.spec_from_file_location(
        "exploration_report", ROOT / "scripts" / "exploration_report.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = _load_script()


def test_each_column_is_named_by_its_numbers_estimator():
    gains = pd.DataFrame(
        [
            {"point": 1.0, "divergence": "tv", "estimator": e, "mean": m, "lo": m, "hi": m}
            for e, m in (("atomic", 1.0), ("mc", 2.0), ("binary", 3.0))
        ]
    )
    table = SCRIPT.gain_markdown(gains, {1.0: 10.0}).splitlines()
    header = [c.strip() for c in table[0].strip("|").split("|")]
    row = [c.strip() for c in table[2].strip("|").split("|")]
    by_name = dict(zip(header[3:], row[3:], strict=True))
    want = {"atomic": "+1.0", "mc": "+2.0", "binary": "+3.0"}
    assert {n: v.split()[0] for n, v in by_name.items()} == {
        EST_NAMES[e]: v for e, v in want.items()
    }


def _page_gains(page: str) -> dict[tuple[str, str], dict[str, str]]:
    """The page's gain table: (level, divergence) -> {estimator name: cell}."""
    text = (ROOT / "docs" / "studies" / page).read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    start = next(i for i, ln in enumerate(lines) if "| base avg@8 | divergence |" in ln)
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    out = {}
    for ln in lines[start + 2 :]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if len(cells) != len(header) or not re.match(r"^[0-9.]+$", cells[0]):
            break
        out[(cells[0], cells[2].lower())] = dict(zip(header[3:], cells[3:], strict=True))
    return out


@pytest.mark.parametrize(
    ("page", "spec", "axis", "data"),
    [
        ("rare-learnable.md", "rare-learnable.yaml", "local.base_temperature", "rare-learnable"),
        ("exploration.md", "exploration.yaml", "local.warmstart_target", "exploration"),
    ],
)
def test_the_study_pages_gain_tables_are_the_scripts(page, spec, axis, data, tmp_path):
    argv = [str(ROOT / "configs" / spec), "--axis", axis, "--out", str(tmp_path)]
    argv += ["--runs", str(ROOT / "docs" / "data" / f"{data}-runs.csv")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert SCRIPT.main(argv) == 0
    printed = [ln for ln in out.getvalue().splitlines() if ln.startswith("| ")]
    header = [c.strip() for c in printed[0].strip("|").split("|")]
    got = {}
    for ln in printed[2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if len(cells) != len(header):
            break
        got[(cells[0], cells[2].lower())] = dict(zip(header[3:], cells[3:], strict=True))
    shown = _page_gains(page)
    assert shown and shown == {key: got[key] for key in shown}


def test_the_rare_learnable_pages_low_side_and_step_tables_are_the_scripts(tmp_path):
    """Issue 59 items 1-2: the page's two tables are what the script prints from the data."""
    argv = [str(ROOT / "configs" / "rare-learnable.yaml"), "--axis", "local.base_temperature"]
    argv += ["--out", str(tmp_path), "--runs", str(ROOT / "docs/data/rare-learnable-runs.csv")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert SCRIPT.main(argv) == 0
    text = out.getvalue()
    tables = text[text.index("## Low-side clip fraction") :]
    rows = [ln for ln in tables.splitlines() if ln.startswith("| ")]
    assert len(rows) == 2 * (2 + 12)  # two tables: header, rule, 4 levels x 3 estimators
    page = (ROOT / "docs" / "studies" / "rare-learnable.md").read_text()
    assert [r for r in rows if r not in page] == []


# --- issue 59: the low side's clip fractions and abs_log_ratio -----------------------------------

BUCKETS = [b[0] for b in MU_BUCKETS]


class _History:
    """An MLflow-like client of metric histories only: ``get_metric_history`` of
    ``{run_id: {name: [(step, value), ...]}}`` (written in step order, one timestamp each)."""

    def __init__(self, runs: dict[str, dict[str, list[tuple[int, float]]]]) -> None:
        self.runs = runs

    def get_metric_history(self, run_id: str, name: str) -> list[SimpleNamespace]:
        rows = self.runs[run_id].get(name, [])
        return [SimpleNamespace(step=s, value=v, timestamp=i) for i, (s, v) in enumerate(rows)]


def _record(
    run_id: str, est: str, seed: int, axes: dict | None = None, div: str = "tv", final: float = 0.5
) -> RunRecord:
    tags = {M.TAG_FINISHED: "true", M.TAG_ESTIMATOR: est, M.TAG_DIVERGENCE: div,
            M.TAG_SEED: str(seed), M.TAG_CELL_ID: run_id, M.TAG_ATTEMPT: "1",
            M.TAG_AXES: json.dumps(axes or {"local.base_temperature": 2.2})}  # fmt: skip
    metrics = {M.eval_metric("b1", 8): final, M.eval_base_metric("b1", 8): 0.25}
    return RunRecord(run_id, "FINISHED", 0, 1, tags=tags, metrics=metrics)


def test_the_runs_frame_collects_the_low_side_and_abs_log_ratio_as_the_high_side(monkeypatch):
    """Per run: clip_low/<bucket> the mean over the logged steps of train/clip_frac_low/<bucket>
    (as clip_high/<bucket> of the high side's), abs_log_ratio the mean of train/abs_log_ratio
    over every step, abs_log_ratio_early over steps 1..10; a run that logged neither has NaN."""
    moves = [(s, 0.01 * s) for s in range(1, 13)]  # steps 1..12
    low = {
        M.clip_frac_bucket(b, "low"): [(1, 0.1 * i), (2, 0.3 * i)] for i, b in enumerate(BUCKETS)
    }
    high = {M.clip_frac_bucket(b, "high"): [(1, 0.2), (2, 0.4), (3, 0.6)] for b in BUCKETS}
    probe = {M.PROBE_P_ANSWER: [(0, 0.1), (10, 0.2)]}
    hist = {"r1": {**low, **high, **probe, M.ABS_LOG_RATIO: moves}, "r2": {}}  # r2: an old run
    records = [_record("r1", "atomic", 0), _record("r2", "mc", 0)]
    monkeypatch.setattr(C, "fetch_records", lambda *a, **k: records)
    client = cast(MlflowClient, _History(hist))  # runs_frame reads only metric histories
    frame = C.runs_frame(client, "sweep", "local.base_temperature")
    by = frame.set_index("estimator")
    new = [*C.clip_columns("low"), "abs_log_ratio", "abs_log_ratio_early"]
    assert list(frame.columns[-len(new) :]) == new  # after the old CSV's columns
    atomic = by.loc["atomic"]
    for i, b in enumerate(BUCKETS):
        assert atomic[f"clip_low/{b}"] == pytest.approx(0.2 * i)
        assert atomic[f"clip_high/{b}"] == pytest.approx(0.4)
    assert atomic["abs_log_ratio"] == pytest.approx(0.065)  # mean of 0.01..0.12
    assert atomic["abs_log_ratio_early"] == pytest.approx(0.055)  # mean of 0.01..0.10
    assert atomic["point"] == 2.2 and atomic["rise"] == pytest.approx(2.0)
    assert by.loc["mc", new].isna().all()


def _hand_runs(new: bool = True) -> pd.DataFrame:
    """One level (2.2), MC and Atomic, a run per divergence each; every clip fraction 0 except
    the low side's μ 0.1-0.5 (MC 1 % and 3 %, Atomic 5 % and 7 %); abs_log_ratio MC 0.02 and
    0.04, Atomic 0.01 and 0.02 (first steps 0.05, 0.07 and 0.03, 0.03). ``new``: with the
    issue 59 columns (else an older CSV's)."""
    rows = []
    for est, lows, moves, early in (
        ("mc", (0.01, 0.03), (0.02, 0.04), (0.05, 0.07)),
        ("atomic", (0.05, 0.07), (0.01, 0.02), (0.03, 0.03)),
    ):
        for div, low, move, first in zip(("tv", "kl"), lows, moves, early, strict=True):
            row = {"point": 2.2, "divergence": div, "estimator": est, "seed": 0, "base": 10.0,
                   "final": 12.0, "gain": 2.0, **{f"clip_high/{b}": 0.0 for b in BUCKETS},
                   "p_answer_0": 0.03, "p_answer_10": 0.045, "rise": 1.5}  # fmt: skip
            if new:
                row |= {f"clip_low/{b}": 0.0 for b in BUCKETS} | {"clip_low/mu_0.1_0.5": low}
                row |= {"abs_log_ratio": move, "abs_log_ratio_early": first}
            rows.append(row)
    return pd.DataFrame(rows)


def _ci_text(a: float, b: float, scale: float, digits: int) -> str:
    """Two values' mean and 95 % t interval (1 df), as the tables print them."""
    mean, half = (a + b) / 2, stats.t.ppf(0.975, 1) * abs(a - b) / 2
    return " ".join(
        [f"{scale * mean:.{digits}f}", f"[{scale * (mean - half):.{digits}f},",
         f"{scale * (mean + half):.{digits}f}]"]
    )  # fmt: skip


def _sections(runs: pd.DataFrame, tmp_path: Path) -> dict[str, list[str]]:
    """The script's output from ``runs`` as a CSV (``--runs``): section title -> its lines."""
    runs.to_csv(tmp_path / "runs.csv", index=False)
    argv = [str(ROOT / "configs" / "rare-learnable.yaml"), "--axis", "local.base_temperature"]
    argv += ["--out", str(tmp_path), "--runs", str(tmp_path / "runs.csv")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert SCRIPT.main(argv) == 0
    sections: dict[str, list[str]] = {}
    for part in out.getvalue().split("## ")[1:]:
        title, *body = part.splitlines()
        sections[title] = [ln for ln in body if ln.strip() and not ln.startswith("wrote ")]
    return sections


LOW = "Low-side clip fraction by μ bucket (%, divergences pooled)"
MOVES = "How far an update moves the policy: mean abs(log π − log μ) (divergences pooled)"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip("|").split("|")]


def test_the_low_side_and_abs_log_ratio_tables_print_their_numbers(tmp_path):
    sections = _sections(_hand_runs(), tmp_path)
    low, moves = sections[LOW], sections[MOVES]
    assert _cells(low[0]) == [
        "level", "estimator", "clip low, μ < 0.01 (%)", "clip low, μ 0.01-0.1 (%)",
        "clip low, μ 0.1-0.5 (%)", "clip low, μ ≥ 0.5 (%)", "runs",
    ]  # fmt: skip
    zero = "0.00 [0.00, 0.00]"
    mc = ["2.2", "mc", zero, zero, _ci_text(0.01, 0.03, 100, 2), zero, "2"]
    atomic = ["2.2", "atomic", zero, zero, _ci_text(0.05, 0.07, 100, 2), zero, "2"]
    assert [_cells(ln) for ln in low[2:]] == [mc, atomic]  # Table 1's order: MC first
    assert mc[4] == "2.00 [-10.71, 14.71]"
    assert _cells(moves[0]) == [
        "level",
        "estimator",
        "mean abs(log π − log μ), all steps",
        "steps 1-10",
        "runs",
    ]
    assert [_cells(ln) for ln in moves[2:]] == [
        ["2.2", "mc", _ci_text(0.02, 0.04, 1, 4), _ci_text(0.05, 0.07, 1, 4), "2"],
        ["2.2", "atomic", _ci_text(0.01, 0.02, 1, 4), "0.0300 [0.0300, 0.0300]", "2"],
    ]


def test_an_older_csv_says_the_new_tables_are_not_recorded(tmp_path):
    sections = _sections(_hand_runs(new=False), tmp_path)
    assert sections[LOW] == sections[MOVES] == ["not recorded in this CSV"]
    assert sections["Mechanism (divergences pooled)"][2].startswith("| 2.2 | mc |")


# --- issue 59's second study: two axes, a level per combination ---------------------------------

AXES = ("local.ppo_epochs", "local.base_temperature")
#: the levels in the axes' numeric order (ppo_epochs 10 last: not the labels' text order)
LEVELS = [f"ppo_epochs {e}, base_temperature {t}" for e in (1, 2, 10) for t in (1.0, 2.6)]


def _two_axis_store() -> tuple[list[RunRecord], _History]:
    """A run per ppo_epochs (1, 2, 10) x τ (1.0, 2.6) x TV, KL x MC, Atomic x seeds 0-1, recorded
    in no level order; final avg@8 (25 + 5 epochs + 10 τ + seed) %, Atomic 2 points above MC;
    every history logged (MC's clip fractions: epochs % + 0.2 at τ 2.6 + 0.1 × seed)."""
    records, hist = [], {}
    for t in (2.6, 1.0):
        for e in (10, 1, 2):
            for div in ("tv", "kl"):
                for est in ("mc", "atomic"):
                    for seed in (0, 1):
                        run_id = f"{e}-{t}-{div}-{est}-{seed}"
                        final = (25 + 5 * e + 10 * t + seed + 2 * (est == "atomic")) / 100
                        axes = {"local.ppo_epochs": e, "local.base_temperature": t}
                        records.append(_record(run_id, est, seed, axes, div, final))
                        clip = 0.01 * e + 0.002 * (t == 2.6) if est == "mc" else 0.2
                        hist[run_id] = {
                            **{M.clip_frac_bucket(b, side): [(1, clip + 0.001 * seed)]
                               for b in BUCKETS for side in ("high", "low")},
                            M.PROBE_P_ANSWER: [(0, 0.1), (10, 0.1 + 0.01 * (e + seed))],
                            M.ABS_LOG_RATIO: [(1, 0.01 * e + 0.001 * seed)],
                        }  # fmt: skip
    return records, _History(hist)


def test_a_two_axis_frame_has_a_column_per_axis_and_reads_its_levels(monkeypatch):
    """Columns ppo_epochs and base_temperature; ``point`` a label of both; the rows in the axes'
    numeric order as given (1, 2, 10 before τ; τ before ppo_epochs when given first)."""
    records, client = _two_axis_store()
    monkeypatch.setattr(C, "fetch_records", lambda *a, **k: records)
    frame = C.runs_frame(cast(MlflowClient, client), "sweep", list(AXES))
    assert list(frame.columns[:4]) == ["point", "ppo_epochs", "base_temperature", "divergence"]
    assert list(dict.fromkeys(frame["point"])) == LEVELS
    row = frame[frame["point"] == "ppo_epochs 10, base_temperature 2.6"].iloc[0]
    assert (row["ppo_epochs"], row["base_temperature"]) == (10, 2.6)
    assert row["final"] == pytest.approx(
        25 + 50 + 26 + row["seed"] + 2 * (row["estimator"] == "atomic")
    )
    swapped = C.runs_frame(cast(MlflowClient, client), "sweep", list(AXES)[::-1])
    assert list(dict.fromkeys(swapped["point"])) == [
        f"base_temperature {t}, ppo_epochs {e}" for t in (1.0, 2.6) for e in (1, 2, 10)
    ]
    with pytest.raises(ValueError, match="seed"):
        C.runs_frame(cast(MlflowClient, client), "sweep", ["local.ppo_epochs", "other.seed"])


def _report(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = SCRIPT.main(argv)
    return rc, out.getvalue()


def _two_axis_report(monkeypatch, tmp_path: Path) -> tuple[str, str, Path]:
    """The script's output from the store (the runs of :func:`_two_axis_store`, ``--axis`` twice)
    and from the CSV it wrote (``--runs``), and that CSV."""
    records, client = _two_axis_store()
    monkeypatch.setattr(C, "fetch_records", lambda *a, **k: records)
    monkeypatch.setattr(SCRIPT, "MlflowClient", lambda uri: client)
    plan = SimpleNamespace(sweep_id="s", spec=SimpleNamespace(tracking=SimpleNamespace(uri="u"),
                                                              experiment="e"))  # fmt: skip
    monkeypatch.setattr(SCRIPT, "load_plan", lambda path: plan)
    ref = SimpleNamespace(tracking_uri="u", sweep_id="s", experiment_id="1")
    monkeypatch.setattr(SCRIPT, "find_sweep", lambda *a, **k: ref)
    axes = [arg for axis in AXES for arg in ("--axis", axis)]
    rc, store = _report(["spec.yaml", *axes, "--out", str(tmp_path / "store")])
    assert rc == 0
    csv = tmp_path / "store" / "exploration-runs.csv"
    rc, again = _report(["spec.yaml", *axes, "--out", str(tmp_path / "csv"), "--runs", str(csv)])
    assert rc == 0
    return store, again, csv


def _without_wrote(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if not ln.startswith("wrote ")]


def test_a_two_axis_study_reports_from_its_csv_as_from_the_store(monkeypatch, tmp_path):
    store, again, csv = _two_axis_report(monkeypatch, tmp_path)
    assert _without_wrote(again) == _without_wrote(store)
    saved = pd.read_csv(csv)
    assert {"ppo_epochs", "base_temperature"} <= set(saved.columns)
    gain_rows = [_cells(ln) for ln in store.split("## ")[1].splitlines() if ln.startswith("| ")]
    assert list(dict.fromkeys(r[0] for r in gain_rows[2:])) == LEVELS
    contrasts = [_cells(ln)[:2] for ln in store.split("## ")[2].splitlines() if ln.startswith("| ")]
    assert [r[0] for r in contrasts[2:]] == LEVELS  # atomic - mc at each level
    assert (tmp_path / "csv" / "exploration-dose-response.png").stat().st_size > 0
    # one --axis for a CSV of two: it says so instead of printing wrong tables
    rc, _ = _report(["spec.yaml", "--out", str(tmp_path / "x"), "--runs", str(csv)])
    assert rc == 2


CHECK = "Manipulation check (MC's runs, divergences pooled, mean [95% t CI])"


def test_the_manipulation_check_names_the_strongest_passing_level(monkeypatch, tmp_path):
    """MC clips about ``epochs`` % at μ 0.1-0.5 and gains at every level: with the 3 % rule the
    ppo_epochs 10 levels pass (2 % does not), the strongest the one that clips more (τ 2.6, the
    last row); with 20 % none passes."""
    store, _again, csv = _two_axis_report(monkeypatch, tmp_path)
    sections = {part.splitlines()[0]: part.splitlines()[1:] for part in store.split("## ")[1:]}
    lines = [ln for ln in sections[CHECK] if ln.strip()]
    assert _cells(lines[0]) == [
        "level", "MC runs", "clip high, μ 0.1-0.5 (%)", "gain over the base (points)", "passes",
    ]  # fmt: skip
    rows = [_cells(ln) for ln in lines[2:-1]]
    passes = {r[0]: r[-1] for r in rows}
    assert passes == {
        level: "yes" if level.startswith("ppo_epochs 10,") else "no" for level in LEVELS
    }
    assert list(passes) == LEVELS
    clips = [1.0, 1.1, 1.0, 1.1]  # ppo_epochs 1, τ 1.0: MC's 4 runs (%)
    lo, hi = stats.t.interval(0.95, 3, loc=1.05, scale=stats.sem(clips))
    assert rows[0][1:3] == ["4", f"1.05 [{lo:.2f}, {hi:.2f}]"]
    assert lines[-1] == (
        "Strongest passing level (clip ≥ 3 % and the gain's CI above 0): "
        "ppo_epochs 10, base_temperature 2.6 (clip 10.25 %)."
    )
    argv = ["spec.yaml", "--out", str(tmp_path / "x"), "--runs", str(csv), "--check-clip", "20"]
    rc, text = _report([*argv, *[arg for axis in AXES for arg in ("--axis", axis)]])
    assert rc == 0
    assert "No level passes (clip ≥ 20 % and the gain's CI above 0)." in text


class _HistoryAndParams(_History):
    """:class:`_History` that also answers ``get_run(run_id).data.params``."""

    def __init__(self, runs, params: dict[str, dict[str, str]]) -> None:
        super().__init__(runs)
        self.params = params

    def get_run(self, run_id: str) -> SimpleNamespace:
        return SimpleNamespace(data=SimpleNamespace(params=self.params.get(run_id, {})))


def test_a_run_without_the_axes_tag_takes_its_level_from_its_settings(monkeypatch):
    """A sweep that fixes the level in its spec (the study's Binary at one level) has no axes tag:
    its level is the setting it logged (``local.ppo_epochs`` 4), and a neutral setting a cell
    leaves out (``base_temperature``) is its neutral 1.0, so its runs join the study's level."""
    binary = _record("b", "binary", 0, div="kl")
    binary.tags.pop(M.TAG_AXES)
    tagged = _record("a", "atomic", 0, {"local.ppo_epochs": 4, "local.base_temperature": 1.0})
    monkeypatch.setattr(C, "fetch_records", lambda *a, **k: [binary, tagged])
    client = _HistoryAndParams({"a": {}, "b": {}}, {"b": {"local.ppo_epochs": "4"}})
    frame = C.runs_frame(cast(MlflowClient, client), "sweep", list(AXES))
    assert set(frame["point"]) == {"ppo_epochs 4, base_temperature 1.0"}
    by = frame.set_index("estimator")
    assert by.at["binary", "ppo_epochs"] == 4 and by.at["binary", "base_temperature"] == 1.0
    # without the setting logged, the script's --level stands in (a one-level sweep)
    client.params = {}
    assert C.runs_frame(cast(MlflowClient, client), "s", "local.ppo_epochs", point=8.0)[
        "point"
    ].tolist() == [4, 8.0]


def test_two_specs_report_their_runs_together(monkeypatch, tmp_path):
    """``exploration_report.py A.yaml B.yaml``: each spec's sweep is read and the runs are
    reported as one study (B's runs at one of A's levels), in the frame's order."""
    records, client = _two_axis_store()
    level = {"local.ppo_epochs": 2, "local.base_temperature": 1.0}
    extra = [
        _record(f"x{div}{seed}", "binary", seed, level, div, final=0.5 + 0.01 * seed)
        for div in ("tv", "kl")
        for seed in (0, 1, 2)
    ]
    sweeps = {"a": records, "b": extra}
    client.runs.update({run.run_id: {} for run in extra})
    monkeypatch.setattr(C, "fetch_records", lambda c, sweep_id, **k: sweeps[sweep_id])
    monkeypatch.setattr(SCRIPT, "MlflowClient", lambda uri: client)
    spec = SimpleNamespace(tracking=SimpleNamespace(uri="u"), experiment="e")
    monkeypatch.setattr(SCRIPT, "load_plan", lambda p: SimpleNamespace(sweep_id=p.stem, spec=spec))
    monkeypatch.setattr(
        SCRIPT, "find_sweep",
        lambda sweep_id, *a, **k: SimpleNamespace(tracking_uri="u", sweep_id=sweep_id,
                                                  experiment_id="1"),
    )  # fmt: skip
    axes = [arg for axis in AXES for arg in ("--axis", axis)]
    rc, out = _report(["a.yaml", "b.yaml", *axes, "--out", str(tmp_path)])
    assert rc == 0
    saved = pd.read_csv(tmp_path / "exploration-runs.csv")
    assert len(saved) == len(records) + len(extra)
    assert list(dict.fromkeys(saved["point"])) == LEVELS  # still in the levels' order
    contrasts = [_cells(ln) for ln in out.split("## ")[2].splitlines() if ln.startswith("| ")]
    assert [r[:2] for r in contrasts if r[1].startswith("binary")] == [
        ["ppo_epochs 2, base_temperature 1.0", "binary - mc"]
    ]


def test_the_updates_per_batch_page_holds_the_scripts_tables(tmp_path):
    """Issue 59 items 3-5: every table row the script prints from the study's data file (both
    sweeps, two axes) is on the page, so the page's tables are recomputed from the data file."""
    configs = ROOT / "configs"
    argv = [str(configs / "updates-per-batch.yaml"), str(configs / "updates-per-batch-binary.yaml")]
    argv += ["--axis", "local.ppo_epochs", "--axis", "local.base_temperature"]
    argv += ["--out", str(tmp_path), "--runs", str(ROOT / "docs/data/updates-per-batch-runs.csv")]
    rc, out = _report(argv)
    assert rc == 0
    rows = [ln for ln in out.splitlines() if ln.startswith("| ")]
    assert len(rows) > 60  # seven tables of six or seven levels
    page = (ROOT / "docs" / "studies" / "updates-per-batch.md").read_text()
    assert [r for r in rows if r not in page] == []
