"""``python -m gppo.cli``: the same as the ``gppo-sweep`` command."""

from gppo.cli.app import app

app()
