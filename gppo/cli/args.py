"""The positional arguments every command that takes a spec shares: ``SPEC``, then ``KEY=VALUE``
overrides (:mod:`gppo.grid.overrides`) among the command's own positionals (a cell id): a token
containing ``=`` is an override, any other is a positional, in the order typed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer

from gppo.cli.exit_codes import fail

OVERRIDES_HELP = (
    "spec overrides, KEY=VALUE with a dotted path of the spec and a YAML value, applied as "
    "edits of the file: seeds=5 local.steps=30 'grid.estimators=[mc,atomic]' (docs/"
    "configuration.md); an explicit option (--max-concurrent, --tracking-uri, ...) wins over one"
)
OverridesArg = Annotated[
    list[str] | None,
    typer.Argument(metavar="[KEY=VALUE]...", help=OVERRIDES_HELP, show_default=False),
]


def positionals(
    tokens: Sequence[str] | None, names: Sequence[str], *, required: int = 0
) -> tuple[list[str], list[str]]:
    """(the positionals, the overrides) of ``tokens``: at most ``len(names)`` positionals and at
    least ``required``; else one line naming what is missing or too many, exit 2."""
    found = [t for t in tokens or () if "=" not in t]  # gppo.grid.overrides.is_override
    overrides = [t for t in tokens or () if "=" in t]
    if len(found) > len(names):
        extra = found[len(names)]
        raise fail(
            f"unexpected argument {extra!r}: an override is KEY=VALUE"
            + (f" (this command takes {' '.join(names)})" if names else "")
        )
    if len(found) < required:
        raise fail(f"missing argument {names[len(found)]}")
    return found, overrides


def only_overrides(tokens: Sequence[str] | None) -> list[str]:
    """The overrides of a command that takes no positional after its spec."""
    return positionals(tokens, ())[1]
