"""Many ranks on one machine: each rank of a data-parallel job makes only its share of the
epoch (the planner's `shard_down` moves the rank's shard towards the source), the shares are
disjoint and together one epoch, every rank gets as many batches, an element gets the same
random crop whatever the number of ranks, a rank resumes exactly, and the thread budget is the
rank's share of the cores (affinity mask, LOCAL_WORLD_SIZE, the job's process group)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import stoker as sk
from stoker import torch as skt

N = 48  # divisible by 1, 2 and 3 ranks (and 48 / 3 = 16 by the batch of 4)


def images(n: int = N) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {"id": np.arange(n, dtype=np.int64), "img": rng.integers(0, 255, (n, 12, 10, 3), dtype=np.uint8)}


def augment() -> list[Any]:
    return [
        sk.ops.random_resized_crop("img", 6, seed=11),
        sk.ops.random_flip_left_right("img", seed=12),
    ]


def write_tfrecord(path: Path, n: int = N) -> str:
    with sk.io.TFRecordWriter(str(path)) as w:
        for i in range(n):
            w.write(sk.io.serialize_example({"id": i}))
    return str(path)


def pipeline(kind: str, tmp_path: Path | None = None, n: int = N) -> sk.Dataset:
    if kind.startswith("tfrecord"):
        assert tmp_path is not None
        path = write_tfrecord(tmp_path / "ids.tfrecord", n)
        # Its count is unknown to the plan: the records are counted through their index.
        ds = sk.TFRecordDataset([path])
        ds = ds.global_shuffle(seed=3) if kind == "tfrecord" else ds.shuffle(20, seed=3)
        ds = ds.map([sk.ops.parse_example({"id": sk.FixedLenFeature([], sk.int64)})], num_parallel_calls=sk.AUTOTUNE)
        return ds.batch(4).prefetch(2)
    ds = sk.Dataset.from_tensor_slices(images(n))
    if kind == "shuffle":
        ds = ds.shuffle(20, seed=3)
    elif kind == "global_shuffle":
        ds = ds.global_shuffle(seed=3)
    return ds.map(augment(), num_parallel_calls=sk.AUTOTUNE).batch(4).prefetch(2)


def rank_batches(ds: sk.Dataset, rank: int, world: int, epoch: int = 0) -> tuple[int, list[dict[str, np.ndarray]], Any]:
    loader = skt.loader(ds, shard=(rank, world))
    loader.set_epoch(epoch)
    batches = [{k: v.numpy() for k, v in b.items()} for b in loader]
    return len(loader), batches, loader


def stage_elements(loader: Any, kind: str) -> int:
    return sum(s["elements"] for s in loader._sharded.stats() if s["kind"] == kind)


@pytest.mark.parametrize("kind", ["none", "shuffle", "global_shuffle", "tfrecord", "tfrecord_shuffle"])
@pytest.mark.parametrize("world", [2, 3])
def test_each_rank_makes_only_its_share_and_together_one_epoch(kind, world, tmp_path):
    whole = [int(i) for b in pipeline(kind, tmp_path) for i in b["id"]]
    assert sorted(whole) == list(range(N))
    ids: list[int] = []
    lengths = set()
    for rank in range(world):
        length, batches, loader = rank_batches(pipeline(kind, tmp_path), rank, world)
        mine = [int(i) for b in batches for i in b["id"]]
        assert length == len(batches), "len(loader) is the batches the rank gets"
        lengths.add(length)
        ids += mine
        # The maps ran on this rank's elements only: the other ranks' were never made.
        # (W1-like: the parse runs after the batch; the share is what leaves the shard.)
        made = stage_elements(loader, {"tfrecord": "global_shuffle", "tfrecord_shuffle": "shard"}.get(kind, "map"))
        assert made == N // world, loader._sharded.explain()
        # The share is the rank's positions of the whole epoch's order.
        assert mine == whole[rank::world]
        text = loader._sharded.explain()
        assert "shard_down x1" in text and f"shard({world}, {rank}) by rank moved below" in text, text
    assert len(lengths) == 1, "every rank gets as many batches"
    assert sorted(ids) == list(range(N)), "disjoint, and together exactly one epoch"


@pytest.mark.parametrize("kind", ["shuffle", "global_shuffle"])
def test_an_element_gets_the_same_random_crop_whatever_the_number_of_ranks(kind):
    first: dict[int, np.ndarray] = {}
    for world in (1, 2, 3):
        by_id: dict[int, np.ndarray] = {}
        for rank in range(world):
            _, batches, _ = rank_batches(pipeline(kind), rank, world, epoch=1)
            for b in batches:
                for i, img in zip(b["id"], b["img"]):
                    by_id[int(i)] = img
        assert sorted(by_id) == list(range(N))
        if world == 1:
            first = by_id
            # The crops differ from element to element (a check that the test sees crops).
            assert len({v.tobytes() for v in by_id.values()}) > N // 2
        else:
            for i in range(N):
                np.testing.assert_array_equal(by_id[i], first[i], err_msg=f"element {i}, {world} ranks")


def test_the_remainder_is_left_out_so_that_every_rank_gets_as_many_batches():
    # 50 elements over 3 ranks: 48 shared out, 16 each (4 batches of 4), 2 left out.
    ids = []
    for rank in range(3):
        length, batches, _ = rank_batches(pipeline("shuffle", n=50), rank, 3)
        assert length == len(batches) == 4
        ids += [int(i) for b in batches for i in b["id"]]
    assert len(ids) == len(set(ids)) == 48


def test_a_shard_above_repeated_work_is_explained_and_warned_about_once():
    ds = sk.Dataset.from_tensor_slices({"y": np.arange(N)}).map(lambda e: {"y": e["y"] * 2})
    ds = ds.shuffle(10, seed=1).batch(4)
    with pytest.warns(UserWarning, match=r"every shard runs map\[<lambda>\].*global_shuffle"):
        loader = skt.loader(ds, shard=(0, 2))
    assert "it stops above shuffle(10)" in loader._sharded.explain()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        skt.loader(pipeline("shuffle"), shard=(0, 2))  # nothing repeated: no warning


def test_an_unknown_count_is_refused_naming_the_step():
    ds = sk.Dataset.from_tensor_slices({"y": np.arange(N)}).filter(lambda e: e["y"] % 3 > 0).batch(4)
    with pytest.raises(sk.InvalidArgumentError, match=r"cardinality.*filter"):
        skt.loader(ds, shard=(0, 2))
    # A take does not fix an unknown count: the filter may end before it.
    with pytest.raises(sk.InvalidArgumentError, match=r"cardinality.*filter"):
        skt.loader(ds.take(5), shard=(0, 2))
    # Under the skip policy a step may drop elements: the share stays where it was written.
    skipping = sk.Dataset.from_tensor_slices(images()).with_options(on_bad_record="skip").global_shuffle(seed=1)
    loader = skt.loader(skipping.batch(4), shard=(0, 2))
    assert "under on_bad_record=skip" in loader.explain() and len(loader) == len(list(loader)) == 6
    # With the number of batches fixed, the ranks share them out (an endless repeat of a
    # filter is infinite, as tf.data counts it).
    assert ds.repeat().cardinality() == sk.dataset.INFINITE and ds.repeat().take(6).cardinality() == 6
    fixed = ds.repeat().take(6)
    loaders = [skt.loader(fixed, shard=(r, 2)) for r in range(2)]
    got = [[int(i) for b in loader for i in b["y"]] for loader in loaders]
    assert [len(loader) for loader in loaders] == [3, 3]
    assert len(got[0]) == len(got[1]) == 12 and not set(got[0]) & set(got[1])


def test_len_is_what_each_rank_gets_with_the_pass_on_or_off():
    ds = sk.Dataset.from_tensor_slices({"y": np.arange(130)}).shuffle(50, seed=2).batch(32)
    for on in (True, False):
        d = ds if on else ds.with_options(optimizations={"shard_down": False})
        got = []
        for rank in range(2):
            loader = skt.loader(d, shard=(rank, 2))
            batches = [b["y"].tolist() for b in loader]
            assert len(loader) == len(batches), (on, rank)
            got += [v for b in batches for v in b]
        assert len(got) == len(set(got)) == (130 if on else 128)


def test_maps_a_shard_separated_keep_their_positions():
    # A map below the shard and one above it are not fused into one that sees the lower
    # one's positions: the flips are those of the plan as written.
    ds = sk.Dataset.from_tensor_slices(images()).map([sk.ops.cast("id", "int32")]).shard(2, 1)
    ds = ds.map([sk.ops.random_flip_left_right("img", seed=4)])
    runs = [
        [b["img"].tobytes() for b in d]
        for d in (
            ds,
            ds.with_options(optimizations={"fuse_maps": False}),
            ds.with_options(optimizations={"shard_down": False}),
        )
    ]
    assert runs[0] == runs[1] == runs[2]


def test_a_users_shard_moves_only_where_its_elements_stay_the_same():
    base = sk.Dataset.from_tensor_slices(images())

    def both(ds: sk.Dataset) -> tuple[list[Any], list[Any], str]:
        off = ds.with_options(optimizations={"shard_down": False})
        on_ = [(int(i), img.tobytes()) for b in ds for i, img in zip(b["id"], b["img"])]
        off_ = [(int(i), img.tobytes()) for b in off for i, img in zip(b["id"], b["img"])]
        return on_, off_, ds.explain()

    # Below a map with random ops: the same crops (positions of the whole stream).
    on_, off_, text = both(base.map(augment()).shard(3, 1).batch(4))
    assert on_ == off_ and len(on_) == 16
    assert "shard(3, 1) moved below map" in text and "positions=1+3k" in text, text
    # Into a global shuffle: it reads only its positions of the permutation.
    on_, off_, text = both(base.global_shuffle(seed=5).map(augment()).take(40).shard(3, 2).batch(4))
    assert on_ == off_ and len(on_) == 13
    assert "global_shuffle taking shard(3, 2) of the first 40" in text, text
    # Not below a batch: a user's shard of batches keeps whole batches.
    on_, off_, text = both(base.map(augment()).batch(4).shard(2, 0))
    assert on_ == off_ and "stops above batch(4)" in text, text


def test_a_rank_resumes_exactly_in_a_new_process(tmp_path):
    code = """
        import pickle, sys
        import numpy as np, stoker as sk
        from stoker import torch as skt
        sys.path.insert(0, sys.argv[3])
        from test_many_ranks import pipeline

        out, what = sys.argv[1], sys.argv[2]
        loader = skt.loader(pipeline("global_shuffle"), shard=(1, 3))
        loader.set_epoch(2)
        if what == "save":
            it = iter(loader)
            head = [next(it)["id"].tolist() for _ in range(2)]
            state = loader.state_dict()
            rest = [b["id"].tolist() for b in it]
            pickle.dump((state, rest), open(out, "wb"))
        else:
            state, rest = pickle.load(open(out, "rb"))
            loader.load_state_dict(state)
            got = [b["id"].tolist() for b in loader]
            assert got == rest and len(rest) == 2, (got, rest)
    """
    script = tmp_path / "resume_rank.py"
    script.write_text(textwrap.dedent(code))
    here = str(Path(__file__).parent)
    for what in ("save", "restore"):
        r = subprocess.run(
            [sys.executable, str(script), str(tmp_path / "s.pkl"), what, here],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr[-3000:]


BUDGET = """
import json, os, sys
cores = sys.argv[1]
if cores != "all":
    os.sched_setaffinity(0, set(range(int(cores))))
import numpy as np, stoker as sk
ds = sk.Dataset.from_tensor_slices({"y": np.arange(8)})
one = ds.map(lambda e: e, num_parallel_calls=sk.AUTOTUNE).batch(2)
two = ds.map(lambda e: e, num_parallel_calls=sk.AUTOTUNE).shuffle(4, seed=1)
two = two.map([sk.ops.cast("y", "float32")], num_parallel_calls=sk.AUTOTUNE).batch(2)
for d in (one, two):
    list(d)
print(json.dumps({
    "budget": list(one.stats().budget),
    "explain": one.explain(),
    "set": one.with_options(threads=3).stats().budget[0],
    "workers_one": max(s["workers"] for s in one.stats()),
    "workers_two": sorted(s["workers"] for s in two.stats() if s["kind"] == "map"),
    "budget_two": two.stats().budget[0],
}))
"""


def budget_of(cores: str, local: str | None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "LOCAL_WORLD_SIZE"}
    if local is not None:
        env["LOCAL_WORLD_SIZE"] = local
    r = subprocess.run([sys.executable, "-c", BUDGET, cores], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to give a process fewer")
def test_the_thread_budget_is_the_ranks_share_of_the_cores_it_may_run_on():
    cores = len(os.sched_getaffinity(0))
    alone = budget_of("all", None)
    assert alone["budget"][0] == cores and f"the {cores} cores this process may run on" in alone["budget"][1]
    assert f"thread budget: {cores}" in alone["explain"]
    assert alone["workers_one"] == cores
    # Two AUTOTUNE stages share the budget: the whole pipeline keeps `cores` threads busy.
    assert sum(alone["workers_two"]) <= max(cores, 2) and alone["budget_two"] == cores
    shared = budget_of("all", "2")
    assert shared["budget"][0] == cores // 2, shared
    assert "shared by 2 ranks on this machine (LOCAL_WORLD_SIZE)" in shared["budget"][1]
    pinned = budget_of("1", None)
    assert pinned["budget"][0] == 1 and "the 1 core this process may run on" in pinned["budget"][1], pinned
    assert pinned["workers_one"] == 1
    # threads= overrides, whatever the ranks.
    assert shared["set"] == 3 and pinned["set"] == 3


def test_three_ddp_ranks_on_one_machine_share_the_epoch_and_the_cores(tmp_path):
    script = tmp_path / "ddp3.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, os, sys
            import numpy as np
            import torch.distributed as dist
            import torch.multiprocessing as mp
            import stoker as sk
            from stoker import torch as skt

            def run(rank, out):
                os.environ.pop("LOCAL_WORLD_SIZE", None)
                os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
                dist.init_process_group("gloo", rank=rank, world_size=3)
                rng = np.random.default_rng(7)
                imgs = rng.integers(0, 255, (90, 12, 10, 3), dtype=np.uint8)
                ds = sk.Dataset.from_tensor_slices({"id": np.arange(90), "img": imgs}).global_shuffle()
                ds = ds.map([sk.ops.random_resized_crop("img", 6)], num_parallel_calls=sk.AUTOTUNE).batch(5)
                loader = skt.loader(ds, shard="auto")
                res = {"len": len(loader), "epochs": [], "budget": list(loader._sharded.stats().budget)}
                for epoch in (0, 1):
                    loader.set_epoch(epoch)
                    got = {int(i): img.sum().item() for b in loader for i, img in zip(b["id"], b["img"])}
                    res["epochs"].append(got)
                res["map"] = sum(s["elements"] for s in loader._sharded.stats() if s["kind"] == "map")
                json.dump(res, open(f"{out}.{rank}", "w"))
                dist.destroy_process_group()

            if __name__ == "__main__":
                mp.spawn(run, args=(sys.argv[1],), nprocs=3)
            """
        )
    )
    r = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "out"), "29547"], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    results = [json.loads((tmp_path / f"out.{rank}").read_text()) for rank in range(3)]
    assert {res["len"] for res in results} == {6}
    for epoch in (0, 1):
        seen = [int(i) for res in results for i in res["epochs"][epoch]]
        assert sorted(seen) == list(range(90)), "disjoint, and together one epoch"
    # Each rank made 30 elements per epoch: its share, not the whole epoch.
    assert [res["map"] for res in results] == [60, 60, 60]
    cores = len(os.sched_getaffinity(0))
    for res in results:
        assert res["budget"][0] == max(1, cores // 3), res["budget"]
        assert "shared by 3 ranks on this machine (the job's process group)" in res["budget"][1]
