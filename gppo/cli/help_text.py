"""A command's help as flowing text: its docstring's paragraphs with their lines joined, so the
help wraps at the terminal's width, not at the docstring's hard line breaks (typer's rich help
keeps a docstring's single line breaks in the command list)."""

from __future__ import annotations

import inspect

#: click's mark for a paragraph to print as written (no rewrapping)
VERBATIM = "\b"


def flowing(doc: str | None) -> str | None:
    """``doc`` dedented, each paragraph (blank-line separated) one line, except a paragraph that
    starts with click's ``\\b`` mark, kept as written."""
    if not doc:
        return doc
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(
        p if p.startswith(VERBATIM) else " ".join(line.strip() for line in p.splitlines())
        for p in paragraphs
    )
