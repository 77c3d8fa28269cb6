"""How the CLI turns an error into a line on stderr and an exit code (:func:`command` wraps every
command; ``tune``, ``report`` and ``launch`` also map their own outcomes, a failed study or cell,
to these codes).

Codes (from :mod:`gppo.errors`): 0 done; 1 something ran and failed (a cell, a study, a busy
sweep); 2 bad input, nothing started (a spec, a name, a flag, a store the cluster cannot reach);
130 interrupted. Every :class:`~gppo.errors.GppoError` a command lets through is printed as its
one line and exits with its class's code; no traceback.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from gppo.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, GppoError, exit_code
from gppo.store.uri import redact

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_USAGE", "fail", "one_line_errors"]


def fail(error: str | BaseException, code: int | None = None) -> typer.Exit:
    """Write ``error`` as one line on stderr; the :class:`typer.Exit` to raise.

    ``code`` defaults to the error's own (:func:`gppo.errors.exit_code`), or 2 for a message.
    A URI's password in it (a failed connection's message quotes its URL) is shown as ``***``."""
    line = redact(str(error))
    sys.stderr.write(line.rstrip("\n") + "\n")
    if code is None:
        code = exit_code(error) if isinstance(error, BaseException) else EXIT_USAGE
    return typer.Exit(code)


def one_line_errors(fn: F) -> F:
    """Wrap a command so that a :class:`GppoError` ends it with :func:`fail`."""

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except GppoError as exc:
            raise fail(exc) from None

    return command  # type: ignore[return-value]  # wraps() keeps fn's signature
