"""Backends turn a Cell into a Job (argv, env, resources). See :mod:`gppo.backends.base`."""

from gppo.backends.base import Backend, Job, Resources, get_backend, register_backend

__all__ = ["Backend", "Job", "Resources", "get_backend", "register_backend"]
