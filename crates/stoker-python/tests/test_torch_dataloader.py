"""``stoker.torch.IterableDataset`` under a real ``torch.utils.data.DataLoader``: epochs in a
worker process, the spawn start method, the DataLoader's batch_size, set_epoch and
state_dict."""

from __future__ import annotations

import numpy as np
import pytest
import stoker as sk

torch = pytest.importorskip("torch")
skt = pytest.importorskip("stoker.torch")
DataLoader = torch.utils.data.DataLoader


def _ids(loader: object) -> list[list[int]]:
    return [b.tolist() for b in loader]  # type: ignore[attr-defined]


def _epochs(ds: sk.Dataset, n: int) -> list[list[list[int]]]:
    return [[b.tolist() for b in ds.iterator(epoch=e)] for e in range(n)]


def _pipeline() -> sk.Dataset:
    # Spec-able (no Python function): it can go to a spawned worker.
    return sk.Dataset.range(32).shuffle(32, seed=0).batch(8)


@pytest.mark.parametrize("persistent", [False, True])
def test_a_worker_process_runs_a_new_epoch_each_time(persistent):
    # The worker's copy of the pipeline runs the epoch the main process counts.
    ds = _pipeline()
    data = skt.IterableDataset(ds)
    loader = DataLoader(data, batch_size=None, num_workers=1, persistent_workers=persistent)
    want = _epochs(ds, 3)
    assert [_ids(loader) for _ in range(3)] == want
    # set_epoch reaches the worker (a persistent one too).
    data.set_epoch(7)
    assert _ids(loader) == [b.tolist() for b in ds.iterator(epoch=7)]
    assert _ids(loader) == [b.tolist() for b in ds.iterator(epoch=8)]
    # The position is in the worker: the main process cannot give it.
    with pytest.raises(sk.InvalidArgumentError, match="worker"):
        data.state_dict()


def test_a_spawned_worker_gets_the_pipeline_as_its_spec():
    # The pipeline goes to a spawned worker as its spec.
    ds = _pipeline()
    loader = DataLoader(skt.IterableDataset(ds), batch_size=None, num_workers=1, multiprocessing_context="spawn")
    assert [_ids(loader) for _ in range(2)] == _epochs(ds, 2)
    # In-memory arrays go in the spec.
    arrays = sk.Dataset.from_tensor_slices(np.arange(8)).batch(4)
    loader = DataLoader(skt.IterableDataset(arrays), batch_size=None, num_workers=1, multiprocessing_context="spawn")
    assert _ids(loader) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # A Python function has no spec: a clear error, not a pickling one.
    mapped = skt.IterableDataset(sk.Dataset.range(8).map(lambda v: v).batch(4))
    loader = DataLoader(mapped, batch_size=None, num_workers=1, multiprocessing_context="spawn")
    with pytest.raises(sk.InvalidArgumentError, match="spec.*num_workers=0"):
        list(loader)


@pytest.mark.parametrize("workers", [0, 1])
def test_a_collating_dataloader_is_an_error_not_a_leading_dimension(workers):
    # DataLoader's default batch_size=1 would stack batches into (1, 8): an error.
    data = skt.IterableDataset(_pipeline())
    with pytest.raises(sk.InvalidArgumentError, match="batch_size=None"):
        list(DataLoader(data, num_workers=workers))
    with pytest.raises(sk.InvalidArgumentError, match="batch_size=None"):
        list(DataLoader(data, batch_size=4, num_workers=workers))
    assert [b.shape for b in DataLoader(data, batch_size=None, num_workers=workers)] == [(8,)] * 4


def test_set_epoch_state_dict_and_len_in_the_main_process():
    ds = _pipeline()
    data = skt.IterableDataset(ds)
    loader = DataLoader(data, batch_size=None)
    assert len(data) == 4
    data.set_epoch(3)
    want = [b.tolist() for b in ds.iterator(epoch=3)]
    it = iter(loader)
    head = [next(it).tolist() for _ in range(2)]
    state = data.state_dict()
    assert head == want[:2]
    again = skt.IterableDataset(ds)
    again.load_state_dict(state)
    assert _ids(DataLoader(again, batch_size=None)) == want[2:]


def test_a_state_saved_after_an_epoch_starts_the_next_one():
    ds = sk.Dataset.range(32).shuffle(32).batch(8)  # unseeded: the state carries the seeds
    data = skt.IterableDataset(ds)
    first = _ids(DataLoader(data, batch_size=None))
    state = data.state_dict()
    data.set_epoch(1)
    second = _ids(DataLoader(data, batch_size=None))
    again = skt.IterableDataset(sk.Dataset.range(32).shuffle(32).batch(8))
    again.load_state_dict(state)
    again.set_epoch(1)
    assert _ids(DataLoader(again, batch_size=None)) == second != first
    # A dataset held under several names goes to a spawned worker as one spec.
    sent = skt.IterableDataset(_pipeline()).__getstate__()
    assert sent["dataset"] is sent["_dataset"] is sent["_sharded"]
