"""One launcher per sweep, whatever the store.

*Local store* (SQLite file, ``file:`` folder): an OS file lock ``.gppo/<sweep>/launch.lock`` next
to the store. Every launcher of the sweep opens that same file whatever its working directory,
and the OS releases the lock when the holder dies (kill -9 included).

*Server store* (``http://`` tracking server, a database URL): there is no file every launcher
shares, so the lock is a **lease recorded in the sweep's MLflow parent run**, through
``MlflowClient``'s public API only:

- generation ``n`` is the param ``gppo.lease.<n>`` = the holder (host, pid, process start time,
  token). MLflow params are write-once (logging a key again with another value is refused by the
  store, whose primary key is (run, key)), so of two launchers racing for generation ``n+1``
  exactly one succeeds: that write is the compare-and-set. No sleep-and-recheck is needed;
- the holder refreshes the tag ``gppo.lease.heartbeat`` = ``"<n> <unix time>"`` every
  :data:`HEARTBEAT_S` and, on a clean exit, sets ``gppo.lease.released`` = ``"<n>"``;
- a launcher may take generation ``n+1`` when ``n`` was released, or its holder is dead: on the
  same host, its pid is gone (or was reused: the start time differs), so a relaunch right after a
  kill -9 proceeds at once; on another host, when the last heartbeat is older than
  :data:`STALE_S`;
- at each heartbeat the holder checks that no generation ``n+1`` exists. If one does (the holder
  was presumed dead, e.g. suspended past :data:`STALE_S`), it has lost the sweep: ``on_lost`` is
  called and the launcher detaches, leaving the jobs to the new holder.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from gppo.errors import LaunchBusy
from gppo.grid.load import Plan
from gppo.store.tracking import Tracking, retry_locked, store_exception
from gppo.store.uri import is_local_store, resolve_tracking_uri
from gppo.sweep.cluster.owner import Owner, alive

log = logging.getLogger(__name__)
LEASE_PARAM = "gppo.lease."
HEARTBEAT_TAG = "gppo.lease.heartbeat"
RELEASED_TAG = "gppo.lease.released"
HEARTBEAT_S = float(os.environ.get("GPPO_LEASE_HEARTBEAT_S", "5"))
STALE_S = float(os.environ.get("GPPO_LEASE_STALE_S", "30"))


def _generation(params: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """(latest lease generation, its holder) from the parent run's params; (0, {}) if none."""
    gens = [int(k[len(LEASE_PARAM) :]) for k in params if k[len(LEASE_PARAM) :].isdigit()]
    if not gens:
        return 0, {}
    n = max(gens)
    try:
        return n, json.loads(params[f"{LEASE_PARAM}{n}"])
    except ValueError:
        return n, {}


def _last_beat(tags: dict[str, str], n: int, holder: dict[str, Any]) -> float:
    beat = float(holder.get("since", 0.0))
    gen, _, when = tags.get(HEARTBEAT_TAG, "").partition(" ")
    if gen == str(n):
        with contextlib.suppress(ValueError):
            beat = max(beat, float(when))
    return beat


def holder_alive(holder: Mapping[str, object], beat: float, me: Owner, stale_s: float) -> bool:
    """Whether the launcher recorded as ``holder`` still runs (see the module docstring)."""
    return alive(holder, me=me, beat=beat, stale_s=stale_s)


class Lease:
    """The lease on one sweep's parent run (server stores); see the module docstring."""

    def __init__(self, tracking: Tracking, parent_run_id: str, sweep_id: str) -> None:
        self.tracking, self.run_id, self.sweep_id = tracking, parent_run_id, sweep_id
        self.me = Owner.me()
        self.generation = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read(self) -> tuple[dict[str, str], dict[str, str]]:
        run = self.tracking.get_run(self.run_id)
        return dict(run.data.params), dict(run.data.tags)

    def _busy(self, holder: dict[str, Any], beat: float) -> LaunchBusy:
        ago = max(0.0, time.time() - beat)
        return LaunchBusy(
            f"another launcher is running sweep {self.sweep_id} (pid {holder.get('pid', '?')} on "
            f"{holder.get('host', '?')}, last heartbeat {ago:.0f} s ago, lease in MLflow run "
            f"{self.run_id}); wait for it to end, or stop it first"
        )

    def acquire(self) -> None:
        """Take the next generation, or raise :class:`LaunchBusy` (nothing else written)."""
        params, tags = self._read()
        n, holder = _generation(params)
        if n and tags.get(RELEASED_TAG) != str(n):
            beat = _last_beat(tags, n, holder)
            if holder_alive(holder, beat, self.me, STALE_S):
                raise self._busy(holder, beat)
            log.warning(
                "taking over sweep %s from launcher pid %s on %s (gone)",
                self.sweep_id,
                holder.get("pid", "?"),
                holder.get("host", "?"),
            )
        key = f"{LEASE_PARAM}{n + 1}"
        value = json.dumps({**self.me.as_attr(), "since": time.time()}, sort_keys=True)
        try:
            retry_locked(lambda: self.tracking.client.log_param(self.run_id, key, value))
        except store_exception():  # MLflow refuses a param's second value: who won?
            params, tags = self._read()
            won = params.get(key)
            if won is None:
                raise
            if won != value:  # another launcher took this generation first
                holder = json.loads(won)
                raise self._busy(holder, _last_beat(tags, n + 1, holder)) from None
        self.generation = n + 1
        self._beat()

    def _beat(self) -> None:
        self.tracking.set_tags(self.run_id, {HEARTBEAT_TAG: f"{self.generation} {time.time()}"})
        self.confirmed_at = time.monotonic()

    def fresh(self) -> bool:
        """Whether the lease was confirmed (still ours, heartbeat written) within two heartbeats.

        A launcher that was suspended (SIGSTOP, a laptop lid) comes back with a stale
        confirmation: it submits nothing until its heartbeat thread has either confirmed the
        lease again or found it taken over (a fence: no cell is submitted by two launchers)."""
        return time.monotonic() - self.confirmed_at < 2 * HEARTBEAT_S

    confirmed_at: float = 0.0

    def lost(self) -> bool:
        """True when a later generation exists (another launcher took the sweep over)."""
        params, _ = self._read()
        return _generation(params)[0] > self.generation

    def keep_alive(self, on_lost: Callable[[], None]) -> None:
        """Heartbeat in a daemon thread until :meth:`release`; ``on_lost`` if taken over."""

        def loop() -> None:
            while not self._stop.wait(HEARTBEAT_S):
                try:
                    if self.lost():
                        log.error("sweep %s was taken over by another launcher", self.sweep_id)
                        on_lost()
                        return
                    self._beat()
                except Exception as exc:  # a store hiccup: try again at the next beat
                    log.warning("lease heartbeat failed: %s", exc)

        self._thread = threading.Thread(target=loop, name="gppo-lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        try:
            if not self.lost():
                self.tracking.set_tags(self.run_id, {RELEASED_TAG: str(self.generation)})
        except Exception as exc:  # the store is away: the lease then expires by its heartbeat
            log.warning("could not mark the sweep's lease released (it expires instead): %s", exc)


@contextlib.contextmanager
def sweep_lock(
    plan: Plan, *, on_lost: Callable[[], None] = lambda: None
) -> Iterator[Callable[[], bool]]:
    """Hold the sweep's one-launcher lock for the duration (raises :class:`LaunchBusy`); yields
    ``fresh()``: whether the lock is known to be held right now (always, for a file lock; for a
    lease, confirmed within two heartbeats: see :meth:`Lease.fresh`)."""
    uri = resolve_tracking_uri(plan.spec.tracking.uri)
    if is_local_store(uri):
        from filelock import FileLock, Timeout

        from gppo.sweep.session import sweep_state_dir

        state_dir = sweep_state_dir(plan)
        state_dir.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(Path(state_dir) / "launch.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise LaunchBusy(
                f"another launcher is running sweep {plan.sweep_id} ({state_dir})"
            ) from None
        try:
            yield lambda: True
        finally:
            lock.release()
        return
    tracking = Tracking(uri)
    tracking.init_store()
    exp = tracking.experiment_id(plan.spec.experiment)
    assert exp is not None
    tracking.sweep_run(exp, plan.sweep_id)
    # search again: of two launchers that both created a parent run at once, both now see both
    # and agree on the oldest (what sweep_run returns), so they race for one lease
    parent = tracking.sweep_run(exp, plan.sweep_id)
    assert parent is not None
    lease = Lease(tracking, parent, plan.sweep_id)
    lease.acquire()
    lease.keep_alive(on_lost)
    try:
        yield lease.fresh
    finally:
        lease.release()
