"""Spec overrides on the command line: ``KEY=VALUE`` tokens applied to a spec's YAML shape as edits
of its file (pure, no I/O).

``gppo-sweep launch grid.yaml seeds=5 local.steps=30 'grid.estimators=[mc,atomic]'``: ``KEY`` is
a dotted path into the spec as its file writes it (any section: ``seeds``, ``grid``, ``ray``,
``tracking``, the backend's own section ``local:``/``verl:``/``trl:``, ``overrides.<cell>``,
``axes.<dotted path>``, ...); ``VALUE`` is parsed as YAML (``30`` an int, ``[mc, atomic]`` a
list, ``null`` None, ``{min: 2}`` a mapping). Each override sets the value at its path, in the
order given: a mapping replaces what was there, as an edit of the file would; a path through a
value that is not a mapping makes it one.

A path is checked against the spec's own models before anything else: an unknown field is one
line naming the override (``override 'local.stepz=30': unknown field local.stepz; allowed:
...``). The edited spec is then validated by the loader as the file would be, and an error at (or
under, or above) an override's path names that override instead of the file (:func:`attributed`).

verl's own Hydra keys (``trainer.n_gpus_per_node=8``, ``actor_rollout_ref.actor.optim.lr=1e-6``,
``+trainer.x=1``: a root of :data:`VERL_HYDRA_ROOTS`) are not spec paths: with ``backend: verl``
the token is appended as written to the section's ``extra_overrides`` (verl's pass-through,
applied last, so it wins over the cell's own overrides); with any other backend it is refused.
"""

from __future__ import annotations

import contextlib
import copy
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

from gppo.cell import DEFAULT_BACKEND
from gppo.grid.schema import GridSpec, Override
from gppo.grid.spec_errors import SpecError, format_path, short

#: the roots of verl's own Hydra config (``verl/trainer/config/ppo_trainer.yaml``)
VERL_HYDRA_ROOTS = (
    "actor_rollout_ref",
    "algorithm",
    "critic",
    "custom_reward_function",
    "data",
    "distillation",
    "global_profiler",
    "ray_init",
    "ray_kwargs",
    "reward",
    "reward_model",
    "sandbox_fusion",
    "trainer",
    "transfer_queue",
)
#: the backend whose section passes Hydra overrides through, and the field that holds them
HYDRA_BACKEND, HYDRA_FIELD = "verl", "extra_overrides"
#: the field of :class:`GridSpec` and :class:`Override` that the file writes as the backend's name
SETTINGS = "settings"
_HINT = (
    f"verl's own Hydra keys (trainer.n_gpus_per_node=8, ...) go to {HYDRA_BACKEND}.{HYDRA_FIELD} "
    f"with backend: {HYDRA_BACKEND}"
)


@dataclass(frozen=True)
class SpecOverride:
    """One ``KEY=VALUE`` token: as typed, the keys it sets in the YAML shape (a dotted axis path
    or cell id stays one key) and its value; ``hydra``: a verl Hydra key passed through."""

    text: str
    keys: tuple[str, ...]
    value: Any
    hydra: bool = False

    @property
    def path(self) -> str:
        """The keys as an error path writes them (``local.steps``, ``axes.local.lr``)."""
        return format_path(self.keys)


def is_override(token: str) -> bool:
    """A command-line token is an override when it contains ``=``."""
    return "=" in token


def split_args(tokens: Sequence[str]) -> tuple[list[str], list[str]]:
    """(positional arguments, overrides) of a command's tokens, each in its order."""
    return [t for t in tokens if not is_override(t)], [t for t in tokens if is_override(t)]


def label(text: str) -> str:
    """How an error names an override: ``override 'local.steps=30'``."""
    return f"override {text!r}"


class _Unknown(Exception):
    """A path part that is not a field where it stands: the path so far and what is allowed."""

    def __init__(self, where: str, allowed: Sequence[str], why: str = "") -> None:
        super().__init__(where)
        self.where, self.allowed, self.why = where, list(allowed), why


def _strip(ann: Any) -> Any:
    """``ann`` without ``Annotated`` and ``None`` (a member of an Optional)."""
    while get_origin(ann) is typing.Annotated:
        ann = get_args(ann)[0]
    if get_origin(ann) in (Union, types.UnionType):
        args = [a for a in get_args(ann) if a is not type(None)]
        if len(args) == 1:
            return _strip(args[0])
    return ann


def _is_model(ann: Any) -> bool:
    return isinstance(ann, type) and issubclass(ann, BaseModel)


class _Shape:
    """The fields of a model as the file writes them: :class:`GridSpec`'s and an
    :class:`Override`'s ``settings`` under the backend's name, with its settings model."""

    def __init__(self, backend: str, settings_model: Any) -> None:
        self.backend, self.settings_model = backend, settings_model

    def fields(self, model: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, field in model.model_fields.items():
            if name == SETTINGS and model in (GridSpec, Override):
                out[self.backend] = self.settings_model
            else:
                out[name] = field.annotation
        return out

    def walk(self, ann: Any, parts: list[str], i: int, where: str) -> list[str]:
        """The keys ``parts[i:]`` name below a value of type ``ann`` (raises :class:`_Unknown`)."""
        if i == len(parts):
            return []
        ann = _strip(ann)
        name = parts[i]
        here = f"{where}.{name}" if where else name
        if ann is Any or ann is object:
            return parts[i:]
        if _is_model(ann):
            fields = self.fields(ann)
            if name not in fields:
                raise _Unknown(here, list(fields))
            return [name, *self.walk(fields[name], parts, i + 1, here)]
        origin = get_origin(ann)
        if origin in (Union, types.UnionType):
            members = [_strip(a) for a in get_args(ann)]
            for member in members:
                if _is_model(member) and name in self.fields(member):
                    return self.walk(member, parts, i, where)
            for member in members:
                if get_origin(member) is dict:
                    return self.walk(member, parts, i, where)
            allowed = [f for m in members if _is_model(m) for f in self.fields(m)]
            raise _Unknown(here, allowed, "" if allowed else _not_mapping(where, ann))
        if origin is dict:
            value = get_args(ann)[1] if get_args(ann) else Any
            return self._dict_keys(value, parts, i, where)
        raise _Unknown(here, [], _not_mapping(where, ann))

    def _dict_keys(self, value: Any, parts: list[str], i: int, where: str) -> list[str]:
        """A mapping's key is one part, or several joined by dots (an axis path, a cell id such
        as ``alpha0.5-mc``): the fewest parts after which the rest is a path into ``value``;
        below a value of no fields (a number, a list, Any) the whole rest is the key."""
        if _strip(value) is Any or not self._structured(value):
            return [".".join(parts[i:])]
        for j in range(i + 1, len(parts) + 1):
            key = ".".join(parts[i:j])
            try:
                return [key, *self.walk(value, parts, j, f"{where}.{key}")]
            except _Unknown:
                continue
        return [".".join(parts[i:])]

    def _structured(self, ann: Any) -> bool:
        ann = _strip(ann)
        if _is_model(ann) or get_origin(ann) is dict:
            return True
        if get_origin(ann) in (Union, types.UnionType):
            return any(self._structured(a) for a in get_args(ann))
        return False


def _not_mapping(where: str, ann: Any) -> str:
    kind = getattr(get_origin(ann) or ann, "__name__", str(ann))
    return f"{where} is a {kind}, not a mapping: set it whole ({where}=...)"


def parse(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` -> (key, the value parsed as YAML); raises :class:`SpecError`."""
    import yaml

    key, _, raw = text.partition("=")
    key = key.strip()
    if not key or any(not p for p in key.lstrip("+~").split(".")):
        raise SpecError(label(text), "", f"{short(key)} is not a dotted path (KEY=VALUE)")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(label(text), key, f"the value is not YAML: {problem}") from None
    return key, value


def resolve(
    texts: Sequence[str],
    raw: Mapping[str, object],
    *,
    roots: Mapping[str, object] | None = None,
    forbidden: Mapping[str, str] | None = None,
) -> list[SpecOverride]:
    """Parse and check ``texts`` against the spec ``raw`` (its YAML shape); raises
    :class:`SpecError` naming the first override that is not a path of the spec.

    ``roots``: top-level keys to check against models of their own instead of the grid spec's
    (a tuning spec's ``tune``); ``forbidden``: top-level keys refused, with why."""
    from gppo.backends.base import get_backend

    parsed = [(text, *parse(text)) for text in texts]
    backend = raw.get("backend", DEFAULT_BACKEND) if isinstance(raw, Mapping) else DEFAULT_BACKEND
    for _text, key, value in parsed:  # an override of the backend names the section
        if key == "backend":
            backend = value
    if not isinstance(backend, str):
        return [SpecOverride(t, tuple(k.split(".")), v) for t, k, v in parsed]  # loader says why
    try:
        settings_model: Any = get_backend(backend).settings_model
    except Exception:  # an unknown backend: the loader's own error names it
        settings_model = dict[str, Any]
    shape = _Shape(backend, settings_model)
    top = {**shape.fields(GridSpec), **(roots or {})}
    for name in forbidden or {}:
        top.pop(name, None)
    out = []
    for text, key, value in parsed:
        parts = key.lstrip("+~").split(".")
        if forbidden and parts[0] in forbidden:
            raise SpecError(label(text), "", f"{parts[0]}: {forbidden[parts[0]]}")
        if parts[0] not in top and parts[0] in VERL_HYDRA_ROOTS:
            if backend != HYDRA_BACKEND:
                raise SpecError(
                    label(text), "", f"{parts[0]} is one of verl's own Hydra keys, not a spec "
                    f"path: it goes to {HYDRA_BACKEND}.{HYDRA_FIELD} with backend: "
                    f"{HYDRA_BACKEND} (this spec's backend is {backend})",
                )  # fmt: skip
            out.append(SpecOverride(text, (HYDRA_BACKEND, HYDRA_FIELD), text, hydra=True))
            continue
        if key.startswith(("+", "~")):
            raise SpecError(label(text), "", f"{key[0]!r} is Hydra's syntax; a spec path is "
                            "set as KEY=VALUE")  # fmt: skip
        try:
            if parts[0] not in top:
                raise _Unknown(parts[0], list(top))
            keys = [parts[0], *shape.walk(top[parts[0]], parts, 1, parts[0])]
        except _Unknown as exc:
            raise SpecError(label(text), "", _unknown_text(exc)) from None
        out.append(SpecOverride(text, tuple(keys), value))
    return out


def _unknown_text(exc: _Unknown) -> str:
    if exc.why:
        return exc.why
    allowed = ", ".join(exc.allowed)
    hint = f" ({_HINT})" if "." not in exc.where else ""
    return f"unknown field {exc.where}; allowed: {allowed}{hint}"


def apply(raw: Mapping[str, object], overrides: Sequence[SpecOverride]) -> dict[str, Any]:
    """A copy of ``raw`` with every override set in order (the spec as the edited file holds
    it); a Hydra key is appended to the verl section's ``extra_overrides``."""
    out: dict[str, Any] = copy.deepcopy(dict(raw))
    for o in overrides:
        node = out
        for key in o.keys[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        last = o.keys[-1]
        if o.hydra:
            before = node.get(last)
            node[last] = [*(before if isinstance(before, list) else []), o.value]
        else:
            node[last] = copy.deepcopy(o.value)
    return out


def apply_texts(
    raw: Mapping[str, object],
    texts: Sequence[str],
    *,
    roots: Mapping[str, object] | None = None,
    forbidden: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], list[SpecOverride]]:
    """:func:`resolve` then :func:`apply`: (the edited spec, the overrides)."""
    found = resolve(texts, raw, roots=roots, forbidden=forbidden)
    return apply(raw, found), found


def blame(err: SpecError, overrides: Sequence[SpecOverride]) -> SpecError:
    """``err`` naming the override it comes from (the last one whose path is the error's, or
    under or above it); an error no override explains keeps its file and says the overrides."""
    if not overrides or err.file.startswith("override "):
        return err
    for o in reversed(overrides):
        path = o.path
        if not err.path or not path:
            continue
        if (
            err.path == path
            or err.path.startswith((f"{path}.", f"{path}["))
            or (path.startswith(f"{err.path}."))
        ):
            return type(err)(label(o.text), err.path, err.message)
    texts = " ".join(o.text for o in overrides)
    return type(err)(f"{err.file} (with overrides {texts})", err.path, err.message)


@contextlib.contextmanager
def attributed(overrides: Sequence[SpecOverride]) -> Iterator[None]:
    """A :class:`SpecError` raised inside names the override it comes from (:func:`blame`)."""
    try:
        yield
    except SpecError as err:
        raise blame(err, overrides) from None


def texts_of(overrides: Sequence[SpecOverride]) -> tuple[str, ...]:
    """The overrides as typed."""
    return tuple(o.text for o in overrides)
