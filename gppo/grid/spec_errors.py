"""One-line spec errors: ``FILE: field.path: message`` (the bad value and what is allowed)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from gppo.errors import SpecError

if TYPE_CHECKING:
    from pydantic import BaseModel
    from pydantic_core import ErrorDetails


class ValidationErrors(Protocol):
    """A pydantic ``ValidationError``, or a look-alike that edits its errors."""

    def errors(self, *, include_url: bool = ...) -> list[ErrorDetails]: ...


def format_path(loc: Iterable[object]) -> str:
    """``("grid", "divergences", 2)`` -> ``grid.divergences[2]``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _message(err: Mapping[str, Any], allowed_keys: Sequence[str] | None) -> str:
    kind, msg, value = err.get("type", ""), err.get("msg", ""), err.get("input")
    if kind == "extra_forbidden":
        key = err["loc"][-1] if err.get("loc") else "?"
        allowed = f"; allowed: {', '.join(allowed_keys)}" if allowed_keys else ""
        return f"unknown key {key!r}{allowed}"
    if kind == "missing":
        return "required field is missing"
    if msg.startswith("Value error, "):
        return msg.removeprefix("Value error, ")
    if msg.startswith("Assertion failed, "):
        return msg.removeprefix("Assertion failed, ")
    return f"{msg} (got {short(value)})"


def from_validation_error(
    file: str,
    exc: ValidationErrors,
    prefix: Sequence[str | int] = (),
    model: type[BaseModel] | None = None,
    keys: Mapping[str, str] | None = None,
) -> SpecError:
    """The first error of a pydantic ``ValidationError`` as a :class:`SpecError`.

    ``keys`` maps a field of ``model`` (or of a model nested in it) to the key the file writes it
    under, e.g. ``{"settings": "local"}``: the path and an unknown key's list of allowed keys name
    the field as the file does (only where that field is meant, never inside a value)."""
    err = exc.errors(include_url=False)[0]
    loc = [p for p in err.get("loc", ()) if not _is_union_tag(p)]
    allowed = _allowed_keys(model, loc[:-1]) if err.get("type") == "extra_forbidden" else None
    if keys and model is not None:
        loc = _renamed(model, loc, keys)
        allowed = [keys.get(k, k) for k in allowed] if allowed else allowed
    return SpecError(file, format_path([*prefix, *loc]), _message(err, allowed))


def _renamed(model: Any, loc: Sequence[Any], keys: Mapping[str, str]) -> list[Any]:
    """``loc`` with each part that is a field of the model at its position named by ``keys``."""
    from typing import get_args, get_origin

    out: list[Any] = []
    ann: Any = model
    for part in loc:
        ann = _strip_optional(ann)
        if hasattr(ann, "model_fields"):
            field = ann.model_fields.get(part) if isinstance(part, str) else None
            out.append(keys.get(part, part) if field is not None else part)
            ann = field.annotation if field is not None else None
            continue
        out.append(part)
        origin = get_origin(ann)
        ann = get_args(ann)[-1] if origin in (dict, list, tuple) and get_args(ann) else None
    return out


def _is_union_tag(part: Any) -> bool:
    # pydantic inserts the member type of a union into loc, e.g. 'list[int]' or 'int'
    return isinstance(part, str) and (
        "[" in part or part in {"int", "float", "str", "bool", "none"}
    )


def _allowed_keys(model: Any, loc: Sequence[Any]) -> list[str] | None:
    """Field names of the (nested) pydantic model at ``loc``, for 'unknown key' messages."""
    from typing import get_args, get_origin

    ann: Any = model
    for part in loc:
        if hasattr(ann, "model_fields"):
            if part not in ann.model_fields:
                return None
            ann = ann.model_fields[part].annotation
            continue
        ann = _strip_optional(ann)
        origin = get_origin(ann)
        if origin in (dict, list, tuple):
            ann = get_args(ann)[-1]
        else:
            return None
    ann = _strip_optional(ann)
    return list(ann.model_fields) if hasattr(ann, "model_fields") else None


def _strip_optional(ann: Any) -> Any:
    from typing import get_args

    if hasattr(ann, "model_fields"):
        return ann
    args = [a for a in get_args(ann) if a is not type(None)]
    if len(args) == 1 and hasattr(args[0], "model_fields"):
        return args[0]
    return ann
