"""The base model's step-0 evaluation is computed once per machine, and only reused when
everything it depends on is the same."""

from __future__ import annotations

from gppo.backends.local.settings import LocalSettings
from gppo.testbed.base_eval import base_eval_key, cached_base_eval
from gppo.testbed.warmstart import load_base_model


def _counting(result: dict[str, float]):
    calls = []

    def evaluate() -> dict[str, float]:
        calls.append(1)
        return dict(result)

    return evaluate, calls


def test_computed_once_then_reused(tmp_path) -> None:
    s = LocalSettings(domain="math", cache_dir=str(tmp_path))
    base = load_base_model(s, say=lambda _l: None)
    evaluate, calls = _counting({"add": 0.25, "sub": 0.5})
    first = cached_base_eval(base, s, ["add", "sub"], 8, evaluate)
    second = cached_base_eval(base, s, ["add", "sub"], 8, evaluate)
    assert first == ({"add": 0.25, "sub": 0.5}, False)
    assert second == ({"add": 0.25, "sub": 0.5}, True)
    assert len(calls) == 1


def test_key_follows_what_the_numbers_depend_on(tmp_path) -> None:
    s = LocalSettings(domain="math", cache_dir=str(tmp_path))
    base = load_base_model(s, say=lambda _l: None)
    key = base_eval_key(base, s, ["add"], 8)
    assert key == base_eval_key(base, s, ["add"], 8)
    others = {
        base_eval_key(base, s, ["sub"], 8),
        base_eval_key(base, s, ["add"], 4),
        base_eval_key(base, s.model_copy(update={"num_threads": 2}), ["add"], 8),
        base_eval_key(base, s.model_copy(update={"eval_seed": 7}), ["add"], 8),
        base_eval_key(base, s.model_copy(update={"eval_prompts": 3}), ["add"], 8),
    }
    assert key not in others and len(others) == 5


def test_a_corrupt_entry_is_recomputed(tmp_path) -> None:
    s = LocalSettings(domain="math", cache_dir=str(tmp_path))
    base = load_base_model(s, say=lambda _l: None)
    evaluate, calls = _counting({"add": 0.125})
    cached_base_eval(base, s, ["add"], 8, evaluate)
    (entry,) = (tmp_path / "evals").glob("*.json")
    entry.write_text('{"add": "not a number"')
    assert cached_base_eval(base, s, ["add"], 8, evaluate) == ({"add": 0.125}, False)
    assert len(calls) == 2
