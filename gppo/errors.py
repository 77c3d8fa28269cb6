"""Every error gppo-sweep raises on purpose, under one root, each with its exit code.

``str(err)`` is always the single line the CLI prints on stderr: the file, the field and what is
allowed. The CLI maps an error to its exit code in one place (:func:`exit_code`)::

    GppoError                         exit 1 unless a branch says otherwise
    ├── SpecError         (ValueError)  exit 2  a grid spec: FILE: field.path: message
    │   └── TuneSpecError               exit 2  a tuning spec, same form
    ├── RegistryError     (ValueError)  exit 2
    │   ├── UnknownNameError (KeyError) exit 2  a name no registry knows; lists the known names
    │   └── DuplicateNameError          exit 2  a second registration under a taken name
    ├── BackendError      (ValueError)  exit 2  a backend's settings or overrides (verl config,
    │                                           data preparation, platform)
    ├── LaunchError                     exit 2  a launch refused before anything was submitted
    │   ├── StoreNotShared (ValueError) exit 2  a remote cluster with a store it cannot reach
    │   ├── LaunchBusy    (RuntimeError) exit 1 another launcher holds the sweep
    │   ├── SubmissionExists            exit 1  the cluster already has this job
    │   ├── SubmissionRefused           exit 1  Ray refused a job (its run ended FAILED)
    │   └── UnsafeRegistry              exit 2  the attempt registry is another user's or
    │                                           writable by others (gppo.processes)
    ├── ClusterUnreachable (RuntimeError) exit 1 the Ray cluster stopped answering mid-sweep
    │                                           (``ray.unreachable_timeout_s``); jobs left as
    │                                           they are, for a relaunch
    ├── TrackingUnreachable (RuntimeError) exit 1 the same for the tracking server
    │                                           (``tracking.unreachable_timeout_s``)
    ├── StoreFull         (RuntimeError) exit 1 the store's disk is full; a relaunch resumes
    ├── CredentialsRefused (RuntimeError) exit 2 a server refused the credentials (HTTP 401/403)
    │                                           or a URI's credentials clash with the variables
    ├── TuneError         (RuntimeError) exit 1 a study could not reach its trial count
    └── ReportError       (ValueError)  exit 2  bad report input (a CSV, a sweep id, a store)
        └── SweepNotFound               exit 2  no such sweep in the store

The builtin second bases (``ValueError``, ``KeyError``, ``RuntimeError``) keep ``except
ValueError`` working for callers that use the library without the CLI.
"""

from __future__ import annotations

#: exit code of a run that failed (a cell, a study) as opposed to bad input
EXIT_FAILED = 1
#: exit code of bad input (a spec, a name, a flag): nothing was started
EXIT_USAGE = 2
#: exit code after Ctrl-C
EXIT_INTERRUPTED = 130


class GppoError(Exception):
    """Root of gppo-sweep's errors; ``exit_code`` is what the CLI exits with."""

    exit_code = EXIT_FAILED

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class SpecError(GppoError, ValueError):
    """A malformed grid spec. ``str(err)`` is ``FILE: field.path: message``."""

    exit_code = EXIT_USAGE

    def __init__(self, file: str, path: str, message: str) -> None:
        self.file, self.path, self.message = file, path, " ".join(str(message).split())
        super().__init__(self.line)

    @property
    def line(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"{self.file}: {where}{self.message}"


class TuneSpecError(SpecError):
    """A malformed tuning spec; ``str(err)`` is one line, ``FILE: field.path: message``."""


class RegistryError(GppoError, ValueError):
    """A registry lookup or registration that cannot be honoured."""

    exit_code = EXIT_USAGE


class UnknownNameError(RegistryError, KeyError):
    """An unknown name: a KeyError (registry lookup) and a ValueError (bad argument) at once."""


class DuplicateNameError(RegistryError):
    """A second registration under a name that is taken."""


class BackendError(GppoError, ValueError):
    """A backend refuses a cell's settings or overrides (one line)."""

    exit_code = EXIT_USAGE


class LaunchError(GppoError):
    """A launch refused before anything was submitted (one line)."""

    exit_code = EXIT_USAGE


class StoreNotShared(LaunchError, ValueError):
    """A remote cluster's jobs could not reach the tracking store (one-line message)."""


class LaunchBusy(LaunchError, RuntimeError):
    """Another launcher holds this sweep (one-line message)."""

    exit_code = EXIT_FAILED


class SubmissionExists(LaunchError, RuntimeError):
    """The cluster already has a job with this submission id."""

    exit_code = EXIT_FAILED


class SubmissionRefused(LaunchError, RuntimeError):
    """Ray answered a job submission with a refusal (a runtime env it rejects, a server error);
    the attempt's run was ended FAILED with the reason. ``attempt``: the attempt number used."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, attempt: int = 0) -> None:
        super().__init__(message)
        self.attempt = attempt


class UnsafeRegistry(LaunchError, RuntimeError):
    """The attempt registry (:func:`gppo.processes.registry`) is not a folder of this user's that
    only they can write: another local user could plant entries in it and have an attempt's end
    signal their victim's processes. Nothing is registered, signalled or launched through it."""


class ClusterUnreachable(GppoError, RuntimeError):
    """The Ray cluster has not answered for longer than ``ray.unreachable_timeout_s`` (one line);
    the launcher stopped and left the cells' runs and jobs for a relaunch to settle."""


class TrackingUnreachable(GppoError, RuntimeError):
    """The tracking server has not answered the launcher for longer than
    ``tracking.unreachable_timeout_s`` (one line); the jobs and their runs are left for a
    relaunch to settle."""


class StoreFull(GppoError, RuntimeError):
    """The tracking store's disk is full: the launch stops (its jobs and runs are left as they
    are) and a relaunch once there is room resumes the sweep."""


class CredentialsRefused(GppoError, RuntimeError):
    """A server (the tracking server) refused the credentials this process sent, or sent none
    (HTTP 401), or refused their user the request (HTTP 403); or a URI's user and password clash
    with the credential variables already set. One line naming the server, never a password;
    nothing was submitted. Not an ``OSError``: the server answered, it is not unreachable."""

    exit_code = EXIT_USAGE


class TuneError(GppoError, RuntimeError):
    """The study could not reach its trial count (too many failed trials)."""


class ReportError(GppoError, ValueError):
    """Bad report input; one line naming the file, row/column and what is allowed."""

    exit_code = EXIT_USAGE


class SweepNotFound(ReportError):
    """No parent run of that sweep id in the store; one line: the store, the sweep id and where
    it was looked for."""


def exit_code(exc: BaseException) -> int:
    """The CLI's exit code for ``exc``: its class's ``exit_code``, 130 for Ctrl-C, else 1."""
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return getattr(exc, "exit_code", EXIT_FAILED)
