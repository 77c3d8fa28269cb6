"""The base models shipped with the package: one per domain, for the default settings.

``base_models/base-<domain>.pt`` holds the ``state_dict`` (float16, about 0.8 MB) and its
warm-start key; ``base-<domain>.json`` holds the key's hash, how it was built, and its own
avg@8 per benchmark as measured when it was shipped. :func:`shipped_file` is what
:func:`~gppo.backends.local.warmstart.load_base_model` consults first: a spec whose base-model
settings hash to the shipped key trains from the shipped file and builds nothing.

Rebuild and re-ship a domain's base with :mod:`.ship` (then commit both files)::

    python -m gppo.backends.local.ship --domain math
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SHIPPED_DIR = Path(__file__).with_name("base_models")
#: the evaluation the record is taken with (the spec defaults: avg@8, LocalSettings.eval_seed)
RECORD_K = 8


def record_path(domain: str) -> Path:
    return SHIPPED_DIR / f"base-{domain}.json"


def shipped_record(domain: str) -> dict[str, Any] | None:
    """The shipped base's record (key hash, build, avg@8 per benchmark), or None."""
    try:
        return json.loads(record_path(domain).read_text())
    except (OSError, ValueError):
        return None


def shipped_file(domain: str, key_hash: str) -> Path | None:
    """The shipped ``state_dict`` file of ``domain``, if the package ships one for this warm-start
    key hash."""
    rec = shipped_record(domain)
    if rec is None or rec.get("hash") != key_hash:
        return None
    path = SHIPPED_DIR / rec["file"]
    return path if path.exists() else None
