"""The HTML report: self-contained, with its plots, stage table and verdict."""

import os
import re
import subprocess
from html.parser import HTMLParser

import numpy as np
import stoker as sk


class Parsed(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = {}
        self.attrs = []
        self.text = []
        self.stack = []

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.attrs += attrs
        self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag in self.stack:
            while self.stack and self.stack.pop() != tag:
                pass

    def handle_data(self, data):
        self.text.append(data)


def parse(path):
    doc = Parsed()
    doc.feed(path.read_text(encoding="utf-8"))
    return doc, " ".join(doc.text)


def slow(x):
    return np.full(3000, x, dtype=np.float64).cumsum()


def test_report_of_a_pipeline_and_a_training_loop(tmp_path):
    # Enough elements that the 0.6 s run never ends with the dataset (a verdict needs 0.3 s).
    ds = sk.Dataset.range(100_000).with_options(threads=2).map(slow).batch(4)
    timer = sk.timed(ds.take(30), warmup=2)
    for _ in timer:
        pass
    path = tmp_path / "report.html"
    ds.report(path, seconds=0.6, steps=timer.report(), title="<slow> & co")
    doc, text = parse(path)
    html = path.read_text(encoding="utf-8")
    # Self-contained: no scripts, no external resources.
    assert doc.tags.get("script", 0) == 0
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    # Step time, throughput and buffer-fill plots with drawn marks.
    assert doc.tags["svg"] == 3, doc.tags
    assert doc.tags["rect"] >= 2 * 28 and doc.tags["polyline"] >= 2
    for heading in ("Verdict", "Step time (training loop)", "Throughput", "Buffer fill", "Stages"):
        assert heading in text, heading
    # The verdict names the stage, recommends its fix and shows the step timer's verdict.
    # The busiest stage, named as the limit (or, on a loaded machine, as the busiest of stages
    # none of which is saturated) and marked in the table.
    assert "'map[slow]' limits throughput" in text or "the busiest, 'map[slow]'" in text, text
    assert "map[slow] ◀ bottleneck" in text
    assert "raise the parallelism of 'map[slow]'" in text or "native ops" in text
    assert "input-bound" in text
    assert "&lt;slow&gt; &amp; co" in html  # the title is escaped


def test_cli_bench_writes_the_report(tmp_path):
    stoker_bin = os.environ.get("STOKER_BIN")
    assert stoker_bin and os.path.exists(stoker_bin), "STOKER_BIN must point at the built `stoker` binary"
    spec = tmp_path / "p.json"
    sk.Dataset.range(1_000_000).map(sk.ops.cast("value", np.float32)).batch(64).save_spec(spec)
    out = tmp_path / "bench.html"
    subprocess.run(
        [stoker_bin, "bench", str(spec), "--seconds", "0.5", "--report", str(out)], check=True, capture_output=True
    )
    doc, text = parse(out)
    assert doc.tags["svg"] == 3 and "Time to get each element" in text and "Stages" in text


def wait(x):
    import time

    time.sleep(0.004)
    return x


def test_report_shows_the_tuner_s_moves(tmp_path):
    ds = sk.Dataset.range(10**7).with_options(threads=2).map(wait, num_parallel_calls=sk.AUTOTUNE).batch(4)
    path = tmp_path / "tuned.html"
    ds.report(path, seconds=3.0)
    doc, text = parse(path)
    assert "AUTOTUNE: knob values" in text and "AUTOTUNE: the tuner's moves" in text
    # The moves: when, the stage's knob, the values it went through, and why.
    row = r"<tr><td>(-?[\d.]+)</td><td>map\[wait\][^<]*: num_parallel_calls</td><td>(\d+)</td>"
    moves = re.findall(row, path.read_text())
    assert len(moves) >= 2, text
    assert any(int(v) > 2 for _, v in moves)
    assert "tuning: trying" in text
    untuned = tmp_path / "untuned.html"
    ds.with_options(autotune=False).report(untuned, seconds=0.5)
    assert "AUTOTUNE: the tuner" not in parse(untuned)[1]
