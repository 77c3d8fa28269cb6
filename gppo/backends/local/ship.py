"""Build, evaluate and ship a domain's default base model into the package.

    python -m gppo.backends.local.ship --domain math [--threads 1]

writes ``gppo/backends/local/base_models/base-<domain>.pt`` and ``.json`` (see
:mod:`.shipped`); commit both. The record's avg@8 is measured on the stored (float16) weights,
exactly as :func:`~gppo.backends.local.warmstart.load_base_model` loads them.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path
from typing import Any

import torch

from gppo.backends.local.evaluate import evaluate
from gppo.backends.local.settings import LocalSettings
from gppo.backends.local.shipped import RECORD_K, SHIPPED_DIR, record_path
from gppo.backends.local.tasks import get_domain
from gppo.backends.local.warmstart import (
    CHECK_K,
    load_policy,
    train_base,
    warmstart_hash,
    warmstart_key,
)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ship(settings: LocalSettings, threads: int = 1) -> dict[str, Any]:
    """Build the base for ``settings``, evaluate it (avg@8 on every benchmark, eval seed of the
    settings) as stored (float16), and write ``base-<domain>.pt`` and ``.json``."""
    torch.set_num_threads(threads)
    policy, run = train_base(settings, log=print)
    if not run.reached:
        raise SystemExit(f"the warm start did not reach its target in {run.steps} steps")
    SHIPPED_DIR.mkdir(exist_ok=True)
    name = f"base-{settings.domain}.pt"
    half = {k: v.half() for k, v in policy.state_dict().items()}
    torch.save({"key": warmstart_key(settings), "state_dict": half}, str(SHIPPED_DIR / name))
    stored = load_policy(settings, SHIPPED_DIR / name)  # the record is of what loads, not of fp32
    domain = get_domain(settings.domain)
    scores = evaluate(stored, domain, domain.benchmark_names, RECORD_K, settings.eval_seed)
    rec = {
        "domain": settings.domain,
        "hash": warmstart_hash(settings),
        "file": name,
        "key": warmstart_key(settings),
        f"avg_at_{RECORD_K}": {b: scores[b] for b in domain.benchmark_names},
        f"avg_at_{RECORD_K}_mean": sum(scores.values()) / len(scores),
        "eval_seed": settings.eval_seed,
        "build": {
            "steps": run.steps,
            "restarts": run.restarts,
            f"validation_avg_at_{CHECK_K}": run.validation,
            "seconds": round(run.seconds, 1),
            "threads": threads,
            "cpu": _cpu_model(),
            "torch": torch.__version__,
        },
    }
    record_path(settings.domain).write_text(json.dumps(rec, indent=2) + "\n")
    return rec


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gppo.backends.local.ship", description=__doc__)
    p.add_argument("--domain", choices=["math", "code"], required=True)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    rec = ship(LocalSettings(domain=a.domain), a.threads)
    print(json.dumps(rec, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
