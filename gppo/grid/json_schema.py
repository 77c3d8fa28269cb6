"""A JSON Schema of the grid spec for editors, generated from the settings models.

:func:`grid_spec_schema` builds it from :class:`~gppo.grid.schema.GridSpec` and each backend's
``settings_model``: the spec's fields, each backend's section under its own key (``local:``,
``verl:``, ``trl:``; in ``overrides.<cell>`` too), a section of another backend than the spec's
refused, unknown keys refused everywhere. Descriptions come from the models: a field's
``description``, else its ``#:`` comment in the source, and each model's docstring.

It checks structure only: names in registries (divergences, estimators, benchmarks), the rules
of axes and the cross-field checks stay the loader's (:func:`gppo.grid.load.load_plan`).

The package ships it as :data:`SHIPPED` (``gppo/grid/spec.schema.json``, draft-07, which YAML
editors read); ``python -m gppo.grid.json_schema`` regenerates it, ``gppo-sweep schema`` prints
it, and ``tests/grid/test_json_schema.py`` fails when the file no longer equals a fresh
generation. A spec names it on its first line::

    # yaml-language-server: $schema=../gppo/grid/spec.schema.json
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema

from gppo.cell import DEFAULT_BACKEND
from gppo.grid.schema import GridSpec

#: the schema file the package ships
SHIPPED = Path(__file__).with_name("spec.schema.json")
#: the line that points a YAML editor (yaml-language-server) at a schema
MODELINE = "# yaml-language-server: $schema="
DRAFT = "http://json-schema.org/draft-07/schema#"
#: Sphinx roles (``:class:`x```) and literals (````x````) in a docstring, shown plain
_ROLE_RE = re.compile(r":\w+:`~?([^`]+)`|``([^`]+)``")
_FIELD_RE = re.compile(r"^(\s+)(\w+)\s*:")


@cache
def field_comments(cls: type) -> dict[str, str]:
    """The ``#:`` comment above each field of ``cls`` (and of its bases) in its source."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is BaseModel or not issubclass(klass, BaseModel):
            continue
        try:
            lines = inspect.getsource(klass).splitlines()
        except (OSError, TypeError):
            continue
        pending: list[str] = []
        for line in lines[1:]:
            stripped = line.strip()
            if stripped.startswith("#:"):
                pending.append(stripped[2:].strip())
                continue
            match = _FIELD_RE.match(line)
            if match and pending and match.group(2) in inspect.get_annotations(klass):
                out[match.group(2)] = " ".join(pending)
            if not stripped.startswith("#"):
                pending = []
    return out


class _Described(GenerateJsonSchema):
    """pydantic's generator, with each field's ``#:`` comment as its description."""

    def model_schema(self, schema: Any) -> Any:
        out = super().model_schema(schema)
        comments = field_comments(schema["cls"])
        target = out
        if "$ref" in out and "properties" not in out:  # resolved later: edit the definition
            target = self.definitions.get(out["$ref"].split("/")[-1], out)
        for name, prop in target.get("properties", {}).items():
            if name in comments and "description" not in prop:
                prop["description"] = comments[name]
        return out


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON Schema (validation mode) with field comments as descriptions."""
    return model.model_json_schema(schema_generator=_Described)


def grid_spec_schema(backends: Sequence[str] | None = None) -> dict[str, Any]:
    """The grid spec's JSON Schema, each of ``backends`` (default: the built-in ones) with its
    section under its own name."""
    from gppo.backends.base import built_in_backends, get_backend

    names = list(backends if backends is not None else built_in_backends())
    schema = model_schema(GridSpec)
    defs: dict[str, Any] = schema.setdefault("$defs", {})
    sections: dict[str, Any] = {}
    for name in names:
        section = model_schema(get_backend(name).settings_model)
        for key, value in section.pop("$defs", {}).items():
            defs.setdefault(key, value)
        title = section.get("title", name)
        defs[title] = section
        sections[name] = {
            "$ref": f"#/$defs/{title}",
            "description": f"the {name} backend's own settings (backend: {name})",
        }
    _sections_for_settings(schema, sections)
    _sections_for_settings(defs["Override"], sections)
    schema["properties"]["backend"]["examples"] = names
    schema["allOf"] = [_only_own_section(name, names) for name in names]
    out = {"$schema": DRAFT, **schema}
    out["title"] = "gppo-sweep grid spec"
    out["description"] = (
        "A gppo-sweep grid spec (docs/configuration.md). Structure only: names, axes and "
        "cross-field rules are checked by `gppo-sweep plan`."
    )
    return _draft7(out)


def _sections_for_settings(model: dict[str, Any], sections: dict[str, Any]) -> None:
    """``model``'s ``settings`` property as the backends' sections, in its place."""
    props: dict[str, Any] = {}
    for key, value in model["properties"].items():
        if key == "settings":
            props.update(sections)
        else:
            props[key] = value
    model["properties"] = props


def _only_own_section(name: str, names: Sequence[str]) -> dict[str, Any]:
    """A spec of backend ``name`` (``backend`` left out: the default's) has no other section."""
    others = {
        other: {"not": {}, "description": f"the {other} section: only with backend: {other}"}
        for other in names
        if other != name
    }
    named: dict[str, Any] = {"properties": {"backend": {"const": name}}, "required": ["backend"]}
    when = (
        {"anyOf": [named, {"not": {"required": ["backend"]}}]} if name == DEFAULT_BACKEND else named
    )
    return {"if": when, "then": {"properties": others}}


def _draft7(node: Any) -> Any:
    """draft 2020-12's ``prefixItems`` (pydantic's tuples) as draft-07's ``items`` array; each
    description in one line of plain text."""
    if isinstance(node, list):
        return [_draft7(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _draft7(v) for k, v in node.items()}
    if isinstance(out.get("description"), str):
        text = _ROLE_RE.sub(lambda m: m.group(1) or m.group(2), out["description"])
        out["description"] = " ".join(text.split())
    if "prefixItems" in out:
        out["items"] = out.pop("prefixItems")
        out["additionalItems"] = False
    return out


def schema_text(schema: Mapping[str, object]) -> str:
    """The schema as the shipped file writes it."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def write_shipped() -> Path:
    """Regenerate :data:`SHIPPED` from the models (the built-in backends)."""
    SHIPPED.write_text(schema_text(grid_spec_schema()))
    return SHIPPED


if __name__ == "__main__":  # python -m gppo.grid.json_schema
    print(write_shipped())
