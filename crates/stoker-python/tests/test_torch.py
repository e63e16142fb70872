"""stoker.torch: tensors from stoker's batches, the loader's len / set_epoch / state_dict, DDP
sharding (two gloo processes), the DataLoader path and DLPack. CUDA paths run where a GPU is."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import stoker as sk
import torch
import torch.utils.data
from stoker import torch as skt

HERE = Path(__file__).parent


def table(n: int = 50) -> dict[str, np.ndarray]:
    return {
        "x": np.arange(n * 3, dtype=np.float32).reshape(n, 3),
        "y": np.arange(n, dtype=np.int64),
    }


def shuffled(n: int = 50, batch: int = 4, drop: bool = False) -> sk.Dataset:
    return sk.Dataset.from_tensor_slices(table(n)).shuffle(16, seed=3).batch(batch, drop_remainder=drop)


def as_numpy(batch: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {k: v.cpu().numpy() for k, v in batch.items()}


def same(a: list[dict[str, np.ndarray]], b: list[dict[str, np.ndarray]]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(a, b)
    )


def test_cpu_tensors_equal_the_numpy_batches_and_share_their_memory():
    ds = shuffled()
    want = list(ds.iterator(epoch=0))
    got = []
    loader = skt.loader(ds)
    loader.set_epoch(0)
    for batch in loader:
        assert isinstance(batch["x"], torch.Tensor) and batch["x"].dtype == torch.float32
        assert batch["y"].dtype == torch.int64
        got.append(as_numpy(batch))
    assert same(got, want)
    # No copy: the tensor views the engine's buffer behind the NumPy array.
    arrays = next(iter(ds))
    tensors = skt.to_torch(arrays)
    for k in arrays:
        assert tensors[k].data_ptr() == arrays[k].ctypes.data
    tensors["x"][0, 0] = -1.0
    assert arrays["x"][0, 0] == -1.0


def test_a_last_partial_batch_is_not_copied_either():
    # The last batch of 2 rows lies in a buffer made for 4: still its own, so writable, and
    # the tensor views it (a copy of a large last batch cost a whole batch's page faults).
    ds = sk.Dataset.from_tensor_slices({"x": np.zeros((10, 8, 8, 3), np.uint8)})
    ds = ds.map(sk.ops.random_flip_left_right("x", seed=1)).batch(4)
    batches = list(ds)
    assert [len(b["x"]) for b in batches] == [4, 4, 2]
    assert all(b["x"].flags.writeable for b in batches)
    last = batches[-1]["x"]
    assert skt.to_torch(last).data_ptr() == last.ctypes.data


def test_read_only_arrays_are_copied_and_structures_kept():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    a.flags.writeable = False
    t = skt.to_torch((a, {"s": np.array([b"ab", b"c"], dtype=object)}))
    assert isinstance(t, tuple) and t[0].data_ptr() != a.ctypes.data
    assert t[0].tolist() == a.tolist()
    assert isinstance(t[1]["s"], np.ndarray)  # strings stay NumPy
    # A single-field dataset gives single tensors.
    single = next(iter(skt.loader(sk.Dataset.range(5).batch(2))))
    assert isinstance(single, torch.Tensor) and single.tolist() == [0, 1]
    # A namedtuple stays one.
    pair = __import__("collections").namedtuple("Pair", "a b")
    got = next(iter(skt.loader(sk.Dataset.from_tensor_slices(pair(np.arange(4), np.arange(4.0))).batch(2))))
    assert type(got) is pair and isinstance(got.a, torch.Tensor) and got.b.tolist() == [0.0, 1.0]


def test_len_is_the_number_of_batches_when_the_pipeline_knows_it():
    assert len(skt.loader(shuffled(50, 4))) == 13
    assert len(skt.loader(shuffled(50, 4, drop=True))) == 12
    assert len(list(skt.loader(shuffled(50, 4, drop=True)))) == 12
    assert len(shuffled(50, 4)) == 13
    assert sk.Dataset.range(10).repeat().cardinality() == sk.dataset.INFINITE
    assert sk.Dataset.range(10).filter(lambda v: v > 2).cardinality() == sk.dataset.UNKNOWN
    with pytest.raises(TypeError, match="unknown"):
        len(skt.loader(sk.Dataset.range(10).filter(lambda v: v > 2).batch(2)))
    with pytest.raises(TypeError, match="infinite"):
        len(sk.Dataset.range(10).repeat())


def test_set_epoch_reshuffles_and_picks_the_epoch():
    loader = skt.loader(shuffled())
    runs = {}
    for epoch in (0, 1, 0, 5):
        loader.set_epoch(epoch)
        run = [as_numpy(b) for b in loader]
        if epoch in runs:
            assert same(run, runs[epoch]), "the same epoch twice: the same order"
        runs[epoch] = run
    assert not same(runs[0], runs[1])
    assert not same(runs[1], runs[5])
    # The same as the dataset's own epoch 5.
    assert same(runs[5], list(shuffled().iterator(epoch=5)))
    with pytest.raises(sk.InvalidArgumentError, match="epoch"):
        loader.set_epoch(-1)


def test_state_dict_round_trip_resumes_exactly():
    ds = sk.Dataset.from_tensor_slices(table(60)).shuffle(16, seed=3).repeat(2).batch(5)
    loader = skt.loader(ds)
    loader.set_epoch(0)
    full = [as_numpy(b) for b in loader]
    for k in (0, 1, 7, 23):
        loader = skt.loader(ds)
        loader.set_epoch(0)
        it = iter(loader)
        head = [as_numpy(next(it)) for _ in range(k)]
        saved = loader.state_dict()
        assert len(saved["stoker_iterator_state"]) < 1024
        again = skt.loader(sk.Dataset.from_tensor_slices(table(60)).shuffle(16, seed=3).repeat(2).batch(5))
        again.load_state_dict(saved)
        rest = [as_numpy(b) for b in again]
        assert same(head + rest, full), k


def test_distributed_ranks_see_every_element_once_in_equal_batch_counts(tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, os, sys
            import numpy as np
            import torch.distributed as dist
            import stoker as sk
            from stoker import torch as skt

            dist.init_process_group("gloo")
            ds = sk.Dataset.from_tensor_slices({"y": np.arange(105)}).shuffle(20, seed=1).batch(4)
            loader = skt.loader(ds, shard="auto")
            out = {"len": len(loader), "epochs": []}
            for epoch in (0, 1):
                loader.set_epoch(epoch)
                out["epochs"].append([b["y"].tolist() for b in loader])
            json.dump(out, open(sys.argv[1] + f".{dist.get_rank()}", "w"))
            dist.destroy_process_group()
            """
        )
    )
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
        procs.append(subprocess.Popen([sys.executable, str(script), str(tmp_path / "out")], env=env))
    for p in procs:
        assert p.wait(timeout=120) == 0
    import json

    results = [json.loads((tmp_path / f"out.{r}").read_text()) for r in range(2)]
    # 105 elements in 27 batches (26 of 4, the last of 1): the last is dropped so that both
    # ranks get the same number, 13 each.
    assert results[0]["len"] == results[1]["len"] == 13
    for epoch in (0, 1):
        batches = [results[r]["epochs"][epoch] for r in range(2)]
        assert len(batches[0]) == len(batches[1]) == 13
        seen = [v for r in range(2) for b in batches[r] for v in b]
        assert len(seen) == len(set(seen)), "an element seen twice"
        assert len(seen) == 104
    assert results[0]["epochs"][0] != results[0]["epochs"][1], "set_epoch reshuffles"


def test_a_state_dict_before_the_first_batch_is_the_start_of_the_epoch_to_come():
    # Checkpoint-at-start code (torchtune, Lightning) calls state_dict() before any batch.
    ds = sk.Dataset.from_tensor_slices(table(40)).shuffle(16).batch(5)
    loader = skt.loader(ds)
    saved = loader.state_dict()
    first = [as_numpy(b) for b in loader]
    loader.set_epoch(3)
    saved_3 = loader.state_dict()
    third = [as_numpy(b) for b in loader]
    for state, want in ((saved, first), (saved_3, third)):
        again = skt.loader(sk.Dataset.from_tensor_slices(table(40)).shuffle(16).batch(5))
        again.load_state_dict(state)
        assert same([as_numpy(b) for b in again], want)
    assert not same(first, third)


def _run(tmp_path: Path, name: str, code: str, *args: str) -> None:
    script = tmp_path / name
    script.write_text(textwrap.dedent(code))
    r = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def test_a_checkpoint_at_an_epochs_end_resumes_at_the_next_epoch_in_a_new_process(tmp_path):
    # The README's PyTorch example saves state_dict() after each epoch: restored in a new
    # process (with set_epoch(1) or without), it goes on with epoch 1.
    code = """
        import pickle, sys
        import numpy as np, stoker as sk
        from stoker import torch as skt

        def make():
            ds = sk.Dataset.from_tensor_slices({"y": np.arange(90)})
            return ds.shuffle(32).map([sk.ops.cast("y", "float32")]).batch(7)

        out = sys.argv[1]
        loader = skt.loader(make())
        if sys.argv[2] == "save":
            epochs = {}
            for epoch in range(3):
                loader.set_epoch(epoch)
                epochs[epoch] = [b["y"].tolist() for b in loader]
                if epoch == 0:
                    saved = loader.state_dict()
            pickle.dump((saved, epochs), open(out, "wb"))
        else:
            saved, epochs = pickle.load(open(out, "rb"))
            loader.load_state_dict(saved)
            if sys.argv[3] == "set_epoch":
                loader.set_epoch(1)
            got = {1: [b["y"].tolist() for b in loader]}
            loader.set_epoch(2)
            got[2] = [b["y"].tolist() for b in loader]
            assert got[1] == epochs[1], (got[1][:2], epochs[1][:2])
            assert got[2] == epochs[2]
            assert len(got[1]) == 13 and got[1] != epochs[0]
    """
    _run(tmp_path, "ckpt.py", code, str(tmp_path / "state.pkl"), "save")
    for how in ("set_epoch", "as_saved"):
        _run(tmp_path, "ckpt.py", code, str(tmp_path / "state.pkl"), "restore", how)


def test_distributed_ranks_without_seeds_share_rank_zeros_seeds(tmp_path):
    # An unseeded shuffle and random op: rank 0's drawn seeds reach every rank, so the ranks
    # split one order, every element once.
    script = tmp_path / "ddp_unseeded.py"
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
                os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
                dist.init_process_group("gloo", rank=rank, world_size=2)
                images = np.arange(320 * 2 * 3 * 1, dtype=np.uint8).reshape(320, 2, 3, 1)
                ds = sk.Dataset.from_tensor_slices({"y": np.arange(320), "img": images})
                ds = ds.shuffle(100).map([sk.ops.random_flip_left_right("img")]).batch(8)
                loader = skt.loader(ds, shard="auto")
                res = {"seeds": loader._sharded._plan.seed_values(), "epochs": []}
                for epoch in (0, 1):
                    loader.set_epoch(epoch)
                    res["epochs"].append([[b["y"].tolist(), b["img"].flatten(1).tolist()] for b in loader])
                json.dump(res, open(f"{out}.{rank}", "w"))
                dist.destroy_process_group()

            if __name__ == "__main__":
                mp.spawn(run, args=(sys.argv[1],), nprocs=2)
            """
        )
    )
    r = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "out"), "29541"], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    import json

    results = [json.loads((tmp_path / f"out.{r}").read_text()) for r in range(2)]
    assert results[0]["seeds"] == results[1]["seeds"], "the ranks draw from different seeds"
    flipped_by_element = {}
    for epoch in (0, 1):
        seen = [y for rank in results for ys, _ in rank["epochs"][epoch] for y in ys]
        assert sorted(seen) == list(range(320)), "an element twice, or never"
        for rank in results:
            for ys, imgs in rank["epochs"][epoch]:
                for y, img in zip(ys, imgs):
                    # Each image's row is [a, b, c, d, e, f]; a flip swaps its two columns.
                    first = [6 * y + k for k in range(6)]
                    flipped_by_element.setdefault(epoch, {})[y] = img != first
    assert any(flipped_by_element[0].values()) and not all(flipped_by_element[0].values())
    assert results[0]["epochs"][0] != results[0]["epochs"][1], "set_epoch reshuffles"


def test_sharding_without_a_runtime_to_share_seeds_names_the_unseeded_steps():
    ds = sk.Dataset.from_tensor_slices(table(40)).shuffle(16).map([sk.ops.cast("x", "float64")]).batch(4)
    with pytest.raises(sk.InvalidArgumentError, match=r"shuffle\(16\).*seed=0|no seed.*shuffle\(16\)"):
        skt.loader(ds, shard=(1, 2))
    flips = sk.Dataset.from_tensor_slices({"i": np.zeros((8, 2, 2, 1), np.uint8)}).map(
        [sk.ops.random_flip_left_right("i")]
    )
    with pytest.raises(sk.InvalidArgumentError, match="random_flip"):
        skt.loader(flips.batch(2), shard=(0, 2))
    # Seeded steps need nothing sent.
    assert len(skt.loader(shuffled(seed_given := 40), shard=(1, 2))) == 5 and seed_given


def test_dataloader_path_and_dlpack():
    ds = shuffled()
    want = list(ds.iterator(epoch=0))
    dl = torch.utils.data.DataLoader(skt.IterableDataset(ds), batch_size=None, num_workers=0)
    assert len(dl) == len(want)
    first = [as_numpy(b) for b in dl]
    # The dataset's next iteration (its epoch 1), as tensors.
    assert same(first, list(shuffled().iterator(epoch=1)))
    assert not same(first, want)
    # DLPack: any consumer takes a batch's arrays without a copy.
    arrays = next(iter(ds))
    t = torch.from_dlpack(arrays["x"])
    assert t.data_ptr() == arrays["x"].ctypes.data


def test_wrong_arguments_name_the_argument():
    ds = shuffled()
    with pytest.raises(sk.InvalidArgumentError, match="prefetch"):
        skt.loader(ds, prefetch=0)
    with pytest.raises(sk.InvalidArgumentError, match="device"):
        skt.loader(ds, device="meta")
    with pytest.raises(sk.InvalidArgumentError, match="shard"):
        skt.loader(ds, shard=(2, 2))
    with pytest.raises(sk.InvalidArgumentError, match="cardinality"):
        skt.loader(sk.Dataset.range(10).filter(lambda v: v > 2), shard=(0, 2))
    it = ds.iterator(epoch=2)
    next(it)
    inside_epoch_2 = it.state()
    with pytest.raises(sk.InvalidArgumentError, match="inside epoch 2.*as epoch 1"):
        ds.iterator(state=inside_epoch_2, epoch=1)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
def test_cuda_batches_arrive_on_the_device_equal_and_ahead():
    ds = sk.Dataset.from_tensor_slices(table(200)).shuffle(16, seed=3).batch(8)
    want = list(ds.iterator(epoch=0))
    loader = skt.loader(ds, device="cuda", prefetch=3)
    loader.set_epoch(0)
    got = []
    for batch in loader:
        assert batch["x"].is_cuda and batch["y"].is_cuda
        got.append(as_numpy(batch))
    assert same(got, want)
    # Resume on the device path too.
    loader = skt.loader(ds, device="cuda")
    loader.set_epoch(0)
    it = iter(loader)
    head = [as_numpy(next(it)) for _ in range(5)]
    again = skt.loader(ds, device="cuda")
    again.load_state_dict(loader.state_dict())
    assert same(head + [as_numpy(b) for b in again], want)


@cuda
def test_cuda_batches_go_to_the_device_from_the_engines_pinned_memory():
    ds = sk.Dataset.from_tensor_slices(table(4000)).shuffle(64, seed=1).batch(64).prefetch(4)
    want = list(ds.iterator(epoch=0))
    loader = skt.loader(ds, device="cuda", prefetch=3)
    loader.set_epoch(0)
    got = []
    for i, batch in enumerate(loader):
        if i % 7 == 0:
            # A slow step: the engine runs ahead while earlier copies may still be in flight.
            torch.cuda._sleep(2_000_000)
        got.append(as_numpy(batch))
    assert same(got, want)
    assert loader._staged_bytes == 0, "every batch went to the device from the engine's memory"
    # The engine now makes its batches in pinned memory: a CPU tensor of one is pinned.
    assert torch.from_numpy(next(iter(ds))["x"]).is_pinned()
    # pin_memory on the CPU: pinned tensors, no copy.
    cpu = skt.loader(ds, pin_memory=True)
    cpu.set_epoch(0)
    pinned = list(cpu)
    assert all(b["x"].is_pinned() and not b["x"].is_cuda for b in pinned)
    assert same([as_numpy(b) for b in pinned], want) and cpu._staged_bytes == 0
    # Arrays a Python function made are not the engine's: they go through staging buffers.
    doubled = sk.Dataset.from_tensor_slices(table(200)).batch(8).map(lambda b: {"x": b["x"] * 2, "y": b["y"] + 1})
    staged = skt.loader(doubled, device="cuda")
    assert same([as_numpy(b) for b in staged], list(doubled))
    assert staged._staged_bytes == 200 * (3 * 4 + 8)


@cuda
def test_cuda_loader_closes_while_its_thread_is_making_a_batch():
    def slow(b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        time.sleep(0.05)
        return b

    ds = sk.Dataset.from_tensor_slices(table(400)).batch(8).map(slow)
    loader = skt.loader(ds, device="cuda")
    it = iter(loader)
    first = as_numpy(next(it))
    it.close()  # type: ignore[attr-defined]
    np.testing.assert_array_equal(first["y"], np.arange(8))
    # The loader starts again from the beginning.
    assert same([as_numpy(b) for b in loader], list(ds))
