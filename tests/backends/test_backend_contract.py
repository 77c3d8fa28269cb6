"""The contract every registered backend keeps, parametrised from the backend registry (like
Optuna's sampler contract tests): a new backend is checked by registering it, nothing else.

Per backend: its settings model validates a spec's section and refuses unknown keys; its default
benchmarks are among the known ones; ``job(cell)`` is deterministic (the same cell gives the same
job; verl's composes its Hydra config to build it), runs its own entrypoint module, quotes
its argv so that Ray's shell gives it back unchanged, carries the cell (or what the entrypoint
needs of it) and the cell's CPU, memory and custom resources; and the entrypoint module can be found without importing
it (the job runs it as ``python -m``)."""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from gppo.backends.base import BACKENDS, Backend, Job, get_backend
from gppo.cell import Cell
from gppo.grid import load_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import sweep.probe_backend  # noqa: F401  (the tests' own backends count too)

#: the smallest section each backend needs (the rest: its defaults)
MINIMAL = {
    "verl": {
        "model_path": "Qwen/Qwen2.5-0.5B",
        "train_file": "/data/train.parquet",
        "val_files": {"AIME24": "/data/aime24.parquet"},
    }
}


def _plan(tmp_path: Path, name: str, section: dict | None = None):
    import yaml

    spec = {
        "name": "contract",
        "backend": name,
        "grid": {"divergences": ["kl"], "estimators": ["atomic"]},
        "baselines": ["gspo"],
        "seeds": 1,
    }
    if section or MINIMAL.get(name):
        spec[name] = section or MINIMAL[name]
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    return load_plan(path)


@pytest.fixture(params=BACKENDS.names())
def backend(request) -> Backend:
    return get_backend(request.param)


def test_settings_model_validates_and_refuses_unknown_keys(backend):
    model = backend.validate_settings(MINIMAL.get(backend.name, {}))
    assert isinstance(model, backend.settings_model)
    again = backend.validate_settings(model.model_dump(mode="json"))  # a cell's settings
    assert again == model
    with pytest.raises(ValidationError):
        backend.validate_settings({**MINIMAL.get(backend.name, {}), "no_such_setting": 1})


def test_default_benchmarks_are_known(backend):
    settings = backend.validate_settings(MINIMAL.get(backend.name, {}))
    defaults = backend.default_benchmarks(settings)
    known = backend.known_benchmarks(settings)
    assert all(isinstance(b, str) and b for b in defaults)
    if known is not None:
        assert set(defaults) <= set(known)


def test_job_runs_its_entrypoint_with_the_cell(backend, tmp_path):
    plan = _plan(tmp_path, backend.name)
    assert {c.method for c in plan.cells} == {"gppo", "gspo"}
    for cell in plan.cells:
        job = backend.job(cell)
        assert (
            isinstance(job, Job) and backend.job(cell) == job
        )  # deterministic: same cell, same job
        assert shlex.split(job.entrypoint) == list(job.argv)  # Ray's shell gives argv back
        # what the cell asks Ray for (a backend may size GPUs from its own settings: verl n_gpus)
        r, want = job.resources, cell.resources
        assert (r.num_cpus, r.memory_gb, r.custom) == (want.num_cpus, want.memory_gb, want.custom)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in job.env.items())
        module = backend.entrypoint_module
        if "-m" in job.argv:
            assert job.argv[job.argv.index("-m") + 1] == module
        # the cell travels whole (a JSON argument) or the job names the cell's own settings
        payload = [a for a in job.argv if a.startswith("{")]
        if payload:
            assert Cell.from_json(payload[0]) == cell


def test_entrypoint_module_can_be_found(backend):
    module = backend.entrypoint_module
    spec = importlib.util.find_spec(module)
    assert spec is not None, module
    if spec.submodule_search_locations:  # a package: run through its __main__
        assert importlib.util.find_spec(f"{module}.__main__") is not None


# ---- backends found through entry points ---------------------------------------------------------
EXTERNAL_BACKEND = """
from pydantic import BaseModel, ConfigDict

from gppo.backends.base import Backend, Job


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    greeting: str = "hello"


class OutsideBackend(Backend):
    name = "outside"
    settings_model = Settings
    entrypoint_module = "outside_backend"

    def default_benchmarks(self, settings):
        return ("b1", "b2")

    def job(self, cell):
        return Job(argv=("python", "-m", self.entrypoint_module, cell.to_json()))
"""


@pytest.mark.slow
def test_a_package_outside_the_repository_adds_a_backend_a_spec_can_name(tmp_path):
    """An installed distribution whose metadata names ``outside = "outside_backend:OutsideBackend"``
    in the ``gppo.backends`` group: a spec says ``backend: outside`` and plans (a fresh process,
    as a user's would be); an unknown name still lists the known ones, the new one included."""
    import subprocess

    import yaml

    site = tmp_path / "site"
    (site / "outside_backend.py").parent.mkdir()
    (site / "outside_backend.py").write_text(EXTERNAL_BACKEND)
    info = site / "outside_backend-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: outside-backend\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[gppo.backends]\noutside = outside_backend:OutsideBackend\n"
    )
    spec = {
        "name": "ext",
        "backend": "outside",
        "outside": {"greeting": "hi"},
        "grid": {"divergences": ["tv"], "estimators": ["mc"]},
        "seeds": 1,
    }
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(spec))
    bad = {**spec, "backend": "nowhere"}
    bad.pop("outside")
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    code = (
        "import sys\n"
        "from gppo.grid import load_plan\n"
        "from gppo.errors import GppoError\n"
        "plan = load_plan(sys.argv[1])\n"
        "(cell,) = plan.cells\n"
        "print(cell.backend, cell.settings['greeting'], ','.join(cell.benchmarks))\n"
        "try:\n"
        "    load_plan(sys.argv[2])\n"
        "except GppoError as exc:\n"
        "    print(exc)\n"
    )
    env = {**__import__("os").environ, "PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "grid.yaml"), str(tmp_path / "bad.yaml")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    first, second = out.stdout.strip().splitlines()
    assert first == "outside hi b1,b2"
    assert "unknown backend 'nowhere'; known: " in second
    known = second.split("known: ", 1)[1].split(", ")
    assert {"local", "verl", "trl", "outside"} <= set(known), second


# ---- the run protocol: every backend's entrypoint -----------------------------------------------
def _open_run(tmp_path: Path) -> tuple[str, object, str]:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    run_id = client.create_run(client.create_experiment("contract")).info.run_id
    return uri, client, run_id


def _run_job(cell: Cell, tmp_path: Path, small: dict) -> tuple[object, str, int]:
    """The backend's real entrypoint as the dispatcher runs it (the job's argv and env,
    ``MLFLOW_RUN_ID`` naming the run), the cell's settings made ``small``."""
    import os
    import subprocess
    from dataclasses import replace

    from gppo import metrics as M

    tiny = replace(cell, settings={**cell.settings, **small})
    job = get_backend(cell.backend).job(tiny)
    uri, client, run_id = _open_run(tmp_path)
    env = {**os.environ, **job.env, M.ENV_TRACKING_URI: uri, M.ENV_RUN_ID: run_id}
    out = subprocess.run(list(job.argv), env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return client, run_id, small["steps"]


def _run_local(cell: Cell, tmp_path: Path) -> tuple[object, str, int]:
    """The testbed: 2 steps on 4 prompts, 4 evaluation prompts per benchmark."""
    small = {"steps": 2, "prompts_per_step": 4, "eval_prompts": 4, "minibatches": 2}
    return _run_job(cell, tmp_path, small)


def _run_trl(cell: Cell, tmp_path: Path) -> tuple[object, str, int]:
    """TRL's GRPOTrainer: 2 steps of 4 prompts x 8 samples in 2 updates each."""
    small = {"steps": 2, "prompts_per_step": 4, "minibatches": 2}
    return _run_job(cell, tmp_path, {**small, "checkpoint_dir": str(tmp_path / "ckpt")})


def _trl_real_section(tmp_path: Path) -> dict:
    """TRL on a model and data of the user's (``testbed: false``): the verl smoke assets' tiny
    random Qwen2 and ``smoke`` data written by data prepare's converter, tiny generations."""
    from gppo.backends.verl.smoke import build_smoke_assets

    assets = build_smoke_assets(tmp_path / "assets")
    return {
        "testbed": False,
        "model_path": str(assets.model_dir),
        "train_file": str(assets.train_file),
        "val_files": {"smoke": str(assets.val_file)},
        "max_new_tokens": 8,
        "max_prompt_length": 64,
        "eval_prompts": 4,
    }


def _run_verl(cell: Cell, tmp_path: Path, monkeypatch) -> tuple[object, str, int]:
    """verl's entrypoint around a stand-in of verl's trainer that logs as verl's does (its own
    ``Tracking`` into the run): the trainer itself needs a GPU or the CPU venv (its real runs are
    tests/backends/verl/test_verl_cpu_launch.py)."""
    import gppo.backends.verl.__main__ as entry

    from .verl.test_verl_metrics_map import _train, _val, _verl_session

    uri, client, run_id = _open_run(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_RUN_ID", run_id)
    scores = dict.fromkeys(cell.benchmarks, 0.25)

    def stand_in(overrides):
        steps = {0: _val(scores), 1: _train(1), 2: {**_train(2), **_val(scores)}}
        _verl_session(monkeypatch, uri, run_id, steps)

    monkeypatch.setattr(entry, "_run_verl", stand_in)
    monkeypatch.setenv("GPPO_CACHE_DIR", str(tmp_path / "cache"))  # the checkpoints' default root
    argv = list(get_backend("verl").job(cell).argv[3:])
    argv[argv.index("--total-steps") + 1] = "2"
    assert entry.main(argv) == 0
    return client, run_id, 2


#: how the contract runs each built-in backend's entrypoint here (a CPU, no GPU); a name
#: ``<backend>-<route>`` runs that backend with another route's section (:data:`ROUTE_SECTIONS`)
PROTOCOL_RUNS = {"local": _run_local, "verl": _run_verl, "trl": _run_trl, "trl-real": _run_trl}
ROUTE_SECTIONS = {"trl-real": _trl_real_section}


def test_every_built_in_backend_has_a_protocol_run():
    """The backends this package ships, read from its installed entry points (not a list kept
    here), each have a run of their entrypoint below: a fourth one added to pyproject.toml
    fails here until it has one."""
    from importlib.metadata import entry_points

    from gppo.backends.base import ENTRY_POINT_GROUP, built_in_backends

    declared = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    shipped = built_in_backends()
    assert shipped[0] == "local" and set(shipped) <= declared
    assert "probe" in BACKENDS.names() and "probe" not in shipped  # registered by hand: not ours
    assert {name.partition("-")[0] for name in PROTOCOL_RUNS} == set(shipped)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PROTOCOL_RUNS))
def test_the_entrypoint_logs_what_the_protocol_says(name, tmp_path, monkeypatch):
    """The base evaluation at step 0 (with ``eval_base``), ``train/score`` at every step, the
    final evaluation, then the finished tag: nothing missing (gppo.backends.cell_run)."""
    from gppo.backends.cell_run import protocol_violations

    section = ROUTE_SECTIONS[name](tmp_path) if name in ROUTE_SECTIONS else None
    plan = _plan(tmp_path, name.partition("-")[0], section)
    cell = next(c for c in plan.cells if c.method == "gppo")
    runner = PROTOCOL_RUNS[name]
    args = (cell, tmp_path, monkeypatch) if name == "verl" else (cell, tmp_path)
    client, run_id, steps = runner(*args)
    problems = protocol_violations(
        client, run_id, eval_k=cell.eval_k, benchmarks=cell.benchmarks, final_step=steps
    )
    assert problems == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["trl", "trl-real"])
def test_a_later_sweep_of_a_finished_cell_trains_it_afresh(name, tmp_path):
    """The same cell in a second sweep (a new store, so a new run) finds the first sweep's
    checkpoints in the cell's directory: it must train from step 0 and log every step, not
    resume the finished model and report it as its own (gppo.backends.checkpoints)."""
    from gppo.backends.cell_run import protocol_violations

    section = ROUTE_SECTIONS[name](tmp_path) if name in ROUTE_SECTIONS else None
    cell = next(c for c in _plan(tmp_path, "trl", section).cells if c.method == "gppo")
    _run_trl(cell, tmp_path)  # the first sweep: finished, its checkpoints left behind
    assert any((tmp_path / "ckpt").glob("*/checkpoint-*")), list((tmp_path / "ckpt").rglob("*"))
    later = tmp_path / "later"
    later.mkdir()
    small = {"steps": 2, "prompts_per_step": 4, "minibatches": 2}
    client, run_id, steps = _run_job(
        cell, later, {**small, "checkpoint_dir": str(tmp_path / "ckpt")}
    )
    problems = protocol_violations(
        client, run_id, eval_k=cell.eval_k, benchmarks=cell.benchmarks, final_step=steps
    )
    assert problems == []  # without the claim: no train/score at steps 1..2 (nothing trained)


@pytest.mark.parametrize(
    "name", [n for n in BACKENDS.names() if not get_backend(n).preflight_train_step]
)
def test_check_refuses_train_step_where_the_backend_has_none(name, tmp_path):
    """``check --train-step`` on a backend without a training-step check: one line naming the
    option and the backend, a non-zero exit, no cell checked (not the option silently dropped)."""
    from typer.testing import CliRunner

    from gppo.cli.app import app

    _plan(tmp_path, name)
    res = CliRunner().invoke(app, ["check", "--train-step", str(tmp_path / "grid.yaml")])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code not in (0, None) and len(lines) == 1, res.output
    assert f"--train-step: backend {name!r} has no training-step check" in lines[0]
