"""The Optuna study: RDB storage beside the MLflow store (or any SQLAlchemy URL), sampler, pruner.

``load_if_exists`` is always on, so running the same spec again resumes the same study.
"""

from __future__ import annotations

import os
from pathlib import Path

import optuna

from gppo.errors import CredentialsRefused
from gppo.store.uri import resolve_tracking_uri, state_root
from gppo.sweep.tuning.spec import TuneSpec

#: File name of the default Optuna store, next to the MLflow store.
DEFAULT_DB = "optuna.db"


def tracking_uri(spec: TuneSpec) -> str:
    """The spec's MLflow tracking URI, resolved as the sweep does (relative SQLite made absolute)."""
    return resolve_tracking_uri((spec.base.get("tracking") or {}).get("uri"))


def storage_url(spec: TuneSpec) -> str:
    """``tune.storage`` when given, else ``sqlite:///<folder of the MLflow store>/optuna.db``."""
    if spec.tune.storage:
        return spec.tune.storage
    return f"sqlite:///{state_root(tracking_uri(spec)).parent / DEFAULT_DB}"


def report_dir(spec: TuneSpec) -> Path:
    """Default folder of the report files: ``tune-<study>`` beside the MLflow store."""
    return state_root(tracking_uri(spec)).parent / f"tune-{spec.study_name}"


def make_storage(url: str) -> optuna.storages.RDBStorage:
    engine_kwargs = {}
    if url.startswith("sqlite"):
        engine_kwargs = {"connect_args": {"timeout": 60}}
        path = url.split("sqlite:///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
    except Exception as exc:
        refused = storage_refusal(url, exc)
        if refused is None:
            raise
        raise refused from None


#: what PostgreSQL (libpq) says when it refuses a login: a wrong password, or none given
_PG_REFUSED = ("password authentication failed", "no password supplied", "fe_sendauth")


def storage_refusal(url: str, exc: BaseException) -> CredentialsRefused | None:
    """The one line for a database server that refused the storage URL's account (a wrong or
    missing ``PGPASSWORD``), naming the server and the account, never the password; None for
    any other error."""
    if not any(sign in str(exc) for sign in _PG_REFUSED):
        return None
    from sqlalchemy.engine import make_url

    where = make_url(url)
    server = f"{where.host or 'localhost'}:{where.port or 5432}/{where.database or ''}"
    return CredentialsRefused(
        f"the Optuna storage's database server at {server} refused the login of user "
        f"{where.username or os.environ.get('PGUSER') or '(the OS user)'!r}: "
        f"{'no password given' if 'no password' in str(exc) else 'password authentication failed'}"
        "; set PGPASSWORD (or ~/.pgpass) to that account's password"
    )


#: Optuna's pruner of each ``tune.pruner.kind``; the spec's other fields are its arguments
PRUNERS = {
    "median": optuna.pruners.MedianPruner,
    "hyperband": optuna.pruners.HyperbandPruner,
    "none": optuna.pruners.NopPruner,
}


def make_pruner(spec: TuneSpec) -> optuna.pruners.BasePruner:
    p = spec.tune.pruner
    return PRUNERS[p.kind](**p.model_dump(exclude={"kind"}))


def make_sampler(spec: TuneSpec) -> optuna.samplers.BaseSampler:
    s = spec.tune.sampler
    if s.kind == "random":
        return optuna.samplers.RandomSampler(seed=s.seed)
    # constant_liar: trials running in parallel are treated as bad, so they spread out
    return optuna.samplers.TPESampler(
        seed=s.seed, n_startup_trials=s.n_startup_trials, constant_liar=True
    )


def open_study(spec: TuneSpec, storage: optuna.storages.BaseStorage | None = None) -> optuna.Study:
    """Create the study, or load it when it exists (the same command resumes)."""
    optuna.logging.set_verbosity(
        int(os.environ.get("GPPO_OPTUNA_VERBOSITY", optuna.logging.WARNING))
    )
    return optuna.create_study(
        storage=storage or make_storage(storage_url(spec)),
        study_name=spec.study_name,
        direction="maximize",
        sampler=make_sampler(spec),
        pruner=make_pruner(spec),
        load_if_exists=True,
    )


def trial_handle(
    study: optuna.Study, storage: optuna.storages.BaseStorage, number: int
) -> optuna.trial.Trial:
    """An :class:`optuna.trial.Trial` for trial ``number`` of ``study``, whichever process asked
    for it (a RUNNING trial of a dead tuner, to report to and set attributes on).

    ``storage`` is the study's storage as this process opened it (:func:`make_storage`); the
    trial's id comes from its documented lookups, never from Optuna's private attributes."""
    study_id = storage.get_study_id_from_name(study.study_name)
    trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, number)
    return optuna.trial.Trial(study, trial_id)


def load_study(spec: TuneSpec) -> optuna.Study | None:
    """The spec's existing study (for a report), or None when it was never run."""
    try:
        return optuna.load_study(
            study_name=spec.study_name, storage=make_storage(storage_url(spec))
        )
    except KeyError:
        return None
