"""The report page: one self-contained HTML file, read back with a real HTML parser."""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser

import pytest
import yaml

from gppo import metrics as M
from gppo.analysis.page.report_page import run_link, spec_as_run
from gppo.analysis.report_writer import write_report
from gppo.grid import load_plan

BENCH = {"b1": 0.30, "b2": 0.50}
BASE = {"b1": 0.10, "b2": 0.20}
CURVES = {
    M.TRAIN_SCORE: [0.1, 0.2, 0.3, 0.35],
    M.ENTROPY: [1.0, 0.8, 0.7, 0.65],
    M.clip_frac_bucket("mu_lt_0.01"): [0.1, 0.1, 0.2, 0.2],
    M.clip_frac_bucket("mu_ge_0.5"): [0.01, 0.02, 0.01, 0.0],
}


class Page(HTMLParser):
    """Collects what the tests look at: images, cell rows, external references, the spec."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[dict[str, str]] = []
        self.cell_rows: list[str] = []
        self.external: list[str] = []
        self.links: list[str] = []
        self.ids: set[str] = set()
        self.tables = 0
        self._in_spec = False
        self.spec = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "img":
            self.images.append(a)
        if tag == "table":
            self.tables += 1
        if tag == "tr" and "cell" in (a.get("class") or "").split():
            self.cell_rows.append(a["data-cell"])
        if tag in ("script", "link", "iframe") or (tag == "img" and "://" in a.get("src", "")):
            self.external.append(f"{tag} {a}")
        if tag == "a" and a.get("href", "").startswith("http"):
            self.links.append(a["href"])
        if tag == "pre" and a.get("id") == "spec":
            self._in_spec = True

    def handle_endtag(self, tag):
        if tag == "pre":
            self._in_spec = False

    def handle_data(self, data):
        if self._in_spec:
            self.spec += data


def parse(path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


@pytest.mark.slow
def test_page_is_self_contained_with_figures_and_one_row_per_cell(store, tmp_path):
    cells = {
        store.cell("gppo", "tv", "mc", scores=BENCH, base=BASE, curves=CURVES): "tv-mc-s0",
        store.cell("gppo", "kl", "atomic", scores=BENCH, curves=CURVES): "kl-atomic-s0",
        store.cell("gspo", None, None, scores={"b1": 0.2, "b2": 0.4}, curves=CURVES): "gspo-s0",
        store.cell("gppo", "kl", "binary", status="FAILED", finished=False): "kl-binary-s0",
    }
    spec_file = tmp_path / "grid.yaml"
    spec_file.write_text(
        "name: demo\nseeds: 1\nbackend: local\ngrid: {divergences: [tv, kl]}\n"
        f"baselines: [gspo]\ntracking: {{uri: '{store.uri}'}}\n"
    )
    plan = load_plan(spec_file)
    spec = spec_as_run(plan.spec)
    out = tmp_path / "report"
    report = write_report(store.ref, out, formats="html", plan=plan)

    assert report.page == out / "report.html" and report.page in report.files
    page = parse(report.page)
    # Figures 1, 2 and the clip-by-μ figure, each an embedded PNG that decodes as one
    assert {"figure1_regions", "figure2_dynamics", "figure2_clip_by_mu"} <= page.ids
    assert len(page.images) >= 3
    for img in page.images:
        prefix = "data:image/png;base64,"
        assert img["src"].startswith(prefix)
        assert base64.b64decode(img["src"][len(prefix) :])[:8] == b"\x89PNG\r\n\x1a\n"
    assert page.external == []  # opens offline: nothing to fetch
    assert sorted(page.cell_rows) == sorted(cells.values())  # one row per cell, failed included
    assert page.tables >= 2  # Table 1 and the cells
    assert yaml.safe_load(page.spec) == spec
    text = report.page.read_text()
    assert "Table 1" in text and "GSPO" in text and "git commit" in text and "mlflow" in text
    assert page.links == []  # a SQLite store: run ids, no links
    # the cell's avg@8 as Table 1 computes it: mean of 30.0 and 50.0
    row = re.search(r'data-cell="tv-mc-s0">(.*?)</tr>', text).group(1)
    assert "<td>40.0</td>" in row and "done" in row
    # attached to the sweep's parent run with the rest of the report
    listed = {a.path for a in store.client.list_artifacts(store.parent, "report")}
    assert "report/report.html" in listed


def test_run_links_only_for_an_http_server():
    assert run_link("sqlite:///x/mlflow.db", "3", "abc") is None
    assert run_link("file:///x/mlruns", "3", "abc") is None
    url = run_link("http://mlflow.example:5000/", "3", "abc")
    assert url is not None and url.startswith("http://mlflow.example:5000/#/experiments/3/runs/abc")


def test_run_list_shows_each_axis_points_own_run(store):
    """Issue 57, item 1: a sweep over ``local.warmstart_target: [0.25, 0.1]`` (tv/mc, one seed):
    the page's list of runs shows each run's own avg@k (29.1 and 12.6), not their mean (20.8)
    for both; an identical cell's run and a cell without a score keep theirs."""
    from gppo.analysis.data.collect import collect
    from gppo.analysis.page.report_page import PageInput, cell_rows
    from gppo.analysis.tables.table1 import build_table1

    wt = "local.warmstart_target"
    own = {0.25: {"b1": 0.291, "b2": 0.291}, 0.1: {"b1": 0.120, "b2": 0.132}}
    for value, scores in own.items():
        store.cell("gppo", "tv", "mc", axes={wt: value}, base=BASE, scores=scores)
        store.cell("gppo", "kl", "mc", axes={wt: value}, status="FAILED", finished=False)
    got = collect(store.ref, k=8)
    page = PageInput(store.sweep_id, build_table1(got.tidy), runs=got.runs, tidy=got.tidy)
    rows, _ = cell_rows(page)
    shown = {r["cell_id"]: r["avg"] for r in rows}
    assert shown == {
        "tv-mc_warmstart_target0.25-s0": "29.1",
        "tv-mc_warmstart_target0.1-s0": "12.6",
        "kl-mc_warmstart_target0.25-s0": "-",
        "kl-mc_warmstart_target0.1-s0": "-",
    }, shown
