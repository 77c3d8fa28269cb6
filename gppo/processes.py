"""An attempt's processes on this machine: find them, end them, and check that they are gone.

Every Ray job of an attempt is submitted with ``GPPO_ATTEMPT=<submission id>`` in its runtime
environment (:data:`ENV_ATTEMPT`). The job's driver, whatever it spawns (``accelerate launch``'s
workers, vLLM's engine processes) and the Ray actors of the job (verl's FSDP workers, its vLLM
engine, reward and agent-loop workers: they inherit the job's runtime environment) carry it in
the environment they were started with (``/proc/<pid>/environ``), whoever their parent is. A
process that takes its environment after it started says so itself: the testbed fork server's
cells are forked from a server that predates the job, so each calls :func:`register`, which
writes ``<pid>-<start time>`` (its command line inside) into the attempt's folder under
:func:`registry`: a folder of this user's that only they can write (0700; any other is refused),
and each entry is checked to be that process before it is signalled.

:func:`end_attempt` sends SIGTERM to every one of them, waits up to ``grace_s`` for them to exit,
sends SIGKILL to the rest and waits up to :data:`CONFIRM_S` more for them to be gone (a zombie
counts as gone: it holds no memory, no GPU, no port). A frozen process (SIGSTOP, a blocking C
call) cannot act on SIGTERM; SIGKILL ends it all the same.

What this reaches is this machine: a local Ray head's jobs and actors, or the processes of any
cluster this machine is a node of. Another node's processes are Ray's to end (see
docs/cluster-guide.md, "When an attempt ends").
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import stat
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from gppo.errors import UnsafeRegistry

log = logging.getLogger(__name__)

#: the environment variable that names an attempt's processes (its Ray submission id)
ENV_ATTEMPT = "GPPO_ATTEMPT"
#: default seconds between SIGTERM and SIGKILL (``retries.kill_grace_s``)
KILL_GRACE_S = 10.0
#: seconds a SIGKILLed process gets to disappear before it counts as not confirmed gone
CONFIRM_S = 10.0
_POLL_S = 0.1
#: Ray's own processes of a job, which carry the job's environment and which Ray ends itself:
#: its supervisor actor, an idle worker of its pool, and the shell that SIGKILLs the driver's group when the supervisor dies
#: (``while kill -s 0 <pid>; do sleep 1; done; ...``), with that shell's ``sleep``
_RAYS_OWN = ("ray::JobSupervisor", "ray::IDLE", "while kill -s 0 ")
_RAYS_WATCHER = "while kill -s 0 "
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def registry_root() -> Path:
    """Where processes register themselves: one folder per user of this machine."""
    return Path(tempfile.gettempdir()) / f"gppo-attempts-{os.getuid()}"


def registry() -> Path:
    """:func:`registry_root`, created private (0700) if absent; raises
    :class:`~gppo.errors.UnsafeRegistry` (one line) when it is not a real folder owned by this
    user that only this user can write (another user who created it first could plant
    entries)."""
    root = registry_root()
    with contextlib.suppress(FileExistsError):
        root.mkdir(mode=0o700)
    st = os.lstat(root)
    why = ""
    if not stat.S_ISDIR(st.st_mode):
        why = "is not a folder (a link or a file)"
    elif st.st_uid != os.getuid():
        why = f"is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    elif st.st_mode & 0o022:
        why = f"is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    if why:
        raise UnsafeRegistry(
            f"the attempt registry {root} {why}: another user could plant entries in it; "
            "remove it (it is recreated private) or set TMPDIR to a folder of your own"
        )
    return root


def _folder(attempt: str, root: Path | None = None) -> Path:
    return (root or registry_root()) / _UNSAFE.sub("_", attempt)


def register(attempt: str | None = None) -> None:
    """Record this process as one of ``attempt``'s (default: ``$GPPO_ATTEMPT``; nothing without
    one), with its start time (the entry's name) and its command line (the entry's text), which
    :func:`attempt_processes` checks before it trusts the entry. For a process whose start-up
    environment does not carry the attempt's marker. An unsafe registry: one line on stderr,
    nothing recorded."""
    attempt = attempt if attempt is not None else os.environ.get(ENV_ATTEMPT)
    if not attempt:
        return
    with contextlib.suppress(OSError, psutil.Error):
        try:
            folder = _folder(attempt, registry())
        except UnsafeRegistry as exc:
            print(f"gppo: not registered: {exc}", file=sys.stderr, flush=True)
            return
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
        me = psutil.Process()
        (folder / f"{me.pid}-{me.create_time()!r}").write_text(json.dumps(me.cmdline()))


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def _rays_own(proc: psutil.Process) -> bool:
    """Whether ``proc`` is one of Ray's own processes of a job (or the watcher's ``sleep``)."""
    try:
        cmdline = proc.cmdline()
        if cmdline == ["sleep", "1"] or any(m in " ".join(cmdline) for m in _RAYS_OWN):
            return True  # the watcher's sleep, whose shell may be gone already: a second at most
        parent = proc.parent()
        return parent is not None and _RAYS_WATCHER in " ".join(parent.cmdline())
    except psutil.Error:
        return False


def _registered(attempt: str) -> dict[int, psutil.Process]:
    """The live processes registered for ``attempt``, each checked to be the one that registered
    (this user's, its start time and command line as recorded); other entries are removed. An
    unsafe registry (:func:`registry`): nothing is trusted (one line in the log)."""
    found: dict[int, psutil.Process] = {}
    try:
        folder = _folder(attempt, registry())
    except (UnsafeRegistry, OSError) as exc:
        log.warning("%s", exc)
        return found
    for entry in folder.glob("*-*") if folder.is_dir() else ():
        pid, _, started = entry.name.partition("-")
        try:
            proc = psutil.Process(int(pid))
            if (
                abs(proc.create_time() - float(started)) < 0.01
                and proc.uids().real == os.getuid()
                and json.loads(entry.read_text()) == proc.cmdline()
                and not _gone(proc)
            ):
                found[proc.pid] = proc
                continue
        except (ValueError, OSError, psutil.Error):
            pass
        entry.unlink(missing_ok=True)  # exited, its pid taken by another process, or forged
    return found


def attempt_processes(attempt: str) -> list[psutil.Process]:
    """Every live process of ``attempt`` on this machine that this user may signal: those whose
    start-up environment names it (Ray's own supervision of the job left out), and those
    registered for it."""
    me = os.getpid()
    found = _registered(attempt)
    for proc in psutil.process_iter():
        if proc.pid == me or proc.pid in found:
            continue
        try:
            if proc.environ().get(ENV_ATTEMPT) != attempt or _gone(proc) or _rays_own(proc):
                continue
        except (psutil.Error, OSError):  # another user's, or gone meanwhile
            continue
        found[proc.pid] = proc
    return sorted(found.values(), key=lambda p: p.pid)


@dataclass
class Ended:
    """What :func:`end_attempt` had to do: the processes it found alive (pids), those that
    exited on SIGTERM within the grace period, those it SIGKILLed, and those it could not confirm
    gone (``survivors``: named in the launch log and in ``status``)."""

    attempt: str
    grace_s: float
    found: list[int] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)
    survivors: list[int] = field(default_factory=list)

    @property
    def note(self) -> str:
        """One line for the launch log and the run's failure tag ("" when nothing was left)."""
        if not self.found:
            return ""
        pids = lambda ps: ", ".join(map(str, ps))  # noqa: E731
        parts = [
            f"{len(self.found)} process(es) left after the job ended (pids {pids(self.found)})"
        ]
        if self.killed:
            parts.append(f"SIGKILLed after {self.grace_s:g} s grace: {pids(self.killed)}")
        else:
            parts.append("ended on SIGTERM")
        if self.survivors:
            parts.append(f"NOT confirmed gone after {CONFIRM_S:g} s more: {pids(self.survivors)}")
        return "; ".join(parts)


def _wait(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait until every process is gone or ``timeout_s`` passes; the ones still alive."""
    deadline = time.monotonic() + timeout_s
    alive = [p for p in procs if not _gone(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        alive = [p for p in alive if not _gone(p)]
    return alive


def _signal(procs: list[psutil.Process], signum: int) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error, OSError):
            proc.send_signal(signum)


def end_attempt(attempt: str, grace_s: float = KILL_GRACE_S) -> Ended:
    """End every process of ``attempt`` on this machine: SIGTERM, up to ``grace_s`` to exit,
    SIGKILL, then up to :data:`CONFIRM_S` to be gone. Returns what it did (:class:`Ended`);
    returns at once when nothing is left (the usual case: the job ended its own processes)."""
    ended = Ended(attempt, grace_s)
    procs = attempt_processes(attempt)
    if procs:
        ended.found = [p.pid for p in procs]
        _signal(procs, signal.SIGTERM)
        alive = _wait(procs, grace_s)
        if alive:
            ended.killed = [p.pid for p in alive]
            _signal(alive, signal.SIGKILL)
            ended.survivors = [p.pid for p in _wait(alive, CONFIRM_S)]
    if not ended.survivors:
        with contextlib.suppress(OSError):
            for entry in _folder(attempt).glob("*"):
                entry.unlink(missing_ok=True)
            _folder(attempt).rmdir()
    return ended


def exit_signal(exit_code: int | None) -> str | None:
    """The signal a job's driver died of, from its exit code (``-9``, or ``137`` from a shell or
    from the fork server's client: 128 + the signal's number), as its name; None otherwise."""
    if exit_code is None or exit_code == 0:
        return None
    number = -exit_code if exit_code < 0 else exit_code - 128 if 128 < exit_code < 160 else 0
    try:
        return signal.Signals(number).name if number else None
    except ValueError:
        return None
