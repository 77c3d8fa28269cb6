"""``gppo-sweep data prepare``: the user's JSONL / Parquet files -> verl's RL parquet schema.

A shared backend module: verl's ``RLHFDataset`` and TRL's ``testbed: false`` route
(:mod:`gppo.backends.trl.realmodel`) read the same files. One row per prompt::

    data_source   str                 selects the scorer (:mod:`gppo.backends.rewards`) and names the eval metric
    prompt        list[{role, content}]  chat messages (the tokenizer's chat template applies)
    ability       str                 "math" | "code"
    reward_model  {"style": "rule", "ground_truth": str}
    extra_info    {"index": int, "split": str, "source_row": int, "id": str}

Accepted inputs, per row (first match wins):

* prompt: ``prompt`` as chat messages (DAPO-Math-17k and Eurus-2 are shipped that way), or a
  string in ``prompt`` / ``problem`` / ``question``, wrapped in the domain's instruction (the
  DAPO answer format for math, a fenced Python block for code) as one user message;
* math answer: ``reward_model.ground_truth`` / ``ground_truth`` / ``answer`` (str or number);
* code tests: ``reward_model.ground_truth`` / ``ground_truth`` / ``input_output`` /
  ``test_cases`` / ``tests``: a JSON object (or its string) with equal-length ``inputs`` and
  ``outputs`` lists (optional ``fn_name``), stored as a JSON string (verl's code scorer input).

A row that cannot be converted is never dropped silently: by default nothing is written and the
error lists every bad row (row number and reason); with ``skip_invalid`` the good rows are
written and the bad ones go to ``<output>.rejects.jsonl`` with their reasons.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gppo.backends.base import DataReport
from gppo.backends.rewards import CODE_SCORERS, SCORER_OF
from gppo.errors import BackendError

#: Evaluation benchmarks per domain (the paper's Table 1 columns), in report order.
DOMAIN_BENCHMARKS: dict[str, tuple[str, ...]] = {
    "math": ("aime24", "aime25", "brumo25", "smt25"),
    "code": ("codeforces", "codecontests", "taco", "apps"),
}


def default_benchmarks(domain: str, val_files: Mapping[str, str]) -> tuple[str, ...]:
    """The benchmarks a cell of a prepared-data route evaluates when its spec names none: the
    domain's paper benchmarks among ``val_files`` (in report order), else every ``val_files`` key
    (verl's and TRL's ``testbed: false`` rule)."""
    paper = tuple(b for b in DOMAIN_BENCHMARKS[domain] if b in val_files)
    return paper or tuple(val_files)


MATH_TEMPLATE = (
    "Solve the following math problem step by step. The last line of your response should be of "
    "the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
    '{problem}\n\nRemember to put your answer on its own line after "Answer:".'
)
CODE_TEMPLATE = (
    "{problem}\n\nWrite Python code to solve the problem. Present the code in \n```python\n"
    "Your code\n```\nat the end."
)
PROMPT_KEYS = ("prompt", "problem", "question")
MATH_ANSWER_KEYS = ("ground_truth", "answer")
CODE_TEST_KEYS = ("ground_truth", "input_output", "test_cases", "tests")


class DataPrepError(BackendError):
    """The input cannot be converted (the message names the file and the bad rows)."""


def domain_of(data_source: str) -> str:
    """``math`` or ``code`` for one of our data_source names (unknown names list the known)."""
    try:
        scorer = SCORER_OF[data_source]
    except KeyError:
        raise DataPrepError(
            f"unknown data source {data_source!r}; known: {', '.join(sorted(SCORER_OF))}"
        ) from None
    return "code" if scorer in CODE_SCORERS else "math"


def read_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """``(row number, row)`` from ``.jsonl`` / ``.json`` (a list) / ``.parquet``; bad JSON lines
    come through as ``(n, DataPrepError)`` so they are reported like any other bad row."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pandas as pd

        frame = pd.read_parquet(path)
        for i, row in enumerate(frame.to_dict(orient="records"), start=1):
            # a column missing in some rows reads back as NaN: that is "absent", not a value
            yield i, {k: None if _is_nan(v) else v for k, v in _plain(row).items()}
    elif suffix in (".jsonl", ".ndjson"):
        with path.open(encoding="utf-8") as handle:
            for i, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    yield i, json.loads(line)
                except json.JSONDecodeError as exc:
                    yield i, DataPrepError(f"invalid JSON ({exc.msg} at column {exc.colno})")
    elif suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, list):
            raise DataPrepError(f"{path}: a .json input must hold a list of rows")
        yield from enumerate(data, start=1)
    else:
        raise DataPrepError(
            f"{path}: unsupported input type {suffix!r}; use .jsonl, .json or .parquet"
        )


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _plain(value: Any) -> Any:
    """numpy arrays / scalars from parquet -> plain Python."""
    if hasattr(value, "tolist") and not isinstance(value, str | bytes):
        value = value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _first(row: dict[str, Any], keys: tuple[str, ...]) -> Any:
    reward_model = row.get("reward_model")
    if (
        "ground_truth" in keys
        and isinstance(reward_model, dict)
        and reward_model.get("ground_truth") is not None
    ):
        return reward_model["ground_truth"]
    for key in keys:
        if row.get(key) is not None:
            return row[key]
    return None


def _prompt(row: dict[str, Any], domain: str) -> list[dict[str, str]]:
    raw = next((row[k] for k in PROMPT_KEYS if row.get(k) is not None), None)
    if raw is None:
        raise DataPrepError(f"no prompt (expected one of: {', '.join(PROMPT_KEYS)})")
    if isinstance(raw, str):
        if not raw.strip():
            raise DataPrepError("empty prompt")
        template = MATH_TEMPLATE if domain == "math" else CODE_TEMPLATE
        return [{"role": "user", "content": template.format(problem=raw.strip())}]
    if isinstance(raw, list) and raw:
        messages = []
        for j, message in enumerate(raw):
            if not (
                isinstance(message, dict)
                and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)
            ):
                raise DataPrepError(f"prompt message {j} is not {{role: str, content: str}}")
            messages.append({"role": message["role"], "content": message["content"]})
        return messages
    raise DataPrepError(
        f"prompt must be a string or a list of chat messages, got {type(raw).__name__}"
    )


def _math_answer(row: dict[str, Any]) -> str:
    answer = _first(row, MATH_ANSWER_KEYS)
    if isinstance(answer, bool) or answer is None:
        raise DataPrepError(
            f"no answer (expected one of: reward_model.ground_truth, {', '.join(MATH_ANSWER_KEYS)})"
        )
    if isinstance(answer, float):
        if not math.isfinite(answer):
            raise DataPrepError(f"answer is not finite: {answer}")
        answer = int(answer) if answer.is_integer() else answer
    if isinstance(answer, int | float):
        return str(answer)
    if isinstance(answer, str) and answer.strip():
        return answer.strip()
    raise DataPrepError(f"answer must be a non-empty string or a number, got {answer!r}")


def _code_tests(row: dict[str, Any]) -> str:
    tests = _first(row, CODE_TEST_KEYS)
    if tests is None:
        raise DataPrepError(
            f"no test cases (expected one of: reward_model.ground_truth, {', '.join(CODE_TEST_KEYS)})"
        )
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError as exc:
            raise DataPrepError(f"test cases are not valid JSON ({exc.msg})") from None
    if not isinstance(tests, dict):
        raise DataPrepError("test cases must be a JSON object with 'inputs' and 'outputs'")
    inputs, outputs = tests.get("inputs"), tests.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise DataPrepError("test cases need 'inputs' and 'outputs' lists")
    if not inputs or len(inputs) != len(outputs):
        raise DataPrepError(
            f"test cases need as many outputs as inputs, at least one (got {len(inputs)} inputs, "
            f"{len(outputs)} outputs)"
        )
    return json.dumps(tests, ensure_ascii=False)


def convert_row(row: Any, index: int, data_source: str, domain: str, split: str) -> dict[str, Any]:
    """One input row -> one verl row (raises :class:`DataPrepError` with the reason)."""
    if isinstance(row, DataPrepError):
        raise row
    if not isinstance(row, dict):
        raise DataPrepError(f"row is a {type(row).__name__}, not an object")
    prompt = _prompt(row, domain)
    truth = _math_answer(row) if domain == "math" else _code_tests(row)
    row_id = row.get("id", row.get("problem_id", (row.get("extra_info") or {}).get("index")))
    return {
        "data_source": data_source,
        "prompt": prompt,
        "ability": domain,
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": {
            "index": index,
            "split": split,
            "source_row": index + 1,
            "id": "" if row_id is None else str(row_id),
        },
    }


def prepare(
    input_path: str | Path,
    output_path: str | Path,
    data_source: str,
    *,
    split: str = "train",
    skip_invalid: bool = False,
) -> DataReport:
    """Convert ``input_path`` into verl's parquet at ``output_path`` (see the module doc)."""
    src, dst = Path(input_path), Path(output_path)
    if not src.is_file():
        raise DataPrepError(f"{src}: no such file")
    domain = domain_of(data_source)
    rows: list[dict[str, Any]] = []
    report = DataReport()
    for number, raw in read_rows(src):
        try:
            rows.append(convert_row(raw, number - 1, data_source, domain, split))
        except DataPrepError as exc:
            report.rejected.append((number, str(exc)))
    if report.rejected and not skip_invalid:
        shown = "; ".join(f"row {n}: {why}" for n, why in report.rejected[:5])
        more = f"; ... and {len(report.rejected) - 5} more" if len(report.rejected) > 5 else ""
        raise DataPrepError(
            f"{src}: {len(report.rejected)} of {len(report.rejected) + len(rows)} rows cannot be "
            f"converted ({shown}{more}); fix them or pass --skip-invalid to write the rest and "
            "list these in a rejects file. Nothing was written."
        )
    if not rows:
        raise DataPrepError(f"{src}: no rows to write")
    import pandas as pd

    dst.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(dst, index=False)
    report.written, report.output = len(rows), dst
    if report.rejected:
        report.rejects_file = dst.with_name(dst.name + ".rejects.jsonl")
        with report.rejects_file.open("w", encoding="utf-8") as handle:
            for number, why in report.rejected:
                handle.write(json.dumps({"row": number, "reason": why}) + "\n")
    return report
