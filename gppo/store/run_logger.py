"""Writing one cell's metrics into its MLflow run: buffered ``log_batch`` calls, never one call
per metric; SQLite "database is locked" errors are retried (``gppo.store.tracking``)."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from gppo.cell import Cell
from gppo.store.tracking import cell_params, retry_locked


class RunLogger:
    """Buffers metrics and writes them with ``MlflowClient.log_batch`` (<= 1000 per call)."""

    def __init__(self, client: Any, run_id: str, flush_every: int = 200) -> None:
        self.client = client
        self.run_id = run_id
        self.flush_every = flush_every
        self._buf: list[Any] = []

    def log(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        self._buf.extend(Metric(k, float(v), ts, int(step)) for k, v in values.items())
        if len(self._buf) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        while self._buf:
            part, self._buf = self._buf[:1000], self._buf[1000:]
            retry_locked(partial(self.client.log_batch, self.run_id, metrics=part))

    def set_tags(self, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        batch = [RunTag(k, str(v)) for k, v in tags.items()]
        retry_locked(lambda: self.client.log_batch(self.run_id, tags=batch))

    def log_missing_params(self, cell: Cell, extra: dict[str, str]) -> int:
        """Log the cell's params (the dispatcher's names) plus ``extra`` where not already set."""
        from mlflow.entities import Param

        have = retry_locked(lambda: self.client.get_run(self.run_id)).data.params
        want = {**cell_params(cell), **extra}
        new = [Param(k[:250], v) for k, v in want.items() if k[:250] not in have]
        for i in range(0, len(new), 100):
            retry_locked(partial(self.client.log_batch, self.run_id, params=new[i : i + 100]))
        return len(new)
