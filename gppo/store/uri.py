"""Where a sweep's runs live: the tracking URI, what kind of store it names, and the state dir.

``sqlite:///mlflow.db`` in the working directory is the default (MLflow's own); a relative SQLite
or file path is made absolute, because the jobs run in another working directory. Per-sweep state
(``.gppo/<sweep id>/``: the local Ray head, the lock) lives next to a local store.
"""

from __future__ import annotations

import os
from pathlib import Path

from gppo import metrics as M

DEFAULT_URI = "sqlite:///mlflow.db"
#: the database schemes MLflow's SQL store accepts (``mlflow.store.db.db_types.DATABASE_ENGINES``)
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")


def resolve_tracking_uri(uri: str | None) -> str:
    """The spec's URI, else ``MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db``; a relative
    SQLite or file path is made absolute (jobs run in another working directory)."""
    uri = uri or os.environ.get(M.ENV_TRACKING_URI) or DEFAULT_URI
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str(Path(uri.removeprefix("sqlite:///")).resolve())
    if "://" not in uri:
        return str(Path(uri).resolve())
    return uri


def state_root(uri: str) -> Path:
    """Where ``.gppo/`` (per-sweep state) lives: next to a local store, else the cwd."""
    if uri.startswith("sqlite:///"):
        return Path(uri.removeprefix("sqlite:///")).parent / ".gppo"
    if uri.startswith("file://"):
        return Path(uri.removeprefix("file://")).parent / ".gppo"
    if "://" not in uri:
        return Path(uri).parent / ".gppo"
    return Path.cwd() / ".gppo"


def scheme_of(uri: str) -> str:
    """The URI's scheme in lower case without a driver (``postgresql+psycopg`` -> ``postgresql``);
    ``""`` for a bare path."""
    return uri.split("://", 1)[0].lower().split("+")[0] if "://" in uri else ""


def is_local_store(uri: str) -> bool:
    """True for a store on this machine's disk: ``sqlite:``, ``file:`` or a path."""
    return scheme_of(uri) in ("", "file", "sqlite")


def is_database(uri: str) -> bool:
    """True for a SQL store (SQLite, PostgreSQL, MySQL, SQL Server)."""
    return scheme_of(uri) in DATABASE_SCHEMES


def is_tracking_server(uri: str) -> bool:
    """True for a store reached through a tracking server (``http(s)://``, ``databricks``...),
    which serves its own UI; False for a path, ``file:`` or a database."""
    return not (is_local_store(uri) or is_database(uri))
