"""``gppo-sweep``, the command line: a thin typer app over the library (the top layer).

:mod:`.app` holds the app and the sweep commands (plan, launch, status, logs, cancel, ui,
check); :mod:`.report`, :mod:`.tune` and :mod:`.data` the report, tuning and verl data commands.
"""

from gppo.cli.app import app, main

__all__ = ["app", "main"]
