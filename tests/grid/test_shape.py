"""A spec's YAML shape <-> GridSpec (one pair of functions), the cell-id rule shared by the grid,
the tuner and the tests, and the objectives' rules for δ, r_min and dual_clip in the spec."""

from __future__ import annotations

import math

import pytest
import sweep.probe_backend  # noqa: F401  (registers the "probe" backend)
from helpers import make_cell

from gppo.cell import cell_id, match_cell_key
from gppo.grid import SpecError, expand
from gppo.grid.load import spec_from_yaml, spec_to_yaml

RAW = {
    "name": "shape",
    "backend": "probe",
    "probe": {"steps": 2},
    "grid": {"divergences": ["kl", "alpha:0.50"], "estimators": ["atomic"]},
    "baselines": ["gspo"],
    "seeds": [0, 3],
    "calibration": {"delta": {"kl": 0.3}},
    "objective": {"ratio_bounds": [0.9, math.inf]},
    "overrides": {"kl-atomic-s3": {"probe": {"steps": 5}, "delta": 0.1}},
}


def test_yaml_shape_round_trips_and_names_the_section_as_the_file_does():
    spec = spec_from_yaml(RAW, "s.yaml")
    assert spec.settings == {"steps": 2} and spec.overrides["kl-atomic-s3"].settings == {"steps": 5}
    written = spec_to_yaml(spec)
    assert written["probe"] == {"steps": 2} and "settings" not in written
    assert written["overrides"] == {"kl-atomic-s3": {"probe": {"steps": 5}, "delta": 0.1}}
    assert written["objective"] == {"ratio_bounds": [0.9, math.inf]}  # only what the file set
    full = spec_to_yaml(spec, defaults=True)
    assert full["retries"]["max"] == 2 and full["reference"] == "kl/atomic"
    for data in (written, full):
        again = spec_from_yaml(data, "again.yaml")
        assert again == spec
        assert [c.to_json() for c in expand(again)] == [c.to_json() for c in expand(spec)]


def test_errors_name_the_section_as_written_and_no_message_is_rewritten():
    with pytest.raises(SpecError) as info:
        spec_from_yaml({**RAW, "colour": "red"}, "s.yaml")
    assert info.value.path == "colour" and "allowed: name, backend, probe, grid" in str(info.value)
    # a value that happens to contain the word 'settings' is quoted as written
    with pytest.raises(SpecError) as info:
        spec_from_yaml({**RAW, "benchmarks": ["settings!"]}, "s.yaml")
    assert "'settings!'" in info.value.message and "probe!" not in info.value.message
    with pytest.raises(
        SpecError, match=r"overrides\.kl-atomic\.lr: unknown key 'lr'; allowed: probe,"
    ):
        spec_from_yaml({**RAW, "overrides": {"kl-atomic": {"lr": 1}}}, "s.yaml")


def test_one_cell_id_rule_for_grid_tuner_and_tests():
    cells = {c.id for c in expand(spec_from_yaml(RAW, "s.yaml"))}
    assert cell_id("alpha:0.5", "atomic", 3) in cells and "alpha0.5-atomic-s3" in cells
    assert cell_id("gspo", seed=0) == "gspo-s0" in cells
    assert make_cell("alpha:0.5", "atomic", seed=3).id == "alpha0.5-atomic-s3"
    bases, seeds = {"kl-atomic", "alpha0.5-atomic", "gspo"}, {0, 3}
    assert match_cell_key("kl-atomic", bases, seeds) == "kl-atomic"
    assert match_cell_key("kl-atomic-s3", bases, seeds) == "kl-atomic"
    assert match_cell_key("gspo-s0", bases, seeds) == "gspo"
    for key in ("kl-atomic-s1", "kl-mc", "kl-atomic-sx", "kl"):
        assert match_cell_key(key, bases, seeds) is None


@pytest.mark.parametrize(
    ("patch", "path", "words"),
    [
        ({"calibration": {"delta": {"kl": math.inf}}}, "calibration.delta.kl", "delta must be a finite number > 0"),
        ({"calibration": {"delta": {"kl": 0.0}}}, "calibration.delta.kl", "delta must be a finite number > 0"),
        ({"overrides": {"kl-atomic": {"delta": math.inf}}}, "overrides.kl-atomic.delta", "delta must be a finite number > 0"),
        ({"calibration": {"r_min": 1.0}}, "calibration.r_min", "r_min must be a number in the open interval (0, 1)"),
        ({"objective": {"dual_clip": 1.0}}, "objective.dual_clip", "dual_clip must be None or a number > 1"),
        ({"overrides": {"kl-atomic": {"params": {"dual_clip": 0.5}}}}, "overrides.kl-atomic.params.dual_clip", "dual_clip must be None or a number > 1"),
        ({"overrides": {"kl-atomic": {"params": {"ratio_bounds": [1, 2]}}}}, "overrides.kl-atomic.params.ratio_bounds", "0 <= low < 1 < high"),
    ],
)  # fmt: skip
def test_the_spec_refuses_what_the_objectives_refuse_in_their_words(patch, path, words):
    with pytest.raises(SpecError) as info:
        expand(spec_from_yaml({**RAW, **patch}, "s.yaml"), "s.yaml")
    assert info.value.path == path and words in info.value.message
