"""The tempered family (docs/studies/rare-learnable.md): the shipped base at a temperature τ.

``local.base_temperature`` τ is folded into the base's final layer as it loads
(:func:`~gppo.testbed.policy.fold_temperature`: the final LayerNorm's weight and bias / τ, so the
logits are the file's / τ). The correct answers get rarer as τ grows while every token's ranking,
and so what the base has learnt, is kept. One shipped file serves every level: the weights a
level loads are the shipped file's with two vectors divided by τ, correctly rounded, the same
bits on every machine, so no file per level ships (it would add 0.8 MB a level for the same
bits). What ships per level is its **record**, in ``base_models/tempered-<domain>.json``: avg@8
per benchmark and, teacher-forced, the correct answers' probability, the mean μ of their tokens
and the share of them with μ < 0.1, measured as a cell loads the base (one thread, the given CPU
kernels). ``tests/testbed/test_tempered_bases.py`` checks that a spec at each level loads the
shipped base / τ and scores its record.

    python -m gppo.testbed.tempered --domain math --tau 1 1.5 2 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import torch  # computes nothing at import: main() pins its kernels before it does

from gppo.testbed import cpu_kernels
from gppo.testbed.settings import BaseModelSettings
from gppo.testbed.shipped import SHIPPED_DIR


def records_path(domain: str) -> Path:
    return SHIPPED_DIR / f"tempered-{domain}.json"


def tempered_records(domain: str) -> dict[str, Any] | None:
    """The shipped records of ``domain``'s tempered family (None: none ship)."""
    try:
        return json.loads(records_path(domain).read_text())
    except (OSError, ValueError):
        return None


def tempered_record(domain: str, tau: float) -> dict[str, Any] | None:
    """The record of the level ``base_temperature`` = ``tau`` (None: no such level ships)."""
    recs = tempered_records(domain)
    levels = recs["levels"] if recs else []
    return next((lv for lv in levels if lv["base_temperature"] == tau), None)


def measure(domain: str, tau: float) -> dict[str, Any]:
    """One level's record: the domain's shipped base loaded at ``base_temperature`` τ, as a cell
    loads it, scored by :func:`gppo.testbed.make_shipped_base.base_scores`."""
    from gppo.testbed.make_shipped_base import base_scores
    from gppo.testbed.warmstart import load_base_model

    def refuse(line: str) -> None:
        raise SystemExit(f"the {domain} base does not ship: {line}")

    base = load_base_model(BaseModelSettings(domain=domain, base_temperature=tau), say=refuse)
    return {"base_temperature": tau, **base_scores(base.policy, domain)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gppo.testbed.tempered", description=__doc__)
    p.add_argument("--domain", choices=["math", "code"], required=True)
    p.add_argument("--tau", type=float, nargs="+", required=True, help="the levels, τ > 0")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cpu-kernels", choices=cpu_kernels.MODES, default=cpu_kernels.DEFAULT)
    p.add_argument("--out", type=Path, help="where to write (default: the shipped records)")
    a = p.parse_args(argv)
    cpu_kernels.apply(a.cpu_kernels)  # before torch's first operation
    torch.set_num_threads(a.threads)
    from gppo.testbed.shipped import record_path, shipped_record

    shipped = shipped_record(a.domain)
    if shipped is None:
        raise SystemExit(f"no shipped {a.domain} base")
    levels = [measure(a.domain, tau) for tau in a.tau]
    rec = {
        "domain": a.domain,
        "base": shipped["file"],
        "base_record": record_path(a.domain).name,
        "base_sha256": hashlib.sha256((SHIPPED_DIR / shipped["file"]).read_bytes()).hexdigest(),
        "levels": levels,
        "measured": {
            "threads": a.threads,
            "cpu_kernels": a.cpu_kernels,
            "cpu": cpu_kernels.cpu_model(),
            "torch": torch.__version__,
        },
    }
    (a.out or records_path(a.domain)).write_text(json.dumps(rec, indent=2) + "\n")
    for lv in levels:
        m = lv["answers_mean"]
        print(
            f"tau {lv['base_temperature']:g}: avg@8 {100 * lv['avg_at_8_mean']:.1f} % "
            f"P(correct) {m['p_answer']:.3f} token mu {m['answer_token_mu']:.3f} "
            f"rare {100 * m['answer_rare_frac']:.1f} % "
            + " ".join(f"{b} {100 * v:.1f}" for b, v in lv["avg_at_8"].items())
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
