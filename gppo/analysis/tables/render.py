"""Table 1 renderers: Markdown (tabulate), LaTeX and HTML (pandas Styler + jinja2), CSV, rich.

Every renderer reads the same :class:`~gppo.analysis.tables.table1.Table1`, so the numbers, ranks,
statistics and footnotes agree across formats. Highlights: rank 1 / 2 / 3 = bold / underline /
italic (LaTeX ``\\textbf`` / ``\\underline`` / ``\\textit``; HTML shaded cells, darkest for the
best), only where the table's highlight rule keeps them. Several seeds add the columns Δ (points,
95% CI, ``†`` where significant after the correction), P(>ref) and Seeds.
"""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING

import jinja2
import pandas as pd
from tabulate import tabulate

from gppo.analysis.tables.cost_column import RowCost, TableCost
from gppo.analysis.tables.table1_model import AVG, NO_SPREAD, SAME_RUNS, Block, Entry, Row, Table1
from gppo.analysis.vocabulary import (
    BASE_MODEL,
    BASELINE_NAMES,
    DIV_NAMES,
    EST_NAMES,
    KNOWN_METHODS,
    OTHER_BASELINES,
)
from gppo.stats.inference import CORRECTIONS, TESTS

if TYPE_CHECKING:
    from rich.console import Console

FORMATS = ("md", "latex", "html", "csv")
EXTENSIONS = {"md": "md", "latex": "tex", "html": "html", "csv": "csv"}
HTML_SHADES = {
    1: "background-color: #74c476; font-weight: bold;",
    2: "background-color: #a1d99b; text-decoration: underline;",
    3: "background-color: #e5f5e0; font-style: italic;",
}
LATEX_STYLES = {1: "textbf: --rwrap;", 2: "underline: --rwrap;", 3: "textit: --rwrap;"}


def divergence_name(div: str) -> str:
    """Display name, the divergence registry's: ``chi2`` -> ``χ²``, ``alpha:0.5`` -> ``α=0.5``
    (LaTeX via latex_escape); a name no registry knows as it is."""
    if div in DIV_NAMES:
        return DIV_NAMES[div]
    from gppo.objectives.divergences import display_name

    return display_name(div)


def row_names(row: Row) -> tuple[str, str]:
    """(group, label) as printed: ("TV", "MC (GRPO)"), ("Other baselines", "GSPO"), ("Base model", "")."""
    if row.kind == "grid":
        div, est = row.cell.split("/", 1)
        label = EST_NAMES.get(est, est)
        if row.cell in KNOWN_METHODS:
            label += f" ({KNOWN_METHODS[row.cell]})"
        return divergence_name(div), label
    if row.kind == "baseline":
        return OTHER_BASELINES, BASELINE_NAMES.get(row.cell, row.cell)
    return BASE_MODEL, ""


SIG_MARK = "†"


def rel_text(row: Row) -> str:
    if row.rel_pct is None:
        return "—"
    return f"{'+' if row.rel_pct >= 0 else ''}{row.rel_pct}%"


def delta_text(row: Row) -> str:
    """``+5.6 [3.1, 8.0]†``: Avg - Avg_ref in points, its CI, the significance mark."""
    d = row.delta
    if d.mean is None:
        return "—"
    sign = "+" if d.mean >= 0 else ""
    text = f"{sign}{d.mean}" + (f" [{d.lo}, {d.hi}]" if d.lo is not None else "")
    return text + (SIG_MARK if row.significant else "")


def pi_text(row: Row) -> str:
    return "—" if row.p_improve is None else f"{row.p_improve:.2f}"


def _sup(mark: str, fmt: str) -> str:
    if not mark:
        return ""
    return {"latex": f"\\textsuperscript{{{mark}}}", "html": f"<sup>{mark}</sup>"}.get(
        fmt, f"^{mark}"
    )


#: adaptive seeds: the column that says why each row stopped, and the reference's entry there
STOPPED = "Stopped"
REFERENCE_STOP = "reference"


def stop_text(table: Table1, row: Row) -> str:
    """The Stopped entry (adaptive seeds): the row's stop (``separated at 4 seeds``),
    ``reference`` for the reference (it runs as long as a row compared with it needs), else —."""
    if row.stop is not None:
        return row.stop.text()
    return REFERENCE_STOP if row.cell == table.reference else "—"


def columns(table: Table1, block: Block) -> list[str]:
    cols = ["Divergence", "Estimator", *block.benchmarks, "Avg."]
    cost = [table.cost.header()] if table.cost else []
    stopped = [STOPPED] if table.adaptive else []
    if not table.multi_seed:
        return [*cols, f"Δ vs {block.reference}", *stopped, *cost]
    return [
        *cols, f"Δ vs {block.reference} (pts)", f"P(> {block.reference})", "Seeds", *stopped,
        *cost,
    ]  # fmt: skip


def frames(table: Table1, block: Block, fmt: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(text, rank) frames of one block; the rank frame is 0 where nothing is highlighted."""
    esc = latex_escape if fmt == "latex" else str
    texts, ranks = [], []
    for row in block.rows:
        group, label = row_names(row)
        group, label = esc(group), esc(label)
        if row.reasons and row.n_seeds:  # partial: some seeds without a result
            label += "".join(_sup(table.mark(r), fmt) for r in row.reasons)
        if row.same_runs:  # an identical cell's runs
            label += _sup(table.mark(SAME_RUNS), fmt)
        cells: list[Entry] = [row.entries[b] for b in block.benchmarks] + [row.entries[AVG]]
        values = [
            esc(e.text()) + ("" if e.mean is not None else _sup(table.mark(e.reason), fmt))
            for e in cells
        ]
        rank = [0, 0, *[e.rank or 0 for e in cells], 0]
        if table.multi_seed:
            delta = esc(delta_text(row)) + (
                _sup(table.mark(NO_SPREAD), fmt) if row.no_spread else ""
            )
            text = [group, label, *values, delta, pi_text(row), str(row.n_seeds)]
            rank += [0, 0]
        else:
            text = [group, label, *values, esc(rel_text(row))]
        if table.adaptive:
            text.append(esc(stop_text(table, row)))
            rank.append(0)
        if table.cost:
            text.append(esc(table.cost.text(block.domain, row.cell)))
            rank.append(0)
        texts.append(text)
        ranks.append(rank)
    cols = columns(table, block)
    return pd.DataFrame(texts, columns=cols), pd.DataFrame(ranks, columns=cols)


def _compared(table: Table1) -> str:
    """The † note's family (:func:`gppo.analysis.tables.table1.comparison_family`): per domain (and
    axis point), the trained rows compared with the reference, each comparison once."""
    counts = [
        (b.domain, len({id(r) for r in b.rows if r.p_value is not None and r.kind != "base"}))
        for b in table.blocks
    ]
    where = f" {table.family}" if table.family else ""
    rule = (
        " (one family per domain and axis point, each comparison counted once: a row that shows"
        " the same runs as another counts once, one that shows the reference's runs not at all;"
        " the base model's row is tested on its own)"
    )
    if len(counts) == 1:
        return f"the {counts[0][1]} rows compared with {table.reference}{where}{rule}"
    per = ", ".join(f"{d}: {n}" for d, n in counts)
    return f"the rows compared with {table.reference} in each domain{where} ({per}){rule}"


def _highlight_note(table: Table1, fmt: str) -> str | None:
    style = "bold, underlined, italic" if fmt != "html" else "shaded, darkest first"
    if table.highlight == "ranks":
        return f"Best, second and third of each column by mean: {style}."
    if table.highlight == "separated" and table.multi_seed:
        return (
            f"Ranks 1, 2, 3 of a column by mean ({style}) are highlighted only where the data"
            " separate them: entries whose 95% CIs do not separate them share a rank (as ties"
            " do), and an entry is highlighted only if its CI and those ranked above it lie"
            " above the CIs of every entry below it; the base model is not ranked."
        )
    return None


def _p_improve_note(ref: str) -> str:
    return (
        f" P(> {ref}): probability of improvement, the Mann-Whitney U over all seed pairs"
        " / (n·m), ties counting ½, averaged over benchmarks (Agarwal et al., 2021)."
    )


def _adaptive_notes(ref: str, test: str) -> list[str]:
    """The notes on Δ and the mark of a table of adaptive seeds (the rule of
    :mod:`gppo.stats.sequential`)."""
    return [
        f"Δ vs {ref}: Avg. minus {ref}'s Avg. in points at the row's last look of the adaptive"
        f" seeds rule [its interval valid under the design, see the note below];"
        + _p_improve_note(ref),
        f"{SIG_MARK}: the adaptive seeds rule separated the row from {ref} (a group-sequential"
        + (
            " t-test per row on the variance pooled over the table's rows, corrected over them);"
            if test == "pooled"
            else " Welch t-test per row, each side's own variance, corrected over them);"
        )
        + " Stopped: the row's seeds and why it stopped (separated, equivalent within the margin,"
        " not separable within max, futile, left by the budget, or open: its round not"
        " finished). The fixed-n tests are not shown: repeated looks invalidate them.",
    ]


def notes(table: Table1, fmt: str = "md", *, general: bool = True, own: bool = True) -> list[str]:
    """Table 1's notes: the ``general`` ones (how to read it: scores, ranks, Δ, the mark; the
    same for every table of one report) and its ``own`` (no reference row, the footnotes, the
    cost)."""
    k = f"avg@{table.k}" if table.k else "avg@k"
    ref, conf = table.reference, f"{table.confidence:.0%}"
    if not table.multi_seed:
        out = [
            f"Scores are {k} in percent; Avg. is the mean over benchmarks; Δ is the relative change"
            f" of Avg. against {ref}.",
            "One seed per cell: no uncertainty can be given (no intervals, no significance marks"
            + (")." if table.highlight == "ranks" else ", no highlighting)."),
        ]
    else:
        out = [
            f"Scores are {k} in percent: mean [{conf} CI] over the seeds in column Seeds"
            " (Student t interval); Avg. is the mean of the per-seed averages over benchmarks of"
            " the seeds with every benchmark (a footnote names any other), its CI the t interval"
            " of those averages: a seed is one run scored on every benchmark, so the run is the"
            " unit.",
            f"Δ vs {ref}: Avg. minus {ref}'s Avg. in points [{conf} t CI on the test's variance,"
            " so it excludes 0 where the test before correction rejects];" + _p_improve_note(ref),
            f"{SIG_MARK}: the row's per-seed Avg. differs from {ref}'s at α = {table.alpha:g}"
            f" ({TESTS[table.test]}, {CORRECTIONS[table.correction]} correction over"
            f" {_compared(table)}); rows with fewer than 2 seeds, or with no spread between seeds"
            " (identical seeds are not replicates), are not tested."
            + (
                " Pooling assumes equal seed variances across cells."
                if table.test == "pooled"
                else ""
            )
            + " The corrected test, not the CI of Δ, decides the mark.",
        ]
        if table.adaptive:  # Δ, its interval and the mark are the adaptive design's
            out[1:] = _adaptive_notes(ref, table.test)
    rule = _highlight_note(table, fmt)
    if rule:
        out.insert(1, rule)
    out = out if general else []
    if not own:
        return out
    lacking = ", ".join(b.domain for b in table.blocks if all(r.cell != ref for r in b.rows))
    if lacking:
        out.append(f"No row {ref} in {lacking}: no Δ, P(>) or marks there (see --reference).")
    out += [f"({f.mark}) {f.text}" for f in table.footnotes]
    if table.adaptive:
        out.append(table.adaptive)
    if table.cost:
        out.append(table.cost.note())
    return out


def _md_cell(text: str, rank: int) -> str:
    if not rank:
        return text
    return {1: f"**{text}**", 2: f"<u>{text}</u>", 3: f"*{text}*"}[rank]


def to_markdown(table: Table1) -> str:
    parts = []
    for block in table.blocks:
        text, rank = frames(table, block, "md")
        shown = text.copy()
        for col in shown.columns:
            shown[col] = [_md_cell(t, r) for t, r in zip(text[col], rank[col], strict=True)]
        shown["Divergence"] = shown["Divergence"].where(~shown["Divergence"].duplicated(), "")
        parts.append(
            f"### {block.domain}\n\n"
            + tabulate(
                shown,  # type: ignore[arg-type]  # tabulate reads a DataFrame; its stubs omit it
                headers="keys",
                tablefmt="pipe",
                showindex=False,
                disable_numparse=True,
            )
        )
    parts.append("\n".join(f"- {n}" for n in notes(table, "md")))
    return "\n\n".join(parts) + "\n"


LATEX_SUBS = {
    "\\": r"\textbackslash{}",
    "%": r"\%",
    "_": r"\_",
    "&": r"\&",
    "#": r"\#",
    "$": r"\$",
    "{": r"\{",
    "}": r"\}",
    "^": r"\^{}",
    "~": r"\~{}",
    "—": "---",
    "Δ": r"$\Delta$",
    "±": r"$\pm$",
    "χ²": r"$\chi^2$",
    "α": r"$\alpha$",
    "†": r"$^\dagger$",
    "½": r"$\frac{1}{2}$",
    "·": r"$\cdot$",
}
_LATEX_RE = re.compile("|".join(re.escape(k) for k in sorted(LATEX_SUBS, key=len, reverse=True)))


def latex_escape(text: str) -> str:
    """Plain text -> LaTeX (one pass, so replacements are never escaped twice)."""
    return _LATEX_RE.sub(lambda m: LATEX_SUBS[m.group(0)], text)


_LATEX = jinja2.Template(
    r"""% generated by gppo-sweep report; needs \usepackage{booktabs,multirow}
\begin{table}[t]
\centering
\caption{ {{- caption -}} }
{% for b in blocks %}
\textbf{ {{- b.title -}} }\par\smallskip
{{ b.tabular }}
{% endfor %}
\begin{flushleft}\footnotesize
{% for n in notes %}{{ n }}\\
{% endfor %}\end{flushleft}
\end{table}
"""
)


def _latex_block(table: Table1, block: Block) -> str:
    text, rank = frames(table, block, "latex")
    value_cols = list(text.columns[2:])
    text.columns = [*text.columns[:2], *[latex_escape(c) for c in value_cols]]
    rank.columns = text.columns
    indexed = text.set_index(["Divergence", "Estimator"])
    ranks = rank.set_index(text.set_index(["Divergence", "Estimator"]).index).drop(
        columns=["Divergence", "Estimator"]
    )
    styler = indexed.style.apply(lambda _: ranks.map(lambda r: LATEX_STYLES.get(r, "")), axis=None)
    styler.index.names = ["Divergence", "Estimator"]
    latex = styler.to_latex(
        hrules=True,
        column_format="ll" + "r" * len(value_cols),
        multirow_align="c",
        clines="skip-last;data",
        sparse_index=True,
    ).strip()
    # one header line "Divergence & Estimator & …" and booktabs rules between groups
    lines = [ln for ln in latex.splitlines() if not ln.startswith("Divergence & Estimator &")]
    head = next(i for i, ln in enumerate(lines) if ln.startswith(" &  & "))
    lines[head] = "Divergence & Estimator & " + lines[head].removeprefix(" &  & ")
    rules = [r"\midrule" if ln.startswith(r"\cline") else ln for ln in lines]
    bottom = rules.index(r"\bottomrule")
    if rules[bottom - 1] == r"\midrule":  # no rule right above \bottomrule
        del rules[bottom - 1]
    return "\n".join(rules)


def to_latex(table: Table1) -> str:
    blocks = [
        {"title": latex_escape(b.domain), "tabular": _latex_block(table, b)} for b in table.blocks
    ]
    caption = "Results of the different divergences and estimators (generated by gppo-sweep)."
    return _LATEX.render(
        caption=caption,
        blocks=blocks,
        notes=[latex_escape(n) for n in notes(table, "latex")],
    )


_HTML = jinja2.Template(
    """<!doctype html>
<html><head><meta charset="utf-8"><title>Table 1</title>
<style>table{border-collapse:collapse;margin-bottom:1em}th,td{padding:2px 8px;text-align:right}
th{border-bottom:1px solid #333}td:first-child,td:nth-child(2){text-align:left}</style></head>
<body>
{% for b in blocks %}<h3>{{ b.title|e }}</h3>
{{ b.html }}
{% endfor %}<ul>{% for n in notes %}<li>{{ n|e }}</li>{% endfor %}</ul>
</body></html>
"""
)


def _html_block(table: Table1, block: Block) -> str:
    text, rank = frames(table, block, "html")
    text["Divergence"] = text["Divergence"].where(~text["Divergence"].duplicated(), "")
    styler = text.style.apply(lambda _: rank.map(lambda r: HTML_SHADES.get(r, "")), axis=None)
    return styler.hide(axis="index").to_html(escape=False)


def to_html(table: Table1, *, general: bool = True) -> str:
    """Table 1 as an HTML document; ``general=False``: with its own notes only (a page that
    says the general ones once, :func:`notes`)."""
    blocks = [{"title": b.domain, "html": _html_block(table, b)} for b in table.blocks]
    return _HTML.render(blocks=blocks, notes=notes(table, "html", general=general))


def _num(value: object, digits: int | None = None) -> str:
    if value is None:
        return ""
    return str(value) if digits is None else f"{value:.{digits}g}"


def to_csv(table: Table1) -> str:
    """One row per (domain, cell); the columns are listed in docs/statistics.md ("Output
    columns of ``table1.csv``").

    domain, cell, per benchmark ``<b>`` (and ``<b>_ci95_lo``/``<b>_ci95_hi`` with several
    seeds), avg (and its CI), rel_pct, delta, delta_ci95_lo, delta_ci95_hi, prob_improvement,
    p_value, p_adjusted, significant (true/false), n_seeds, note; with adaptive seeds
    stop_status, stop_reason, stop_seeds, stopped (Δ's interval then the design's); with a cost
    (:mod:`gppo.analysis.tables.cost_column`) cpu_hours_per_seed, cpu_hours, gpu_hours_per_seed, gpu_hours
    (and cost_per_seed, cost, currency with a price), and a last row, cell ``total``, with the
    table's total (every run once) in them.
    """
    benches = list(dict.fromkeys(b for block in table.blocks for b in block.benchmarks))
    records = []
    for block in table.blocks:
        for row in block.rows:
            rec: dict[str, str] = {"domain": block.domain, "cell": row.cell}
            for col in [*benches, AVG]:
                entry = row.entries.get(col)
                rec[col] = "" if entry is None else _num(entry.mean)
                if table.multi_seed:
                    rec[f"{col}_ci95_lo"] = "" if entry is None else _num(entry.lo)
                    rec[f"{col}_ci95_hi"] = "" if entry is None else _num(entry.hi)
            rec["rel_pct"] = _num(row.rel_pct)
            rec["delta"] = _num(row.delta.mean)
            rec["delta_ci95_lo"], rec["delta_ci95_hi"] = _num(row.delta.lo), _num(row.delta.hi)
            rec["prob_improvement"] = _num(row.p_improve, 6)
            rec["p_value"], rec["p_adjusted"] = _num(row.p_value, 4), _num(row.p_adjusted, 4)
            rec["significant"] = "true" if row.significant else "false"
            rec["n_seeds"] = str(row.n_seeds)
            rec["note"] = ";".join(f"{r}:{'/'.join(map(str, s))}" for r, s in row.reasons.items())
            if table.adaptive:
                rec.update(_stop_fields(table, row))
            paid = table.cost.rows.get((block.domain, row.cell)) if table.cost else None
            if table.cost and paid is not None:  # a row without runs (the base model): empty
                rec.update(_cost_fields(table.cost, paid))
            records.append(rec)
    if table.cost:
        records.append({"cell": COST_TOTAL, **_cost_fields(table.cost, None)})
    buf = io.StringIO()
    pd.DataFrame(records).to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue()


COST_TOTAL = "total"  # table1.csv's row with the table's total cost


def _stop_fields(table: Table1, row: Row) -> dict[str, str]:
    """table1.csv's adaptive-seeds columns of one row: the stop's status, reason and seeds, and
    the Stopped text (the reference: ``reference``; the base model: empty)."""
    from gppo.stats.rounds import OPEN

    stop = row.stop
    text = stop_text(table, row)
    status = "" if stop is None else "open" if stop.status == OPEN else stop.status
    return {
        "stop_status": status,
        "stop_reason": "" if stop is None else stop.reason,
        "stop_seeds": "" if stop is None else str(stop.seeds),
        "stopped": "" if text == "—" else text,
    }


def _cost_fields(cost: TableCost, row: RowCost | None) -> dict[str, str]:
    """table1.csv's cost columns of one row (``row`` None: the table's total)."""
    pairs = {"": cost.total} if row is None else {"_per_seed": row.per_seed, "": row.total}
    out: dict[str, str] = {}
    for unit in ("cpu", "gpu"):
        for suffix, hours in pairs.items():
            out[f"{unit}_hours{suffix}"] = f"{getattr(hours, unit):.6g}"
        if row is None:
            out[f"{unit}_hours_per_seed"] = ""
    if cost.price is not None:
        for suffix, hours in pairs.items():
            out[f"cost{suffix}"] = f"{hours.money(cost.price):.6g}"
        out.setdefault("cost_per_seed", "")
        out["currency"] = cost.price.currency
    return out


# -- the terminal (rich) ----------------------------------------------------------------------
def to_rich(table: Table1) -> list:
    """rich Tables (one per domain) with bold / underline / italic highlights, and the notes
    (Table 1 in the terminal: cells never wrap)."""
    from rich.table import Table
    from rich.text import Text

    styles = {1: "bold", 2: "underline", 3: "italic"}
    out: list = []
    for block in table.blocks:
        text, rank = frames(table, block, "rich")
        if table.multi_seed:  # terminal: Avg., Δ, P(>) with intervals; benchmarks in the report
            text, rank = text.drop(columns=block.benchmarks), rank.drop(columns=block.benchmarks)
        rt = Table(title=block.domain, show_lines=False)
        for col in text.columns:
            rt.add_column(col, justify="left" if col in ("Divergence", "Estimator") else "right")
        last = None
        for i in range(len(text)):
            values = list(text.iloc[i])
            if values[0] == last:
                values[0] = ""
            else:
                last = values[0]
            rt.add_row(
                *[
                    Text(v, style=styles.get(int(rank.to_numpy()[i, j]), ""))
                    for j, v in enumerate(values)
                ]
            )
        out.append(rt)
    brief = "This view leaves out the per-benchmark columns: see the report (table1.md)."
    out.extend(Text(n) for n in [*notes(table, "rich"), *([brief] if table.multi_seed else [])])
    return out


def print_table1(console: Console, table1: Table1) -> None:
    """Table 1 as rich tables whose cells never wrap ("Binary (DPPO)" on one line): boxed when
    that fits the console, else compact (no vertical rules, single spaces between columns;
    quickstart's table: 88 columns boxed, 79 compact)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    wide = Console(width=1000)
    for item in to_rich(table1):
        if isinstance(item, Table):
            for col in item.columns:
                col.no_wrap = True
            if wide.measure(item).maximum > console.width:
                item.box, item.pad_edge, item.collapse_padding = box.SIMPLE_HEAD, False, True
        console.print(item)


RENDERERS = {"md": to_markdown, "latex": to_latex, "html": to_html, "csv": to_csv}


def render(table: Table1, fmt: str) -> str:
    try:
        return RENDERERS[fmt](table)
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}, all") from None
