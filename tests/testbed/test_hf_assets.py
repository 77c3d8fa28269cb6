"""The testbed as a Hugging Face task, per base: a member of the base family picked by its
warm-start target gets its own assets, and the exported model is that base's shipped weights."""

from __future__ import annotations

import pytest
import torch

from gppo.testbed import hf_assets
from gppo.testbed.hf_export import import_policy
from gppo.testbed.settings import base_settings
from gppo.testbed.shipped import SHIPPED_DIR
from gppo.testbed.warmstart import load_policy, warmstart_hash


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPPO_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_each_base_has_its_own_assets_under_the_cache_root(cache):
    default = hf_assets.TestbedAssets.for_domain("math")
    low = hf_assets.TestbedAssets.for_domain("math", 0.03)
    assert default.root != low.root
    assert low.root.parent == default.root.parent
    assert low.root.is_relative_to(cache)
    assert low.root.name == f"math-{warmstart_hash(base_settings('math', 0.03))}"


def test_the_exported_model_of_target_0_03_is_the_shipped_base(cache):
    assets = hf_assets.build_testbed_assets("math", warmstart_target=0.03)
    shipped = SHIPPED_DIR / "base-math-target0.03.pt"
    assert str(shipped) in assets.complete.read_text()  # loaded, not built
    exported = import_policy(assets.model_dir).state_dict()
    stored = load_policy(base_settings("math", 0.03), shipped).state_dict()
    assert exported.keys() == stored.keys()
    for name, value in stored.items():
        assert torch.equal(exported[name], value), name
    default = load_policy(base_settings("math"), SHIPPED_DIR / "base-math.pt").state_dict()
    assert any(not torch.equal(exported[k], v) for k, v in default.items())
    assert {b: assets.benchmark_file(b).is_file() for b in assets.benchmarks} == {
        b: True for b in assets.benchmarks
    }
