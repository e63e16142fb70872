"""Two builds of the extension on one workload, in alternating runs: which is faster, which holds less.

    python bench/ab_builds.py --a /tmp/build-a --b /tmp/build-b --labels thp no_thp \\
        --workload w3 --rounds 5 --out bench/results/ab_thp.json

`--a` and `--b` are folders that hold a `stoker` package (the Python files and a built
`_stoker` extension); each run imports the one it is given (first on `PYTHONPATH`), with what
`--env-a` / `--env-b` add to its environment (the same build twice with two allocator settings,
say). Each round runs the stoker contender of `bench_child.py` once per build and core count,
the two builds in the order A, B on even rounds and B, A on odd ones, pinned with `taskset` like
`run.py`'s children, on the data `run.py` generated (its `--data-dir`). Reported per build and core count:
the median over rounds of each run's median images (or examples) per second and of its peak
RSS, and B's ratio to A. Only ratios from one run count: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import CHILD_WORKLOAD, THREAD_VARS  # noqa: E402


def one(build: Path, extra_env: dict, workload: str, cores: int, data_dir: str, runs: int, out: Path) -> dict:
    cmd = ["taskset", "-c", ",".join(str(c) for c in range(cores)), sys.executable,
           str(HERE / "bench_child.py"), "--workload", CHILD_WORKLOAD.get(workload, workload),
           "--contender", "stoker", "--cores", str(cores), "--data-dir", data_dir,
           "--runs", str(runs), "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=str(build), PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="")
    env.update({v: str(cores) for v in THREAD_VARS})
    env.update(extra_env)
    subprocess.run(cmd, check=True, env=env, cwd=HERE.parent, stdout=subprocess.DEVNULL)
    res = json.loads(out.read_text())
    if not res.get("ok"):
        raise SystemExit(f"{build}: {res.get('error')}")
    return {"ex_per_s": res["median_ex_per_s"], "peak_rss_mib": res["self_maxrss_mib"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, type=Path)
    ap.add_argument("--b", required=True, type=Path)
    ap.add_argument("--labels", nargs=2, default=["A", "B"])
    ap.add_argument("--env-a", nargs="*", default=[], metavar="KEY=VALUE", help="environment of A's runs")
    ap.add_argument("--env-b", nargs="*", default=[], metavar="KEY=VALUE", help="environment of B's runs")
    ap.add_argument("--workload", default="w3")
    ap.add_argument("--cores", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3, help="timed passes per child")
    ap.add_argument("--data-dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "stoker-bench-data",
                                                       "w3-3000"))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    for build in (args.a, args.b):
        if not (build / "stoker").is_dir():
            raise SystemExit(f"--a/--b: {build} holds no `stoker` package")
    builds = dict(zip(args.labels, (args.a, args.b)))
    envs = {}
    for label, pairs, flag in zip(args.labels, (args.env_a, args.env_b), ("--env-a", "--env-b")):
        if not all("=" in p for p in pairs):
            raise SystemExit(f"{flag}: KEY=VALUE pairs expected, got {pairs}")
        envs[label] = dict(p.split("=", 1) for p in pairs)
    got: dict[str, dict[int, list[dict]]] = {k: {c: [] for c in args.cores} for k in builds}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = list(builds) if r % 2 == 0 else list(builds)[::-1]
            for cores in args.cores:
                for label in order:
                    res = one(builds[label], envs[label], args.workload, cores, args.data_dir, args.runs,
                              Path(tmp) / "r.json")
                    got[label][cores].append(res)
                    print(f"round {r} {label} {cores}c: {res['ex_per_s']:.0f}/s, {res['peak_rss_mib']:.0f} MiB",
                          flush=True)
    a, b = args.labels
    summary = {}
    for cores in args.cores:
        med = {k: {m: float(np.median([x[m] for x in got[k][cores]])) for m in ("ex_per_s", "peak_rss_mib")}
               for k in builds}
        summary[str(cores)] = {**med, f"{b}/{a}": {m: med[b][m] / med[a][m] for m in ("ex_per_s", "peak_rss_mib")}}
    doc = {"workload": args.workload, "builds": {k: str(v) for k, v in builds.items()}, "env": envs,
           "rounds": args.rounds,
           "runs_per_child": args.runs, "data_dir": args.data_dir, "started": started,
           "ended": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
           "load_avg": os.getloadavg()[0], "command": "python bench/ab_builds.py " + " ".join(sys.argv[1:]),
           "summary": summary, "runs": got}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
