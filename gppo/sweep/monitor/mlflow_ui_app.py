"""The MLflow server app of ``gppo-sweep ui``: MLflow's app, with ``/`` sent to the sweep.

Registered as the ``mlflow.app`` plugin ``gppo-sweep`` and served by ``mlflow server --app-name
gppo-sweep`` (uvicorn); ``GPPO_UI_HOME`` (set by ``gppo-sweep ui``) is where a bare ``GET /``
leads: the sweep's runs, see :func:`gppo.sweep.monitor.mlflow_ui.runs_url`. A server cannot redirect on the
URL's fragment (the browser never sends it), so ``/`` answers a three-line page whose script
picks the target: the sweep's runs for ``/``, the same route for a deep link ``/#/...``.
"""

from __future__ import annotations

import os
from typing import Any

from gppo.sweep.monitor.mlflow_ui import ENV_HOME

#: served at a bare ``/``: the browser (which alone knows the URL's fragment) goes on to the
#: sweep's runs, or, for a deep link ``/#/...``, to that same route; ``/?gppo-sweep`` is MLflow's
#: own page
INTERSTITIAL = """<!doctype html>
<html><head><meta charset="utf-8"><title>MLflow: sweep</title>
<noscript><meta http-equiv="refresh" content="0; url={home}"></noscript>
<script>
var h = window.location.hash;
window.location.replace(h && h !== "#" && h !== "#/" ? "{base}" + h : {home_js});
</script></head><body><a href="{home}">the sweep's runs</a></body></html>
"""


class HomeRedirect:
    """ASGI middleware: a bare ``GET /`` answers :data:`INTERSTITIAL`, which sends the browser
    to ``home`` (when set; ``/#/route`` links keep their route)."""

    def __init__(self, inner: Any, home: str | None) -> None:
        self.inner, self.home = inner, home
        if home:
            import html
            import json

            base = home.split("#", 1)[0]
            page = INTERSTITIAL.format(home=html.escape(home), base=base, home_js=json.dumps(home))
            self.body = page.encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if (
            self.home
            and scope.get("type") == "http"
            and scope.get("method") in ("GET", "HEAD")
            and scope.get("path") == "/"
            and not scope.get("query_string")
        ):
            headers = [
                (b"content-type", b"text/html; charset=utf-8"),
                (b"content-length", str(len(self.body)).encode()),
                (b"cache-control", b"no-store"),
            ]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            body = self.body if scope.get("method") == "GET" else b""
            await send({"type": "http.response.body", "body": body})
            return
        await self.inner(scope, receive, send)


def app() -> HomeRedirect:
    """The ``mlflow.app`` plugin (``gppo-sweep = gppo.sweep.monitor.mlflow_ui_app:app``), a factory: ``mlflow
    server`` imports this module to inspect it, and only uvicorn's worker builds MLflow's app."""
    from gppo.store.tracking import server_app

    return HomeRedirect(server_app(), os.environ.get(ENV_HOME) or None)
