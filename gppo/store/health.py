"""Is the tracking store answering? A quick probe the launcher makes before it writes.

MLflow's REST client retries a failed call for about two minutes before it raises
(``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, ``..._BACKOFF_FACTOR``), which is what the cells need to
ride out a restart of the tracking server; the launcher instead asks the server's ``/health``
with a short timeout each round, so it can say at once that the server went away, hold its own
writes (submissions, the endings of runs) until it is back, and give up after
``tracking.unreachable_timeout_s``.

A server that answers but refuses the credentials (MLflow's basic auth: HTTP 401, or 403 for a
user without permission) is not an outage: :func:`named_refusals` turns MLflow's error into one
:class:`~gppo.errors.CredentialsRefused` line naming the server, at once (MLflow does not retry
a 401/403), and :func:`exit_if_refused` ends a cell's job with that line.
"""

from __future__ import annotations

import configparser
import contextlib
import errno
import logging
import os
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

from gppo.errors import CredentialsRefused
from gppo.store.uri import ENV_USERNAME, redact

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from mlflow import MlflowClient

#: Seconds the probe waits for an answer.
PROBE_TIMEOUT_S = 3.0


def tracking_unreachable(uri: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the tracking server at ``uri`` does not answer, or None when it does. Stores that are
    not HTTP servers (SQLite files, a database URL) are not probed: None."""
    if not uri.startswith(("http://", "https://")):
        return None
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout) as answer:
            if answer.status == 200:
                return None
            return f"/health answered {answer.status}"
    except urllib.error.HTTPError as exc:
        return f"/health answered {exc.code}"
    except (OSError, ValueError) as exc:  # refused, reset, timed out, DNS
        return f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"


#: what a store says when its disk is full (SQLite, PostgreSQL, the OS)
DISK_FULL_SIGNS = ("database or disk is full", "No space left on device", "could not extend file")


def is_disk_full(exc: BaseException) -> bool:
    """Whether an exception from a store write means its disk is full (ENOSPC)."""
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return True
    return any(sign in str(exc) for sign in DISK_FULL_SIGNS)


def is_unreachable_error(exc: BaseException) -> bool:
    """Whether an exception from an MLflow call means the store did not answer (as opposed to a
    refusal of the request itself)."""
    text = f"{type(exc).__name__}: {exc}"
    signs = (
        "Max retries exceeded",
        "Connection refused",
        "ConnectionError",
        "ConnectionResetError",
        "RemoteDisconnected",
        "Read timed out",
        "OperationalError",
        "503",
    )
    return isinstance(exc, OSError) or any(sign in text for sign in signs)


#: MLflow's REST client settings the launcher uses for its own calls (:func:`fail_fast`).
FAIL_FAST_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


@contextlib.contextmanager
def fail_fast(uri: str) -> Iterator[None]:
    """Within the block, this process's MLflow REST calls to ``uri`` fail at once instead of
    retrying for minutes (MLflow reads these variables at each request), so the launcher sees an
    outage that starts between its probe and its call. Variables the user set are kept; the
    launcher starts no process inside the block, so the cells keep MLflow's default retries."""
    if not uri.startswith(("http://", "https://")):
        yield
        return
    added = {k: v for k, v in FAIL_FAST_ENV.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


#: MLflow's error codes for a refused request, by HTTP status
_REFUSAL_CODES = {"UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403}


def auth_refusal(exc: BaseException) -> int | None:
    """401 or 403 when ``exc`` is a tracking server's refusal of the credentials (MLflow's
    ``UNAUTHENTICATED`` / ``PERMISSION_DENIED``), else None."""
    code = _REFUSAL_CODES.get(str(getattr(exc, "error_code", "")))
    if code is not None:
        return code
    text = str(exc)
    for status in (401, 403):
        if f"error code {status} " in text or f"status code {status}" in text:
            return status
    return None


def _account() -> str:
    """Who this process is to the tracking server: ``user 'alice'`` (MLflow's variables or its
    credentials file), ``a token`` or ``no credentials``; never the secret itself."""
    user = os.environ.get(ENV_USERNAME)
    if not user:
        try:
            from mlflow.utils.credentials import read_mlflow_creds

            user = read_mlflow_creds().username
        except (OSError, ValueError, KeyError, configparser.Error) as exc:  # an unreadable file
            log.debug("MLflow's credentials file could not be read: %s", type(exc).__name__)
            user = None
    if user:
        return f"user {user!r}"
    return "a token" if os.environ.get("MLFLOW_TRACKING_TOKEN") else ""


def refusal_error(uri: str, status: int) -> CredentialsRefused:
    """The one line for a refusal (``status`` 401 or 403) by the tracking server at ``uri``."""
    server, account = f"the tracking server at {redact(uri)}", _account()
    if status == 403:
        return CredentialsRefused(
            f"{server} refused the request of {account or 'no credentials'} (HTTP 403: no "
            "permission on the experiment or run); ask the server's admin for access"
        )
    what = f"the credentials of {account}" if account else "a request without credentials"
    return CredentialsRefused(
        f"{server} refused {what} (HTTP 401); set "
        "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN, or "
        "~/.mlflow/credentials) to an account of that server"
    )


@contextlib.contextmanager
def named_refusals(uri: str) -> Iterator[None]:
    """Within the block, a tracking server's 401/403 raises :func:`refusal_error`'s one line."""
    try:
        yield
    except CredentialsRefused:
        raise
    except Exception as exc:
        status = auth_refusal(exc)
        if status is None:
            raise
        raise refusal_error(uri, status) from None


class RefusalNamingClient:
    """An ``MlflowClient`` whose every call turns a 401/403 into :func:`refusal_error`'s line
    (attributes and other errors pass through unchanged)."""

    def __init__(self, client: Any, uri: str) -> None:
        self._client, self._uri = client, uri

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with named_refusals(self._uri):
                return attr(*args, **kwargs)

        return call


def refusal_naming_client(uri: str) -> MlflowClient:
    """An ``MlflowClient`` on ``uri`` wrapped in :class:`RefusalNamingClient` (typed as the client
    it stands for: it forwards every attribute)."""
    from mlflow import MlflowClient

    return cast("MlflowClient", RefusalNamingClient(MlflowClient(tracking_uri=uri), uri))


#: how a cell's job begins the line it ends with when the tracking server refuses its node
CELL_REFUSED = "cannot log to MLflow from this node:"


def failure_line(failure: str) -> str:
    """The line that says why an attempt failed, from its ``gppo.failure`` tag (the launcher's note,
    then the job log's last lines): the note, with the job's own :data:`CELL_REFUSED` line
    after it when the job ended with one."""
    lines = failure.strip().split("\n")
    refused = next(
        (ln.strip() for ln in reversed(lines) if ln.strip().startswith(CELL_REFUSED)), ""
    )
    return f"{lines[0]}: {refused}" if refused else lines[0]


#: MLflow's words for a refused request, in a job log (a refusal after the job's first read)
_REFUSED_IN_LOG = re.compile(r"\b(UNAUTHENTICATED|PERMISSION_DENIED)\b|error code (401|403)\b")


def node_refusal(failure: str) -> str:
    """The line of an attempt's failure tag (its note, then its job log's tail) that says the
    tracking server refused the cell's node (the job's :data:`CELL_REFUSED` line, else MLflow's
    401/403 error), or ``""``. Such a failure is the setup's, not the attempt's: a retry would
    be refused the same way."""
    lines = [ln.strip() for ln in failure.strip().split("\n")[1:] if ln.strip()]
    for line in reversed(lines):
        if line.startswith(CELL_REFUSED):
            return line
    return next((ln[:300] for ln in reversed(lines) if _REFUSED_IN_LOG.search(ln)), "")


def what_to_grant(refusal: str, experiment: str, experiment_id: str) -> str:
    """What to do about a node's :func:`node_refusal` line, in one sentence: for a 403, the
    permission the node's account needs on the sweep's experiment (MLflow's basic auth); for a
    401, the credentials the node lacks."""
    if "403" in refusal or "PERMISSION_DENIED" in refusal:
        found = re.search(r"of (user '[^']*')", refusal)
        who = found.group(1) if found else "the node's account"
        return (
            f"grant {who} EDIT on experiment {experiment!r} (id {experiment_id}) on the tracking "
            'server, or on every experiment through a role (docs/cluster-guide.md, "A node '
            'account"), then launch again'
        )
    return (
        "give the node an account of the tracking server (MLFLOW_TRACKING_USERNAME and "
        "MLFLOW_TRACKING_PASSWORD in the environment `ray start` runs in, or ~/.mlflow/"
        "credentials on the node), then launch again"
    )


def exit_if_refused(
    client: MlflowClient | RefusalNamingClient, uri: str | None, run_id: str
) -> None:
    """In a cell's job: read the run the launcher made for it once; if the tracking server refuses
    this node's credentials, end the process with the one line (exit 1, no stack trace), which
    the launcher records as the attempt's failure."""
    try:
        with named_refusals(uri or "(MLflow's default)"):
            client.get_run(run_id)
    except CredentialsRefused as exc:
        sys.exit(f"{CELL_REFUSED} {exc}")
