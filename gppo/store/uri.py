"""Where a sweep's runs live: the tracking URI, what kind of store it names, and the state dir.

``sqlite:///mlflow.db`` in the working directory is the default (MLflow's own); a relative SQLite
or file path is made absolute, because the jobs run in another working directory. Per-sweep state
(``.gppo/<sweep id>/``: the local Ray head, the lock) lives next to a local store.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path

from gppo import metrics as M
from gppo.errors import CredentialsRefused

DEFAULT_URI = "sqlite:///mlflow.db"
#: the database schemes MLflow's SQL store accepts (``mlflow.store.db.db_types.DATABASE_ENGINES``)
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
#: MLflow's client credentials for a tracking server (its basic auth), read at every request
ENV_USERNAME, ENV_PASSWORD = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"
#: what a password is shown as
REDACTED = "***"
#: ``scheme://user:password@``: the password is everything up to the ``@`` (not a space or quote)
_USERINFO = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@'\"]*):(?P<secret>[^\s@'\"]+)@"
)
#: a password given as a query parameter (``?password=...``, as libpq and SQLAlchemy accept)
_QUERY_SECRET = re.compile(r"(?P<head>[?&](?:password|passwd|pwd)=)(?P<secret>[^&\s'\"#]+)", re.I)


def redact(text: str) -> str:
    """``text`` (a URI, or a message with URIs in it) with every URI's password shown as ``***``:
    ``http://alice:S3cret@host`` -> ``http://alice:***@host``, and a ``password=`` query
    parameter the same. The user name and the host stay, so the line still says which account
    on which server. The one redaction every display and stored record goes through."""
    if not text or ("@" not in text and "=" not in text):
        return text
    text = _USERINFO.sub(lambda m: f"{m['head']}:{REDACTED}@", text)
    return _QUERY_SECRET.sub(lambda m: m["head"] + REDACTED, text)


def without_password(uri: str) -> str:
    """``uri`` with no password in it (the user stays): what a Ray job is given, so that Ray's job
    info carries none; the job's node supplies it (``PGPASSWORD``, ``~/.pgpass``, MLflow's
    variables or credentials file)."""
    uri = _USERINFO.sub(lambda m: f"{m['head']}@", uri)
    uri = _QUERY_SECRET.sub("", uri)
    return uri.replace("?&", "?").rstrip("?")


def split_userinfo(uri: str) -> tuple[str, str | None, str | None]:
    """An HTTP(S) URI without its ``user:password@``, and the (percent-decoded) user and
    password it carried (None when absent)."""
    parts = urllib.parse.urlsplit(uri)
    if "@" not in parts.netloc:
        return uri, None, None
    userinfo, host = parts.netloc.rsplit("@", 1)
    user, sep, password = userinfo.partition(":")
    bare = urllib.parse.urlunsplit(parts._replace(netloc=host))
    unquote = urllib.parse.unquote
    return bare, unquote(user) or None, unquote(password) if sep else None


def adopt_uri_credentials(uri: str) -> str:
    """An HTTP(S) tracking URI without its ``user:password@``; the user and password go into this
    process's ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``, where MLflow's client
    reads them at each request and a local Ray head the launcher starts inherits them. Nothing
    else (a job's environment, a log, a run) ever sees them. Variables already set to another
    user or password raise :class:`~gppo.errors.CredentialsRefused` (one line, no password):
    one of the two would be silently ignored."""
    if not uri.lower().startswith(("http://", "https://")):
        return uri
    bare, user, password = split_userinfo(uri)
    if user is None and password is None:
        return uri
    wanted = {ENV_USERNAME: user, ENV_PASSWORD: password}
    for name, value in wanted.items():
        have = os.environ.get(name)
        if value is not None and have and have != value:
            raise CredentialsRefused(
                f"the tracking URI {redact(uri)} carries a user and password and {name} is set "
                f"to another one: keep one of the two (the variables, with the URI written "
                f"without 'user:password@')"
            )
    for name, value in wanted.items():
        if value is not None:
            os.environ[name] = value
    return bare


def resolve_tracking_uri(uri: str | None) -> str:
    """The spec's URI, else ``MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db``; a relative
    SQLite or file path is made absolute (jobs run in another working directory); an HTTP(S)
    URI's ``user:password@`` is moved into MLflow's credential variables
    (:func:`adopt_uri_credentials`), so the URI returned carries no secret."""
    uri = adopt_uri_credentials(uri or os.environ.get(M.ENV_TRACKING_URI) or DEFAULT_URI)
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


def store_exists(uri: str) -> bool:
    """False for a local SQLite/file store that was never created (read-only commands)."""
    if uri.startswith("sqlite:///"):
        return Path(uri.removeprefix("sqlite:///")).exists()
    if uri.startswith("file://") or "://" not in uri:
        return Path(uri.removeprefix("file://")).exists()
    return True
