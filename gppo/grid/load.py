"""Read a grid spec file: safe YAML -> :class:`GridSpec`, every error one :class:`SpecError` line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gppo.grid.errors import SpecError, from_validation_error
from gppo.grid.schema import GridSpec


def _move_section(raw: dict[str, Any], backend: Any, file: str, where: str) -> dict[str, Any]:
    """Move the backend's own section (``local:``) into ``settings`` (it must be a mapping)."""
    raw = dict(raw)
    if "settings" in raw:
        key = backend if isinstance(backend, str) else "<backend>"
        raise SpecError(
            file, f"{where}settings", f"unknown key 'settings'; write the section as {key!r}"
        )
    if isinstance(backend, str) and backend in raw:
        section = raw.pop(backend)
        if section is None:
            section = {}
        if not isinstance(section, dict):
            raise SpecError(
                file,
                f"{where}{backend}",
                f"must be a mapping of backend settings (got {type(section).__name__})",
            )
        raw["settings"] = section
    return raw


def parse_spec(raw: Any, file: str = "<spec>") -> GridSpec:
    """Validate already-parsed YAML (a mapping) into a :class:`GridSpec`."""
    from pydantic import ValidationError

    if not isinstance(raw, dict):
        raise SpecError(file, "", f"the spec must be a YAML mapping (got {type(raw).__name__})")
    for key in raw:
        if not isinstance(key, str):
            raise SpecError(file, "", f"keys must be strings (got {key!r})")
    backend = raw.get("backend", "local")
    raw = _move_section(raw, backend, file, "")
    overrides = raw.get("overrides")
    if isinstance(overrides, dict):
        fixed = {}
        for key, value in overrides.items():
            if isinstance(value, dict):
                value = _move_section(value, backend, file, f"overrides.{key}.")
            fixed[key] = value
        raw["overrides"] = fixed
    try:
        spec = GridSpec.model_validate(raw)
    except ValidationError as exc:
        err = from_validation_error(file, exc, model=GridSpec)
        # the backend section is stored as 'settings': name it as the user wrote it
        msg = re.sub(r"\bsettings\b", str(backend), err.message)
        path = re.sub(r"\bsettings\b", str(backend), err.path)
        raise SpecError(file, path, msg) from None
    return spec


def load_spec(path: str | Path) -> GridSpec:
    """Load and validate the spec file at ``path`` (no other I/O)."""
    import yaml

    file = str(path)
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise SpecError(file, "", "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(
            file, "", f"cannot read the file ({exc.__class__.__name__}: {exc})"
        ) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(file, "", f"invalid YAML at {where}: {problem}") from None
    if raw is None:  # nothing but blank lines or comments
        raise SpecError(
            file, "", "the file is empty" + ("" if not text.strip() else " (comments only)")
        )
    return parse_spec(raw, file)
