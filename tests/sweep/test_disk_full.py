"""A disk that fills up under the store's directory (a small tmpfs the test mounts): the launcher
ends with one clear line, and a relaunch once there is room again finishes the sweep."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from gppo.grid import load_plan

from .conftest import (
    env_without_ray,
    launcher_cmd,
    relaunch_finishes_each_cell_once,
    wait_for,
    write_spec,
)

pytestmark = pytest.mark.slow  # Ray jobs and a launcher process

SIZE = "64m"


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 64 MB tmpfs mounted at tmp_path/disk (root and mount privileges needed)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", f"gppo-{uuid.uuid4().hex[:6]}", str(mnt)],
        capture_output=True, text=True,
    )  # fmt: skip
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({made.stderr.strip() or made.returncode})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(disk: Path) -> Path:
    """Write a file until the disk is full; returns it (delete it to make room)."""
    filler = disk / "filler"
    with open(filler, "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * (1 << 20))
                fh.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_ends_the_launch_in_one_line_and_a_relaunch_resumes(
    tmp_path, small_disk, ray_cluster
):
    spec = write_spec(
        tmp_path, ray_cluster.address, name="full",
        probe={"steps": 6, "sleep_s": 0.5, "marker_dir": str(tmp_path / "m")},
        grid={"divergences": ["tv", "kl", "chi2"], "estimators": ["mc"]},
        ray={"address": ray_cluster.address, "max_concurrent": 1},
        tracking={"uri": f"sqlite:///{small_disk}/mlflow.db"},
    )  # fmt: skip
    plan = load_plan(spec)
    out = tmp_path / "launch.out"
    with open(out, "w") as fo:
        proc = subprocess.Popen(
            [*launcher_cmd(), "launch", str(spec)], stdout=fo, stderr=subprocess.STDOUT,
            env=env_without_ray(), cwd=tmp_path,
        )  # fmt: skip
    try:
        wait_for(lambda: (tmp_path / "m" / "tv-mc-s0.times").exists(), 120, "the first cell")
        filler = _fill(small_disk)
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = out.read_text()
    assert rc == 1, text[-3000:]
    # the launcher's own word is one line, the last (MLflow logs the SQL error above it)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert lines[-1].startswith(f"{spec}: the tracking store's disk is full (sqlite:"), lines[-5:]
    assert "database or disk is full); the launch stopped" in lines[-1]
    assert sum("the tracking store's disk is full" in ln for ln in lines) == 1

    os.unlink(filler)  # room again
    relaunch_finishes_each_cell_once(spec, plan, f"sqlite:///{small_disk}/mlflow.db", tmp_path)
    shutil.rmtree(tmp_path / "m", ignore_errors=True)
