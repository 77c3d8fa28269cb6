"""Build, evaluate and ship a base model into the package.

    python -m gppo.testbed.make_shipped_base --domain math [--threads 1]
    python -m gppo.testbed.make_shipped_base --domain math --set warmstart_target=0.1

writes ``gppo/testbed/base_models/base-<domain>.pt`` and ``.json`` (with ``--set``:
``base-<domain>-target0.1.pt``, a member of the exploration family; see :mod:`.shipped`);
commit both. Only warm-start settings may be changed (they alone enter the base's key). The record's avg@8 is measured on the stored (float16) weights,
exactly as :func:`~gppo.testbed.warmstart.load_base_model` loads them.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch  # torch computes nothing at import: main() pins its kernels before it does

from gppo.testbed import cpu_kernels
from gppo.testbed.answer_prob import answer_summary
from gppo.testbed.evaluate import evaluate
from gppo.testbed.policy import Policy
from gppo.testbed.settings import RL, BaseModelSettings
from gppo.testbed.shipped import RECORD_K, SHIPPED_DIR, base_name, record_path
from gppo.testbed.tasks import get_domain
from gppo.testbed.warmstart import (
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


def base_scores(policy: Policy, domain_name: str) -> dict[str, Any]:
    """A base's numbers as its record states them: avg@8 per benchmark and their mean (the
    testbed's eval seed ``RL.eval_seed``), and, teacher-forced on the same benchmarks, the
    probability of the correct answer, the mean μ of its tokens and the share of them with
    μ < 0.1 (:mod:`gppo.testbed.answer_prob`), per benchmark and their means."""
    domain = get_domain(domain_name)
    scores = evaluate(policy, domain, domain.benchmark_names, RECORD_K, RL.eval_seed)
    answers = {b: answer_summary(policy, domain.benchmark(b)) for b in domain.benchmark_names}
    return {
        f"avg_at_{RECORD_K}": {b: scores[b] for b in domain.benchmark_names},
        f"avg_at_{RECORD_K}_mean": sum(scores.values()) / len(scores),
        "eval_seed": RL.eval_seed,
        "answers": answers,
        "answers_mean": {
            k: sum(a[k] for a in answers.values()) / len(answers)
            for k in next(iter(answers.values()))
        },
    }


def ship(
    settings: BaseModelSettings, threads: int = 1, changed: Mapping[str, object] | None = None
) -> dict[str, Any]:
    """Build the base for ``settings``, evaluate it (avg@8 on every benchmark, the testbed's eval
    seed ``RL.eval_seed``) as stored (float16), and write ``base-<domain>[-<changed>].pt`` and ``.json``.

    ``changed``: the warm-start settings that differ from the defaults (they name the file)."""
    torch.set_num_threads(threads)
    policy, run = train_base(settings, log=print)
    if not run.reached:
        raise SystemExit(f"the warm start did not reach its target in {run.steps} steps")
    SHIPPED_DIR.mkdir(exist_ok=True)
    name = f"{base_name(settings.domain, changed)}.pt"
    half = {k: v.half() for k, v in policy.state_dict().items()}
    torch.save({"key": warmstart_key(settings), "state_dict": half}, str(SHIPPED_DIR / name))
    stored = load_policy(settings, SHIPPED_DIR / name)  # the record is of what loads, not of fp32
    rec = {
        "domain": settings.domain,
        "hash": warmstart_hash(settings),
        "file": name,
        "key": warmstart_key(settings),
        **base_scores(stored, settings.domain),
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
    record_path(settings.domain, changed).write_text(json.dumps(rec, indent=2) + "\n")
    return rec


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m gppo.testbed.make_shipped_base", description=__doc__
    )
    p.add_argument("--domain", choices=["math", "code"], required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--cpu-kernels", choices=cpu_kernels.MODES, default=cpu_kernels.DEFAULT,
        help="the build's CPU kernels (gppo.testbed.cpu_kernels)",
    )  # fmt: skip
    p.add_argument(
        "--set", action="append", default=[], metavar="warmstart_KEY=VALUE",
        help="a warm-start setting that differs from the default (names the shipped file)",
    )  # fmt: skip
    a = p.parse_args(argv)
    cpu_kernels.apply(a.cpu_kernels)  # before torch's first operation
    changed: dict[str, Any] = {}
    for item in a.set:
        key, _, value = item.partition("=")
        if (
            not key.startswith("warmstart_")
            or key not in BaseModelSettings.model_fields
            or not value
        ):
            known = ", ".join(
                k for k in BaseModelSettings.model_fields if k.startswith("warmstart_")
            )
            p.error(f"--set {item}: a warm-start setting KEY=VALUE is allowed ({known})")
        changed[key] = json.loads(value)
    rec = ship(BaseModelSettings(domain=a.domain, **changed), a.threads, changed)
    print(json.dumps(rec, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
