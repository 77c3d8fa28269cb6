"""``gppo-sweep``, the command line: a thin typer app over the library (the top layer).

:mod:`.app` holds the app and the sweep commands (plan, check, launch, status, logs, cancel,
ui); :mod:`.report` holds ``report`` and ``regions``, :mod:`.tune` ``tune``, :mod:`.data`
``data prepare`` (for any backend, through its ``prepare_data`` hook); :mod:`.errors` turns an
error into one line and its exit code.
"""

from gppo.cli.app import app, main

__all__ = ["app", "main"]
