"""Table 1's test and correction are chosen by the spec's ``analysis:`` and by
``report --analysis`` (issue 58): Welch's test by default, the pooled test by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from typer.testing import CliRunner

from gppo.analysis.report_writer import parse_analysis
from gppo.cli.report import report
from gppo.grid.schema import GridSpec

app = typer.Typer()
app.command()(report)


def _scores(path: Path) -> dict[str, np.ndarray]:
    """Two benchmarks, 3 seeds: the reference noisy (sd 6), the rows quiet (sd 0.5); per-seed
    averages returned by cell."""
    rng = np.random.default_rng(5)
    rows, avgs = [], {}
    for cell, sd, shift in (("tv/mc", 6.0, 0.0), ("kl/mc", 0.5, 6.0), ("tv/atomic", 0.5, 0.0)):
        seeds = 30 + shift + rng.normal(0, sd, 3)
        avgs[cell] = seeds
        for seed, value in enumerate(seeds):
            for bench in ("A", "B"):
                rows.append(("math", cell, bench, seed, round(float(value) / 100, 6)))
    pd.DataFrame(rows, columns=["domain", "cell", "benchmark", "seed", "score"]).to_csv(
        path, index=False
    )
    return {c: np.round(v / 100, 6) * 100 for c, v in avgs.items()}


def test_the_spec_chooses_the_test_and_the_correction() -> None:
    assert GridSpec(name="x").analysis.test == "welch"
    assert GridSpec(name="x").analysis.correction == "bh"
    spec = GridSpec(name="x", analysis={"test": "pooled", "correction": "holm"})
    assert (spec.analysis.test, spec.analysis.correction) == ("pooled", "holm")
    with pytest.raises(ValueError, match=r"analysis\.test"):
        GridSpec(name="x", analysis={"test": "anova"})
    with pytest.raises(ValueError, match="extra"):
        GridSpec(name="x", analysis={"alpha": 0.1})


def test_parse_analysis_names_either_or_both() -> None:
    assert parse_analysis(None) == (None, None)
    assert parse_analysis("pooled") == ("pooled", None)
    assert parse_analysis("holm") == (None, "holm")
    assert parse_analysis(" Welch , BH ") == ("welch", "bh")
    with pytest.raises(ValueError, match="'dunnett' is not a test"):
        parse_analysis("dunnett")
    with pytest.raises(ValueError, match="given twice"):
        parse_analysis("welch,pooled")


@pytest.mark.parametrize("option", [None, "pooled,holm"])
def test_report_from_csv_uses_the_test_named(tmp_path: Path, option: str | None) -> None:
    """The p-value in table1.csv is Welch's by default and the pooled test's when named."""
    avgs = _scores(tmp_path / "s.csv")
    args = ["--from-csv", str(tmp_path / "s.csv"), "-o", str(tmp_path / "o"), "--no-figures"]
    res = CliRunner().invoke(
        app, [*args, "--format", "csv", *(["--analysis", option] * bool(option))]
    )
    assert res.exit_code == 0, res.output
    table = pd.read_csv(tmp_path / "o" / "table1.csv").set_index("cell")
    x, y = avgs["kl/mc"], avgs["tv/mc"]
    if option is None:
        expected = stats.ttest_ind(x, y, equal_var=False).pvalue
    else:
        pool = [avgs[c] for c in ("tv/mc", "kl/mc", "tv/atomic")]
        s2 = sum(((g - g.mean()) ** 2).sum() for g in pool) / 6
        t = (x.mean() - y.mean()) / np.sqrt(s2 * 2 / 3)
        expected = 2 * stats.t.sf(abs(t), 6)
    assert table.loc["kl/mc", "p_value"] == pytest.approx(expected, rel=1e-4)


def test_report_refuses_an_unknown_analysis(tmp_path: Path) -> None:
    _scores(tmp_path / "s.csv")
    res = CliRunner().invoke(
        app, ["--from-csv", str(tmp_path / "s.csv"), "--no-figures", "--analysis", "anova"]
    )
    assert res.exit_code == 2
    assert "'anova' is not a test" in res.output


values = st.lists(st.floats(0.05, 0.95, allow_nan=False), min_size=2, max_size=6)


@settings(max_examples=30, deadline=None)
@given(values, st.lists(values, min_size=1, max_size=4), st.sampled_from(["bh", "holm"]))
def test_welch_p_values_and_one_family_per_table(ref, rows, correction):
    """Welch's test (the default) is scipy's on each row's per-seed averages against the
    reference's, whatever the other rows hold; the mark is the correction over the rows
    compared, each once (a row on the reference's own runs is none)."""
    from gppo.analysis.data.tidy import normalise
    from gppo.analysis.tables.table1 import build_table1
    from gppo.stats import inference as S

    cells = {"tv/mc": ref, **{f"kl/r{i}": r for i, r in enumerate(rows)}, "chi2/mc": ref}
    frame = pd.DataFrame(
        [
            ("math", cell, "b", seed, v, f"run-{'tv/mc' if cell == 'chi2/mc' else cell}-{seed}")
            for cell, vs in cells.items()
            for seed, v in enumerate(vs)
        ],
        columns=["domain", "cell", "benchmark", "seed", "score", "run_id"],
    )
    table = build_table1(normalise(frame), correction=correction)
    got = {r.cell: r for r in table.blocks[0].rows}
    tested = []
    for i, r in enumerate(rows):
        row = got[f"kl/r{i}"]
        x, y = np.asarray(r) * 100, np.asarray(ref) * 100
        if np.ptp(x) == 0 and np.ptp(y) == 0:
            assert row.p_value is None
            continue
        p = stats.ttest_ind(row.seed_avgs, got["tv/mc"].seed_avgs, equal_var=False).pvalue
        assert row.p_value == pytest.approx(p if np.isfinite(p) else 1.0, rel=1e-9, abs=1e-12)
        tested.append(row)
    assert got["chi2/mc"].p_adjusted is None or got["chi2/mc"].same_runs == "tv/mc"
    distinct = list({tuple(r.seed_avgs): r for r in tested}.values())
    expected = dict(
        zip(
            [tuple(r.seed_avgs) for r in distinct],
            S.adjust([r.p_value for r in distinct], correction),
            strict=True,
        )
    )
    for row in tested:
        assert row.p_adjusted == pytest.approx(expected[tuple(row.seed_avgs)])
