"""The MLflow server app of ``gppo-sweep ui``: MLflow's app, with ``/`` sent to the sweep.

Registered as the ``mlflow.app`` plugin ``gppo-sweep`` and served by ``mlflow server --app-name
gppo-sweep`` (uvicorn); ``GPPO_UI_HOME`` (set by ``gppo-sweep ui``) is where a bare ``GET /``
redirects: the sweep's runs, see :func:`gppo.sweep.ui.runs_url`.
"""

from __future__ import annotations

import os
from typing import Any

from mlflow.server.fastapi_app import app as mlflow_app

from gppo.sweep.ui import ENV_HOME


class HomeRedirect:
    """ASGI middleware: a bare ``GET /`` answers 302 to ``home`` (when set)."""

    def __init__(self, inner: Any, home: str | None) -> None:
        self.inner, self.home = inner, home

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if (
            self.home
            and scope.get("type") == "http"
            and scope.get("path") == "/"
            and not scope.get("query_string")
        ):
            await send(
                {
                    "type": "http.response.start",
                    "status": 302,
                    "headers": [(b"location", self.home.encode()), (b"content-length", b"0")],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        await self.inner(scope, receive, send)


#: the ``mlflow.app`` plugin (``gppo-sweep = gppo.sweep.ui_app:app``): MLflow's own app
app = HomeRedirect(mlflow_app, os.environ.get(ENV_HOME) or None)
