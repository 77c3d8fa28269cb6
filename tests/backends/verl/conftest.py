"""Shared fixtures: the cells of the shipped paper configs, expanded by gppo.grid."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DATA = Path(__file__).resolve().parent / "data"
PAPER_CONFIGS = ("paper-math", "paper-code")


def paper_cells(name: str):
    from gppo.grid.expand import expand
    from gppo.grid.load import load_spec

    path = REPO / "configs" / f"{name}.yaml"
    return expand(load_spec(path), str(path))


@pytest.fixture(scope="session")
def all_paper_cells():
    return {name: paper_cells(name) for name in PAPER_CONFIGS}


class _Composed(dict):
    """``composed[config, cell id]`` = (cell, overrides dict, composed cfg, built dataclasses):
    the cell composed with verl's Hydra config and validated on first use, once per session
    (about 1.2 s a cell: a test that reads one cell pays for one)."""

    def __init__(self, cells: dict) -> None:
        super().__init__()
        self.cells = {(config, c.id): c for config, cs in cells.items() for c in cs}

    def __missing__(self, key):
        from gppo.backends.verl.overrides import build_overrides, cell_overrides
        from gppo.backends.verl.settings import VerlSettings
        from gppo.backends.verl.validate import compose_and_validate

        cell = self.cells[key]
        settings = VerlSettings.model_validate(cell.settings)
        cfg, built = compose_and_validate(tuple(cell_overrides(cell, settings)))
        self[key] = (cell, build_overrides(cell, settings), cfg, built)
        return self[key]


@pytest.fixture(scope="session")
def composed(all_paper_cells):
    """Every paper cell composed with verl's Hydra config and validated, on first use."""
    return _Composed(all_paper_cells)


def _install_cpu_platform() -> None:
    """verl's engine module reads the device name when it is imported: on a machine without a
    GPU, give verl our CPU platform before any test imports it (tests/backends/verl only)."""
    import torch

    if not torch.cuda.is_available():
        from gppo.backends.verl.cpu.platform import install_cpu_platform

        install_cpu_platform()


_install_cpu_platform()


@pytest.fixture(scope="session")
def math_actors(all_paper_cells):
    """``{cell id: (cell, actor config)}`` for paper-math: verl's ``ActorConfig`` built from each
    cell's overrides (composed and validated once; shared with ``composed`` through its cache)."""
    from gppo.backends.verl.overrides import cell_overrides
    from gppo.backends.verl.settings import VerlSettings
    from gppo.backends.verl.validate import compose_and_validate

    out = {}
    for cell in all_paper_cells["paper-math"]:
        overrides = cell_overrides(cell, VerlSettings.model_validate(cell.settings))
        out[cell.id] = (cell, compose_and_validate(tuple(overrides))[1]["actor"])
    return out


@pytest.fixture(scope="session")
def process_group():
    """One single-rank process group (gloo) for the whole session. The rendezvous variables it
    sets are removed once the group is up: every later launch would hand them to its cells (two
    TRL cells then bind the same MASTER_PORT)."""
    import os

    from gppo.backends.verl.engine import init_single_process_group

    before = dict(os.environ)
    init_single_process_group()
    for key in set(os.environ) - set(before):
        del os.environ[key]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from gppo.backends.verl.tiny import tiny_causal_lm

    return tiny_causal_lm(tmp_path_factory.mktemp("tiny-qwen2"))


#: The verl CPU environment the CPU-mode tests run in (scripts/verl-cpu-env.sh). On a machine
#: without it the suite starts building it in the background as soon as it has collected a test
#: that needs it (:func:`start_building`, about 1.5 minutes); those tests, ordered last, wait for
#: the build through the script's lock, so README's test command and .ci/run build it alike.
VERL_CPU_VENV = Path(os.environ.get("GPPO_VERL_CPU_VENV", REPO / ".venv-verl-cpu"))
VERL_CPU_SCRIPT = REPO / "scripts" / "verl-cpu-env.sh"


def start_building(log: Path) -> subprocess.Popen | None:
    """Start scripts/verl-cpu-env.sh in the background (its own session, output to ``log``) when
    the environment's interpreter is missing; None when there is one (the fixture checks it).
    The caller ends it at the session's end if it is still running."""
    if (VERL_CPU_VENV / "bin" / "python").exists():
        return None
    with log.open("ab") as out:
        return subprocess.Popen(
            ["bash", str(VERL_CPU_SCRIPT)], env=dict(os.environ, VENV=str(VERL_CPU_VENV)),
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def _cpu_env_ready(venv: Path) -> bool:
    """The venv imports vLLM, verl and *this checkout's* gppo."""
    python = venv / "bin" / "python"
    if not python.exists():
        return False
    probe = (
        "import vllm, verl, gppo, pathlib; print(pathlib.Path(gppo.__file__).resolve().parents[1])"
    )
    proc = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=300)
    return proc.returncode == 0 and Path(proc.stdout.strip().splitlines()[-1]) == REPO


@pytest.fixture(scope="session")
def verl_cpu_venv() -> Path:
    """The verl CPU environment's directory, built here when needed: the script takes the
    environment's lock, so a build already under way (:func:`start_building`'s) is waited for,
    not repeated, and a ready environment is left as it is."""
    if not _cpu_env_ready(VERL_CPU_VENV):
        env = dict(os.environ, VENV=str(VERL_CPU_VENV))
        proc = subprocess.run(
            ["bash", str(VERL_CPU_SCRIPT)],
            env=env, capture_output=True, text=True, timeout=1500,
        )  # fmt: skip
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        assert _cpu_env_ready(VERL_CPU_VENV), "scripts/verl-cpu-env.sh left no working env"
    return VERL_CPU_VENV
