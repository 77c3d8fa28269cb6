"""scripts/exploration_report.py (issue 57, item 8): every table's header comes from the same
order as its cells, and the study pages' gain tables are what the script prints from their
per-run data (rare-learnable's had Atomic's numbers under Binary and Binary's under Atomic)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import pandas as pd
import pytest

from gppo.analysis.vocabulary import EST_NAMES

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
