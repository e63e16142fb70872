"""The benchmark report's decode-only limit (bench/run.py): timed before and after the pipelines,
the limit is the mean of the two medians, and the ratios in the table use it."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _load_run():
    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_run"] = module
    spec.loader.exec_module(module)
    return module


def _result(rate: float) -> dict:
    return {"ok": True, "median_ex_per_s": rate, "runs": [{"ex_per_s": rate}], "peak_rss_mib": 100}


def _doc(after: bool) -> dict:
    doc = {"workload": "w3", "cores": [1, 2], "decoders": ["decode-only: stoker", "decode-only: PIL"],
           "limit_decoder": "decode-only: stoker",
           "decode": {"decode-only: stoker": _result(1200.0), "decode-only: PIL": _result(800.0)},
           "results": {"stoker": {"1": _result(1100.0), "2": _result(2200.0)}}}
    if after:
        doc["decode_after"] = {"decode-only: stoker": _result(1000.0)}
    return doc


def test_limit_is_the_mean_of_before_and_after() -> None:
    run = _load_run()
    assert run.limit_rate(_doc(after=True)) == 1100.0
    # Other decoders, and results written before the second timing existed, use their one median.
    assert run.limit_rate(_doc(after=True), "decode-only: PIL") == 800.0
    assert run.limit_rate(_doc(after=False)) == 1200.0


def test_table_shows_both_timings_and_ratios_against_the_mean() -> None:
    run = _load_run()
    doc = _doc(after=True)
    s = {c: doc["results"]["stoker"][str(c)] for c in doc["cores"]}
    text = "\n".join(run.decode_section(doc, s))
    row = next(line for line in text.splitlines() if line.startswith("| **decode-only: stoker**"))
    assert "1,200" in row and "after: 1,000" in row
    # 1,100 / 1,100 and 2,200 / (1,100 × 2): both 100 %, met; against 1,200 they would be 92 %.
    assert row.endswith("| 1,100 | 2,200 | 100% | 100% |"), row
    assert "1c 100% (met), 2c 100% (met)" in text
