"""A launch's output is its own: MLflow's INFO lines and "View run" prints are off during it."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

#: MLflow output a launch does not show: its INFO lines ("Creating initial MLflow database
#: tables", alembic's migrations); and (this variable) the "View run" / "View experiment" lines
#: it prints at each run's end against a tracking server (each costing a request)
QUIET_LOGGERS = ("mlflow", "alembic")
ENV_NO_RUN_URLS = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"


@contextlib.contextmanager
def quiet_mlflow() -> Iterator[None]:
    """MLflow's INFO lines and "View run" prints off for the duration; WARNING and up remain."""
    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    levels = [lg.level for lg in loggers]
    before = os.environ.get(ENV_NO_RUN_URLS)
    for lg in loggers:
        lg.setLevel(max(lg.getEffectiveLevel(), logging.WARNING))
    os.environ[ENV_NO_RUN_URLS] = "true"
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
        if before is None:
            os.environ.pop(ENV_NO_RUN_URLS, None)
        else:
            os.environ[ENV_NO_RUN_URLS] = before
