"""One pre-flight result per cell and stage, printed as one line (``gppo-sweep check``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CellCheck:
    cell: str
    ok: bool
    stage: str  # config | loss | bf16 | metrics | "" when ok
    detail: str  # one line

    def line(self) -> str:
        if self.ok:
            return f"ok    {self.cell}: {self.detail}"
        return f"FAIL  {self.cell}: {self.stage}: {self.detail}"


def one_line(text: object) -> str:
    """``text`` (or an exception's message) on one line, cut at 300 characters."""
    line = " ".join(str(text).split())
    return line[:300] + ("..." if len(line) > 300 else "")


@dataclass(frozen=True)
class StepTiming:
    """A cell's training step timed on this machine (:meth:`Backend.step_timing`), and the rest
    of its run: ``startup_s`` (process start, the base model, the evaluations and probes a run
    does) and ``step_s`` (one training step), for a run of ``steps`` steps."""

    startup_s: float
    step_s: float
    steps: int

    @property
    def run_s(self) -> float:
        """A run's seconds: start-up plus its steps."""
        return self.startup_s + self.step_s * self.steps
