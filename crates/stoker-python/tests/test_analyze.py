"""`stoker.analyze` and `stoker analyze` on the real ResNet-50 traces (tests/traces/)."""

import json
import os
import subprocess
from pathlib import Path

import pytest
import stoker as sk

TRACES = Path(__file__).resolve().parents[3] / "tests" / "traces"


def resnet(workers):
    return next((TRACES / "pytorch" / "kineto_tb_samples").glob(f"resnet50_num_workers_{workers}.*"))


def test_input_bound_only_without_dataloader_workers():
    a0, a4 = sk.analyze(resnet(0)), sk.analyze(resnet(4))
    assert a0.verdict == "highly input-bound" and 35 < a0.input_percent < 45
    assert a4.verdict == "not input-bound" and a4.input_percent < 2
    assert a0.idle_ms_per_step_by_cause["input"] > 50  # ms per step the GPU waits for data
    more_workers = [r for r in a0.recommendations if "DataLoader workers" in r["action"]]
    assert more_workers and "% of each step" in more_workers[0]["evidence"]
    assert not any("DataLoader workers" in r["action"] for r in a4.recommendations)
    assert "highly input-bound" in str(a0)


def test_cli_text_and_json():
    stoker_bin = os.environ.get("STOKER_BIN")
    assert stoker_bin and os.path.exists(stoker_bin), "STOKER_BIN must point at the built `stoker` binary"
    r = subprocess.run(
        [stoker_bin, "analyze", "--json", str(resnet(0)), str(resnet(4))], capture_output=True, text=True, check=True
    )
    reports = json.loads(r.stdout)
    assert [x["verdict"] for x in reports] == ["highly input-bound", "not input-bound"]
    text = subprocess.run([stoker_bin, "analyze", str(resnet(0))], capture_output=True, text=True, check=True).stdout
    assert "verdict: highly input-bound" in text and "DataLoader workers" in text
    bad = subprocess.run([stoker_bin, "analyze", str(TRACES / "README.md")], capture_output=True, text=True)
    assert bad.returncode == 2 and "README.md" in bad.stderr and "line 1" in bad.stderr


def test_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        sk.analyze(tmp_path / "missing.json")
    p = tmp_path / "cut.json"
    p.write_text('{"traceEvents": [{"ph": "X"')
    with pytest.raises(ValueError, match="cut.json: not a readable trace at line 1"):
        sk.analyze(p)
