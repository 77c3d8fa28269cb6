"""The ``local`` backend object: settings model, benchmarks, cell -> Job."""

from __future__ import annotations

import shlex
import sys

import pytest
from helpers import make_cell
from pydantic import ValidationError

from gppo.backends.base import get_backend
from gppo.backends.local.settings import LocalSettings
from gppo.cell import Cell, Resources


def test_settings_defaults_and_extra_keys_forbidden() -> None:
    s = LocalSettings()
    assert s.domain == "math" and s.group_size == 8 and s.num_threads == 1
    with pytest.raises(ValidationError, match="extra"):
        LocalSettings.model_validate({"domain": "math", "learning_rate": 1e-3})
    with pytest.raises(ValidationError):
        LocalSettings(domain="chess")


def test_backend_job_and_benchmarks() -> None:
    be = get_backend("local")
    assert be.name == "local" and not be.reuse_run_on_retry
    s = be.validate_settings({"domain": "code"})
    assert be.default_benchmarks(s) == ("dsl-map", "dsl-list", "dsl-pair", "dsl-triple")
    assert be.known_benchmarks(be.validate_settings({})) == ("add-small", "add", "sub", "add3")
    cell = make_cell(
        "kl", "atomic", settings={"domain": "math", "steps": 2}, resources=Resources(num_cpus=1)
    )
    job = be.job(cell)
    assert job.argv[:3] == (sys.executable, "-m", "gppo.backends.local")
    assert Cell.from_json(job.argv[4]) == cell
    assert shlex.split(job.entrypoint) == list(job.argv)
    assert job.resources == cell.resources


def test_settings_reject_heads_not_dividing_width() -> None:
    with pytest.raises(ValidationError, match="must divide d_model"):
        LocalSettings(d_model=100, n_heads=3)
