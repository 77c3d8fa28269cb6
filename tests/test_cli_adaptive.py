"""``plan`` of a spec with adaptive seeds (issue 48): its range of runs and forecast, and every
malformed form refused in one line naming the file and the field, exit 2, nothing written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gppo.cli import app

QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"


def quickstart_with(tmp_path: Path, seeds: str, extra: str = "") -> Path:
    """The quick start's spec with ``seeds: <seeds>`` (and ``extra`` lines), its store here."""
    text = QUICKSTART.read_text().replace("seeds: 3\n", f"seeds: {seeds}\n{extra}")
    path = tmp_path / "grid.yaml"
    path.write_text(text + f'tracking: {{uri: "sqlite:///{tmp_path}/mlflow.db"}}\n')
    return path


def test_plan_states_the_range_of_runs_and_the_forecast_range(tmp_path, timed_preflight):
    spec = quickstart_with(tmp_path, "{min: 2, max: 6}")
    result = CliRunner().invoke(app, ["plan", str(spec)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    # 17 rows, chi2/mc on tv/mc's runs: 16 runs a seed; 2 seeds each at least, 6 at most
    assert "adaptive seeds: 2 to 6 a cell" in out and ": 32 to 96 runs" in out
    assert "17 cells x 1 point x 2-6 seeds" in out
    m = re.search(r"forecast range: ([\d.]+) CPU-h.*\(32 runs.* to ([\d.]+) CPU-h.*\(96 runs", out)
    assert m, out[-800:]
    low, high = map(float, m.groups())
    assert high == pytest.approx(3 * low, rel=0.02)  # same cells' runs: 3 x the runs, 3 x the hours
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize(
    ("seeds", "extra", "says"),
    [
        ("{min: 5, max: 3}", "", "seeds: max must be at least min=5 (got 3)"),
        ("{min: 1, max: 3}", "", "seeds: min must be at least 2"),
        ("{min: 2, max: 20000}", "", "seeds: max must be at most 10000 (got 20000)"),
        ("{min: 2, max: 4, equivalence: 0}", "", "seeds: equivalence must be a margin in points > 0"),
        ("{min: 2, max: 4, equivalence: -1.5}", "", "equivalence must be a margin in points > 0"),
        ("{min: 2, max: 4, batch: 0}", "", "seeds: batch must be at least 1"),
        ("{min: 2, max: 4, first: -1}", "", "seeds: first must be >= 0 (got -1)"),
        ("{min: 2, max: 4, maximum: 9}", "", "seeds: unknown key 'maximum'; allowed: min, max"),
        ("{min: 2, max: 4}", "axes: {local.lr: [1e-4, 3e-4]}\nselect: [local.lr]\n",
         "select: is not allowed with adaptive seeds"),
    ],
)  # fmt: skip
def test_malformed_adaptive_seeds_refused_in_one_line(tmp_path, seeds, extra, says):
    spec = quickstart_with(tmp_path, seeds, extra)
    result = CliRunner().invoke(app, ["plan", str(spec)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"{spec}:"), result.output
    assert says in lines[0], lines[0]
    assert not (tmp_path / "mlflow.db").exists()
