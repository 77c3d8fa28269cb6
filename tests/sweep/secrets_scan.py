"""Search everything a run left for a secret: files (any bytes: SQLite databases, artifacts,
report files, state dirs, logs), texts (a command's output, Ray's job info and job logs) and
PostgreSQL databases (every row of every table, as JSON text).

A secret is looked for as written and percent-encoded (as it would stand in a URI), and as the
base64 of ``user:secret`` when a user is given (an HTTP basic-auth header). Each hit is named
``where: ...context...`` with the secret itself masked, so a failing test never prints it.
"""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path


def forms(secret: str, user: str | None = None) -> list[bytes]:
    """The byte strings ``secret`` may be found as."""
    out = {secret.encode(), urllib.parse.quote(secret, safe="").encode()}
    if user is not None:
        out.add(base64.b64encode(f"{user}:{secret}".encode()))
    return sorted(out)


def _hits_in(data: bytes, where: str, needles: list[bytes]) -> list[str]:
    hits = []
    for needle in needles:
        at = data.find(needle)
        if at >= 0:
            around = data[max(0, at - 60) : at + len(needle) + 60].replace(needle, b"<SECRET>")
            hits.append(f"{where}: ...{around.decode('utf-8', 'replace')}...")
    return hits


def scan(
    secrets: Iterable[str | tuple[str, str]],
    *,
    paths: Iterable[Path] = (),
    texts: Mapping[str, str] | None = None,
    postgres: Iterable[str] = (),
) -> list[str]:
    """Every place a secret was found (``[]``: none). ``secrets``: a secret, or ``(user,
    secret)``; ``paths``: files or folders (searched whole, every file's bytes; a file that
    cannot be read is a hit, so nothing is skipped silently); ``texts``: name -> text;
    ``postgres``: connection strings (libpq's; the password from ``PGPASSWORD``) of databases
    whose every table is read."""
    needles: list[bytes] = []
    for s in secrets:
        user, secret = s if isinstance(s, tuple) else (None, s)
        needles += forms(secret, user)
    hits: list[str] = []
    for root in paths:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for f in files:
            if f.is_symlink():
                continue
            try:
                data = f.read_bytes()
            except OSError as exc:
                hits.append(f"{f}: unreadable ({exc})")
                continue
            hits += _hits_in(data, str(f), needles)
    for name, text in (texts or {}).items():
        hits += _hits_in(text.encode(), name, needles)
    for dsn in postgres:
        hits += _scan_postgres(dsn, needles)
    return hits


def _scan_postgres(dsn: str, needles: list[bytes]) -> list[str]:
    import psycopg

    hits: list[str] = []
    with psycopg.connect(dsn) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
        for schema, table in tables:
            rows = conn.execute(f'SELECT row_to_json(t)::text FROM "{schema}"."{table}" t')
            data = "\n".join(r[0] for r in rows).encode()
            hits += _hits_in(data, f"{dsn.rsplit('/', 1)[-1]}.{table}", needles)
    return hits
