"""The base models shipped with the package: each domain's default, and the exploration family.

``base_models/base-<domain>.pt`` holds the default base's ``state_dict`` (float16, about 0.8 MB)
and its warm-start key; ``base-<domain>.json`` holds the key's hash, how it was built, and its own
avg@8 per benchmark as measured when it was shipped. The exploration family
(docs/studies/exploration.md) ships beside it as ``base-<domain>-<setting><value>.pt`` /
``.json``: the same recipe with one warm-start setting changed (``warmstart_target``). The
tempered family (docs/studies/rare-learnable.md) ships no file of its own: each level is the
default file at a temperature (:mod:`.tempered`), its records in ``tempered-<domain>.json``.
:func:`shipped_file` is what :func:`~gppo.testbed.warmstart.load_base_model` consults
first: a spec whose base-model settings hash to a shipped key trains from that file and builds
nothing.

Rebuild and re-ship a base with :mod:`.ship` (then commit both files)::

    python -m gppo.testbed.make_shipped_base --domain math
    python -m gppo.testbed.make_shipped_base --domain math --set warmstart_target=0.1
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gppo.cell import DEFAULT_EVAL_K

SHIPPED_DIR = Path(__file__).with_name("base_models")
#: the evaluation the record is taken with (the spec defaults: avg@k with the default k, the
#: testbed's eval seed RL.eval_seed)
RECORD_K = DEFAULT_EVAL_K


def base_name(domain: str, changed: Mapping[str, object] | None = None) -> str:
    """``base-math`` for the default; ``base-math-target0.1`` with ``warmstart_target=0.1``."""
    parts = [f"base-{domain}"]
    for key, value in sorted((changed or {}).items()):
        parts.append(f"{key.removeprefix('warmstart_')}{value}")
    return "-".join(parts)


def record_path(domain: str, changed: Mapping[str, object] | None = None) -> Path:
    return SHIPPED_DIR / f"{base_name(domain, changed)}.json"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def shipped_record(
    domain: str, changed: Mapping[str, object] | None = None
) -> dict[str, Any] | None:
    """A shipped base's record (key hash, build, avg@8 per benchmark), or None: the domain's
    default, or the family member with the warm-start settings ``changed``."""
    return _read(record_path(domain, changed))


def shipped_records(domain: str) -> list[dict[str, Any]]:
    """Every shipped base of ``domain``: the default first, then the family by file name."""
    paths = sorted(
        SHIPPED_DIR.glob(f"base-{domain}*.json"), key=lambda p: (p.stem != f"base-{domain}", p.name)
    )
    return [rec for rec in map(_read, paths) if rec is not None and rec.get("domain") == domain]


def shipped_file(domain: str, key_hash: str) -> Path | None:
    """The shipped ``state_dict`` file whose warm-start key hashes to ``key_hash``, if any."""
    for rec in shipped_records(domain):
        if rec.get("hash") == key_hash:
            path = SHIPPED_DIR / rec["file"]
            return path if path.exists() else None
    return None
