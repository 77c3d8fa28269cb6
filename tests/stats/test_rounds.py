"""The rounds of adaptive seeds replayed on a plan (:mod:`gppo.stats.rounds`, issue 48):
what each round asks for, that the state is the data (a relaunch asks for the same cells), per
axis point, and the rows' stops."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gppo.grid import load_plan
from gppo.stats.rounds import BUDGET, OPEN, Rounds, row_of

QUICKSTART = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"
#: rows far from the reference (points); every other row is the reference's distribution
EFFECTS = {"sapo": -12.0, "clip_cov": -15.0, "kl/binary": 6.0}


def plan_of(tmp_path: Path, seeds: str = "{min: 2, max: 6}", extra: str = "", test: str = "pooled"):
    """The quick start at adaptive ``seeds``; the rounds' mechanics are tested with the pooled
    test (its power at 2 seeds; Welch's, the default, needs more seeds: test_welch_...)."""
    text = QUICKSTART.read_text().replace(
        "seeds: 3\n", f"seeds: {seeds}\n{extra}analysis: {{test: {test}}}\n"
    )
    path = tmp_path / "grid.yaml"
    path.write_text(text + f'tracking: {{uri: "sqlite:///{tmp_path}/mlflow.db"}}\n')
    return load_plan(path)


def draw(plan, seed: int, effects=EFFECTS, sd: float = 1.0) -> dict[str, float]:
    """A score for every cell of the plan (points): 40 + the row's effect + noise; cells that
    share a run (chi2/mc on tv/mc's) get the same score."""
    rng = np.random.default_rng(seed)
    out: dict[str, float] = {}
    for c in plan.cells:
        out[c.id] = 40 + effects.get(row_of(c), 0.0) + sd * rng.normal()
    for c in plan.cells:
        if row_of(c) == "chi2/mc":
            out[c.id] = out[c.id.replace("chi2", "tv", 1)]
    return out


def run_rounds(rounds: Rounds, everything: dict[str, float]) -> dict[str, float]:
    """The launcher's loop without a cluster: run what the rounds want until they want nothing
    new; returns the scores of the cells run."""
    ran: dict[str, float] = {}
    while new := rounds.wanted(ran) - ran.keys():
        ran.update({cid: everything[cid] for cid in new})
    return ran


def test_the_first_round_is_min_seeds_of_every_row(tmp_path):
    plan = plan_of(tmp_path)
    rounds = Rounds.of_plan(plan)
    want = rounds.wanted({})
    assert want == {c.id for c in plan.cells if c.seed < 2} - {"chi2-mc-s0", "chi2-mc-s1"}
    assert rounds.runs_range() == (32, 96)


@pytest.mark.parametrize("seed", range(5))
def test_clear_rows_stop_early_and_the_state_is_the_data(tmp_path, seed):
    plan = plan_of(tmp_path)
    rounds = Rounds.of_plan(plan)
    everything = draw(plan, seed)
    ran = run_rounds(rounds, everything)
    (stops,) = rounds.stops(ran)
    for row in ("sapo", "clip_cov"):  # 12-15 points below at a seed sd of 1: at the first look
        assert stops[row].status == "separated" and stops[row].seeds == 2, stops[row]
        assert stops[row].interval is not None and stops[row].interval[1] < 0
    assert stops["chi2/mc"].reason == "same runs"
    assert all(s.status != OPEN for s in stops.values())  # every row decided by max
    assert len(ran) < len(plan.cells) - 6  # fewer than the fixed sweep at max (chi2: no runs)
    # a relaunch (after a kill -9) asks for exactly what ran, whatever else the store holds:
    # scores of seeds no round asked for change nothing
    assert rounds.wanted(ran) == set(ran)
    assert rounds.wanted(everything) == set(ran)
    assert rounds.stops(everything) == [stops]


def test_a_round_under_way_asks_for_its_missing_seeds_only(tmp_path):
    plan = plan_of(tmp_path)
    rounds = Rounds.of_plan(plan)
    everything = draw(plan, 0)
    first = {cid: everything[cid] for cid in rounds.wanted({})}
    second = rounds.wanted(first)
    assert second > set(first)
    partial = dict(first, **{cid: everything[cid] for cid in sorted(second - set(first))[:1]})
    assert rounds.wanted(partial) == second  # half a round done: the same round, not a new one
    (stops,) = rounds.stops(partial)
    assert stops["sapo"].status == "separated"  # decided at the first look, kept
    going = [r for r, s in stops.items() if s.status == OPEN]
    assert going and all(stops[r].seeds in (2, 3) for r in going)


def test_an_open_row_whose_seeds_the_budget_left_says_so(tmp_path):
    plan = plan_of(tmp_path)
    rounds = Rounds.of_plan(plan)
    everything = draw(plan, 1)
    first = {cid: everything[cid] for cid in rounds.wanted({})}
    left = rounds.wanted(first) - set(first)
    (stops,) = rounds.stops(first, left=left)
    going = {r: s for r, s in stops.items() if s.status == OPEN}
    assert going and all(s.reason == BUDGET for s in going.values())
    assert all(s.text().startswith("left by the budget at 2 seeds") for s in going.values())


def test_each_axis_point_is_its_own_table(tmp_path):
    plan = plan_of(tmp_path, extra="axes: {local.lr: [1.0e-4, 3.0e-4]}\n")
    rounds = Rounds.of_plan(plan)
    assert [t.point for t in rounds.tables] == [{"local.lr": 1e-4}, {"local.lr": 3e-4}]
    # sapo is far below the reference at lr 1e-4 only
    everything = draw(plan, 2, effects={})
    for c in plan.cells:
        if row_of(c) == "sapo" and c.axes["local.lr"] == 1e-4:
            everything[c.id] -= 15
    stops = rounds.stops(run_rounds(rounds, everything))
    assert stops[0]["sapo"].status == "separated" and stops[0]["sapo"].seeds == 2
    assert stops[1]["sapo"].status != "separated"


def test_welch_the_default_holds_a_clear_row_until_its_variance_is_known(tmp_path):
    """The spec's analysis.test is the rule's: Welch's test (the default) does not separate a
    row 12-15 points off at 2 seeds a side (each side's own variance on about 1-2 df), but does
    by max; the pooled test separates it at once (tests above)."""
    plan = plan_of(tmp_path, test="welch")
    rounds = Rounds.of_plan(plan)
    assert rounds.design.test == "welch"
    stops = rounds.stops(run_rounds(rounds, draw(plan, 0)))[0]
    for row in ("sapo", "clip_cov"):
        assert stops[row].status == "separated" and stops[row].seeds > 2, stops[row]
    assert Rounds.of_plan(plan_of(tmp_path, test="pooled")).design.test == "pooled"


def test_first_moves_the_design_onto_other_seeds(tmp_path):
    plan = plan_of(tmp_path, seeds="{min: 2, max: 4, first: 100}")
    rounds = Rounds.of_plan(plan)
    assert sorted({c.seed for c in plan.cells}) == [100, 101, 102, 103]
    assert {int(cid.rpartition("-s")[2]) for cid in rounds.wanted({})} == {100, 101}


def _cell(plan, row: str, seed: int) -> str:
    return next(c.id for c in plan.cells if row_of(c) == row and c.seed == seed)


def run_with_failures(rounds: Rounds, everything: dict[str, float], failed: set[str]):
    """:func:`run_rounds` where the cells in ``failed`` fail with no retry left."""
    ran: dict[str, float] = {}
    while new := rounds.wanted(ran, failed) - ran.keys() - failed:
        ran.update({cid: everything[cid] for cid in new})
    return ran


def test_a_failed_seed_stops_its_row_only_and_the_rounds_go_on(tmp_path):
    """Issue 57 item 2: kl/atomic's second seed fails with no retry left; its row stops as
    'seed failed' (not decided, no more seeds) and leaves the family; every other row's rounds
    go on to a decision."""
    plan = plan_of(tmp_path)
    rounds = Rounds.of_plan(plan)
    everything = draw(plan, 0)
    lost = {_cell(plan, "kl/atomic", 1)}
    ran = run_with_failures(rounds, everything, lost)
    (stops,) = rounds.stops(ran, failed=lost)
    assert stops["kl/atomic"].status == "failed" and stops["kl/atomic"].reason == "seed failed"
    assert stops["kl/atomic"].text() == "seed failed at 1 seed: not decided"
    assert not any(c.startswith("kl-atomic") for c in ran.keys() - {_cell(plan, "kl/atomic", 0)})
    others = {r: s for r, s in stops.items() if r != "kl/atomic"}
    assert all(s.status not in ("open", "failed") for s in others.values())  # all decided
    assert len({c for c in ran if not c.startswith(("kl-atomic", "chi2-mc"))}) > 2 * 15
    # a function of the finished runs alone: a relaunch asks for the same, the stops agree
    assert rounds.wanted(ran, lost) - lost == set(ran)
    assert rounds.stops(ran, failed=lost) == [stops]
    texts = rounds.cell_texts(ran, failed=lost)
    assert texts[_cell(plan, "kl/atomic", 0)] == "seed failed at 1 seed: not decided"


def test_a_missing_seed_with_a_retry_holds_the_look_and_decides_nothing(tmp_path):
    """A seed not finished (running, or waiting for its retry) is no failure: its row is open,
    and nothing past its look is decided or called unneeded."""
    plan = plan_of(tmp_path)
    rounds = Rounds.of_plan(plan)
    everything = draw(plan, 0)
    first = {cid: everything[cid] for cid in rounds.wanted({})}
    slow = _cell(plan, "kl/atomic", 1)
    partial = {k: v for k, v in first.items() if k != slow}
    (stops,) = rounds.stops(partial)
    assert stops["kl/atomic"].status == "open" and stops["kl/atomic"].seeds == 1
    assert rounds.wanted(partial) == set(first)  # the same round: the retry, no new seeds


def test_a_failed_reference_seed_blocks_its_table(tmp_path):
    plan = plan_of(tmp_path)
    rounds = Rounds.of_plan(plan)
    everything = draw(plan, 0)
    lost = {_cell(plan, "tv/mc", 1)}
    ran = run_with_failures(rounds, everything, lost)
    (stops,) = rounds.stops(ran, failed=lost)
    compared = {r: s for r, s in stops.items() if s.reason != "same runs"}
    assert compared and all(s.status == "failed" for s in compared.values())
    assert all(s.reason == "reference seed failed" for s in compared.values())
    assert all(c.endswith(("-s0", "-s1")) for c in ran)  # no second round


def test_idle_cells_say_why_and_an_open_rows_later_seeds_are_not_idle(tmp_path):
    """Issue 57 item 2: 'unneeded' only for a row the rule decided; a row stopped on a failed
    seed says 'row failed'; a row still open (its round under way) has no idle cell."""
    plan = plan_of(tmp_path)
    rounds = Rounds.of_plan(plan)
    everything = draw(plan, 0)
    first = {cid: everything[cid] for cid in rounds.wanted({})}
    slow = _cell(plan, "kl/atomic", 1)
    partial = {k: v for k, v in first.items() if k != slow}
    idle = rounds.idle(partial)
    assert not any(c.startswith("kl-atomic") for c in idle)  # open: a later round may need them
    assert not set(idle) & rounds.wanted(partial)
    (stops,) = rounds.stops(partial)
    for row, stop in stops.items():
        later = {c.id for c in plan.cells if row_of(c) == row and c.seed >= 2}
        if stop.status in ("separated", "equivalent", "futile"):
            assert all(idle[c] == "unneeded" for c in later), row
        elif stop.status == OPEN:
            assert not later & set(idle), row

    lost = {slow}
    ran = run_with_failures(rounds, everything, lost)
    idle = rounds.idle(ran, lost)
    later = {c.id for c in plan.cells if row_of(c) == "kl/atomic" and c.seed >= 2}
    assert {idle[c] for c in later} == {"row failed"}
    decided = {c: why for c, why in idle.items() if not c.startswith("kl-atomic")}
    assert decided and set(decided.values()) == {"unneeded"}
    # every cell is run, failed or idle: the sweep ended with nothing pending
    assert set(ran) | lost | set(idle) == {c.id for c in plan.cells}


def test_a_failed_reference_seed_makes_every_later_cell_of_its_table_row_failed(tmp_path):
    plan = plan_of(tmp_path)
    rounds = Rounds.of_plan(plan)
    lost = {_cell(plan, "tv/mc", 1)}
    ran = run_with_failures(rounds, draw(plan, 0), lost)
    idle = rounds.idle(ran, lost)
    assert set(ran) | lost | set(idle) == {c.id for c in plan.cells}
    assert set(idle.values()) == {"row failed"}
