"""One instruction set for every CPU cell: the pinned kernel environment, its one home.

The last digits of a CPU cell depend on which kernels torch picks for the CPU it runs on: ATen's
vectorised code (``ATEN_CPU_CAPABILITY``: AVX-512 where the CPU has it), MKL's BLAS (``sgemm``,
almost every matrix product of the testbed's policy; its dispatch also depends on the CPU's
vendor) and oneDNN (the GELU of the policy's MLP). Sixty iterations of RL turn those digits into
points of avg@8, so the same cell gave a different Table 1 on an Intel Xeon with AVX-512 and on
an AMD EPYC (docs/reproducibility.md has the measurements).

In the **pinned** mode (the default, a backend section's ``cpu_kernels: pinned``) every CPU cell's
process computes with :data:`PINNED_ENV`, whatever the environment it was launched from says:

- ``ATEN_CPU_CAPABILITY=avx2``: ATen's AVX2 kernels (every x86-64 CPU of the last decade has
  AVX2; ATen's code does not look at the vendor);
- ``MKL_CBWR=COMPATIBLE``: MKL's conditional numerical reproducibility on its SSE2 branch, the
  only branch besides ``AUTO`` that MKL runs on a non-Intel CPU. ``MKL_CBWR=AVX2`` is not enough:
  on an AMD CPU MKL ignores it and falls back to ``AUTO`` (Intel's documentation says so; on the
  2-core AMD EPYC the quick start's tv/mc seed 2 ends at 0.44336 under ``avx2`` + ``AVX2``, on
  the Intel Xeon at 0.46143; under ``avx2`` + ``COMPATIBLE`` both end at 0.44434);
- ``DNNL_MAX_CPU_ISA=AVX2`` and ``ONEDNN_MAX_CPU_ISA=AVX2`` (oneDNN reads the second first):
  oneDNN's AVX2 JIT kernels; ``*_DEFAULT_FPMATH_MODE=STRICT``: no implicit bf16/tf32 math;
- ``MKL_ENABLE_INSTRUCTIONS`` and ``MKL_DEBUG_CPU_TYPE`` removed (:data:`DROPPED`).

Threads stay what the cell sets (one by default): a reduction split over another number of
threads rounds differently.

Where it is applied (each a process that imports torch): the job environment of every backend's
CPU cell (:func:`job_env`), the local fork server's start environment (it imports torch once for
the launch's cells) and, first thing, every cell entrypoint (:func:`apply`: ``python -m
gppo.backends.local|trl|verl``, which run the warm start and the evaluator in-process) and
``python -m gppo.testbed.make_shipped_base``. The libraries read these variables when they first compute, so
:func:`apply` must run before torch's first operation; :func:`in_effect` says what torch is using.

The **natural** mode (``cpu_kernels: natural``) leaves the kernels to the machine: faster on an
AVX-512 CPU (the pinned mode's cost is in docs/reproducibility.md), but its numbers hold only on
CPUs of the same kind. The pin is for x86-64; an ARM CPU has none of these kernels and cannot
match x86 bit for bit.

Standard library only: the entrypoints import this before torch.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping, MutableMapping
from typing import Literal

PINNED = "pinned"
NATURAL = "natural"
#: the values of a backend section's ``cpu_kernels``
Mode = Literal["pinned", "natural"]
MODES: tuple[str, ...] = (PINNED, NATURAL)
#: a section's default
DEFAULT: Mode = "pinned"
#: the settings field's name in every backend section that trains on a CPU, and its description
FIELD = "cpu_kernels"
DESCRIPTION = (
    "pinned: every CPU process of the cell computes with one instruction set (AVX2 kernels, MKL's "
    "COMPATIBLE branch), the same numbers on every x86-64 CPU with AVX2; natural: the machine's "
    "fastest kernels, numbers that hold on CPUs of the same kind only (docs/reproducibility.md)"
)

#: the environment a pinned CPU cell computes with (read by the libraries at their first use)
PINNED_ENV: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE",
    "DNNL_MAX_CPU_ISA": "AVX2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "DNNL_DEFAULT_FPMATH_MODE": "STRICT",
    "ONEDNN_DEFAULT_FPMATH_MODE": "STRICT",
}
#: variables that would pick other kernels, removed from a pinned process's environment
DROPPED: tuple[str, ...] = ("MKL_ENABLE_INSTRUCTIONS", "MKL_DEBUG_CPU_TYPE")
#: every variable the mode decides: the pin's and the dropped ones
KERNEL_VARS: tuple[str, ...] = (*PINNED_ENV, *DROPPED)


def mode_of(settings: Mapping[str, object] | None) -> str:
    """The mode a cell's settings (a backend section, as a dict) ask for: its ``cpu_kernels``,
    else :data:`DEFAULT`. Raises ``ValueError`` naming the allowed values."""
    mode = (settings or {}).get(FIELD, DEFAULT)
    if mode not in MODES:
        raise ValueError(f"{FIELD}: {mode!r} is not one of {', '.join(MODES)}")
    return str(mode)


def job_env(mode: str) -> dict[str, str]:
    """The variables a job of ``mode`` adds to its environment: :data:`PINNED_ENV` when pinned,
    nothing when natural."""
    return dict(PINNED_ENV) if mode_of({FIELD: mode}) == PINNED else {}


def apply(mode: str, environ: MutableMapping[str, str] | None = None) -> None:
    """Pin ``environ`` (default: this process's, so also what its children inherit) when ``mode``
    is pinned: set :data:`PINNED_ENV`, remove :data:`DROPPED`. Natural: leave it as it is. Call
    it before torch's first operation."""
    env = os.environ if environ is None else environ
    if mode_of({FIELD: mode}) != PINNED:
        return
    for name in DROPPED:
        env.pop(name, None)
    env.update(PINNED_ENV)


def same_kernels(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    """Whether two environments ask for the same kernels (every :data:`KERNEL_VARS` equal)."""
    return all(a.get(name) == b.get(name) for name in KERNEL_VARS)


def cpu_model() -> str:
    """This machine's CPU model (``model name`` of /proc/cpuinfo, else the platform's)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def in_effect() -> dict[str, str]:
    """What this process computes with (imports torch): ATen's CPU capability, the pin's
    variables as set, and the CPU model."""
    import torch

    out = {"aten": str(torch.backends.cpu.get_cpu_capability()), "cpu": cpu_model()}
    out.update({name: os.environ.get(name, "") for name in KERNEL_VARS})
    return out
