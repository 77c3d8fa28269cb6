"""Talk to a Ray cluster's HTTP API (its dashboard: ``/api/version``, the Jobs API) with Ray's
own token authentication; the one place gppo-sweep does so (the readiness probe, every Jobs API
client, the test fixtures).

Ray 2.60's token auth: a cluster started with ``RAY_AUTH_MODE=token`` (or, by ``ray start --head``
with the mode unset, whenever a token is found) answers 401 to a request without the header
``authorization: Bearer <token>``. The token comes from ``RAY_AUTH_TOKEN``, else the file
``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token`` (which a plain ``ray.init()`` writes); Ray's
own C++ ``AuthenticationTokenLoader`` reads them, and so does :func:`token_header`. Ray's
``JobSubmissionClient`` adds the header itself only when *this* process runs with
``RAY_AUTH_MODE=token``; so here the cluster is asked (``/api/authentication_mode``, which Ray
serves without auth) and the token is sent when the cluster says ``token``, or when that cannot be
asked and this process has ``RAY_AUTH_MODE=token``.

A GET of the Jobs API (a job's status, the list of all jobs the launcher reads each round,
the version check) times out after :data:`REQUEST_TIMEOUT_S` (Ray's client sets no timeout, so a
head that accepts connections but never answers would hang the launcher); submissions, stops and
logs keep Ray's behaviour.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ray.job_submission import JobSubmissionClient

log = logging.getLogger(__name__)

#: Ray's environment variable for the auth mode (``token`` | ``disabled``)
ENV_AUTH_MODE = "RAY_AUTH_MODE"
#: served by the dashboard without authentication: ``{"authentication_mode": "token"}``
AUTH_MODE_PATH = "/api/authentication_mode"
#: seconds a Jobs API GET (a job's status) may take before it counts as no answer
REQUEST_TIMEOUT_S = 30.0
#: what a Jobs API call raises when the cluster does not answer (requests' errors are OSErrors)
#: or refuses the request (Ray raises RuntimeError for an HTTP error status, e.g. an unknown job);
#: a refused token (Ray's AuthenticationError) is not among them: it always propagates
JOBS_API_ERRORS: tuple[type[Exception], ...] = (OSError, RuntimeError)


def token_header() -> dict[str, str]:
    """``{"authorization": "Bearer <token>"}`` with the token Ray itself would use
    (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``); ``{}`` when there is
    none. Raises Ray's ``AuthenticationError`` when ``RAY_AUTH_TOKEN_PATH`` names no readable
    file. Ray caches a token it found (per process) until its loader's ``reset_cache()``."""
    from ray._raylet import (  # type: ignore[attr-defined]  # compiled; ray's _raylet.pyi omits it
        AuthenticationTokenLoader,
    )

    loader = AuthenticationTokenLoader.instance()
    return dict(loader.get_token_for_http_header(ignore_auth_mode=True))


def head_auth_mode() -> str:
    """The auth mode ``ray start --head`` picks in this environment (``token`` | ``disabled``):
    ``RAY_AUTH_MODE`` when set, else ``token`` when a token is found (Ray 2.60's
    ``maybe_enable_token_auth_if_token_available``, without its side effects)."""
    mode = os.environ.get(ENV_AUTH_MODE)
    if mode is not None:
        return mode.lower()
    from ray._raylet import (  # type: ignore[attr-defined]  # compiled; ray's _raylet.pyi omits it
        AuthenticationTokenLoader,
    )

    found = AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True)
    return "token" if found else "disabled"


def _open(url: str, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:  # 4xx/5xx: an answer all the same
        return err.code, err.read()


def cluster_auth_mode(address: str, timeout: float = 2.0) -> str | None:
    """What the cluster at ``address`` (``http://host:port``) says its auth mode is: ``token``,
    ``disabled`` (also for a Ray older than token auth, which has no such page), or None when
    it does not answer."""
    try:
        status, body = _open(f"{address.rstrip('/')}{AUTH_MODE_PATH}", {}, timeout)
    except (OSError, ValueError):
        return None
    if status == 404:
        return "disabled"
    if status != 200:
        return None
    try:
        return str(json.loads(body)["authentication_mode"]).lower()
    except (ValueError, KeyError, TypeError):
        return None


def auth_headers(address: str, timeout: float = 2.0) -> dict[str, str]:
    """The headers a request to ``address`` needs: the token when the cluster has auth on (or
    cannot say and this process has ``RAY_AUTH_MODE=token``), else ``{}``."""
    mode = cluster_auth_mode(address, timeout)
    if mode is None:
        mode = os.environ.get(ENV_AUTH_MODE, "").lower()
    return token_header() if mode == "token" else {}


def get(address: str, path: str, timeout: float = 2.0) -> tuple[int, bytes]:
    """``GET address+path`` with the headers :func:`auth_headers` gives: (status, body);
    raises ``OSError`` when the server does not answer."""
    headers = auth_headers(address, timeout)
    return _open(f"{address.rstrip('/')}{path}", headers, timeout)


def reachable(address: str, timeout: float = 2.0) -> bool:
    """True when the cluster's Jobs API answers ``/api/version`` (authenticated) with 200."""
    try:
        return get(address, "/api/version", timeout)[0] == 200
    except (OSError, ValueError) as exc:  # no answer (URLError is an OSError), a malformed
        # address, a token file that cannot be read: not reachable, and the log says why
        log.debug("the Ray cluster at %s is not reachable: %s", address, exc)
        return False


def job_client(address: str, *, timeout_s: float = REQUEST_TIMEOUT_S) -> JobSubmissionClient:
    """A ``ray.job_submission.JobSubmissionClient`` for ``address`` that sends the token when
    the cluster needs it and gives up on a status GET after ``timeout_s``. Raises ``OSError``
    (``ConnectionError``, a timeout) when the cluster does not answer."""
    from ray.job_submission import JobSubmissionClient

    class _Client(JobSubmissionClient):
        def _do_request(self, method: str, endpoint: str, **kwargs: Any) -> Any:
            if method.upper() == "GET" and not endpoint.endswith("/logs"):
                kwargs.setdefault("timeout", timeout_s)
            return super()._do_request(method, endpoint, **kwargs)

    return _Client(address, headers=auth_headers(address))
