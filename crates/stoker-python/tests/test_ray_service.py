"""stoker.ray: a pipeline's shards on Ray actors, streamed to trainers, every element exactly once
across them, also when an actor is killed mid-epoch or a trainer restarts from its state."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import stoker as sk
import stoker.ray as skr
from stoker import ops


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             configure_logging=False)
    # The pipeline functions below go to the actors by value: this module is not importable
    # there (a user's own module would be, or goes with runtime_env={"py_modules": ...}).
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray
    ray.shutdown()


def _pipeline():
    return sk.Dataset.range(240).shuffle(32, seed=5).batch(8)


def _values(batches) -> list[int]:
    return [int(v) for b in batches for v in np.asarray(b).ravel()]


def test_every_element_exactly_once_across_two_trainers(ray_cluster):
    service = skr.serve(_pipeline(), num_workers=2)
    try:
        readers = [skr.reader(service, rank=r, world_size=2) for r in range(2)]
        got = [_values(r) for r in readers]
        assert sorted(got[0] + got[1]) == list(range(240))
        assert got[0] and got[1]
        # Each trainer's share is what its actor's shard of the local pipeline hands out.
        assert got[0] == _values(_pipeline().shard(2, 0))
        assert len(readers[0]) == len(list(_pipeline().shard(2, 0)))
        # A second epoch: the same elements, in another order (the shuffle reshuffles).
        for r in readers:
            r.set_epoch(1)
        again = [_values(r) for r in readers]
        assert sorted(again[0] + again[1]) == list(range(240))
        assert again != got
        assert service.stats()[0]["stages"]
        # mode="epoch": each trainer a whole epoch, from iterators of its own on the same actors.
        whole = [_values(skr.reader(service, rank=r, world_size=2, mode="epoch")) for r in range(2)]
        assert sorted(whole[0]) == sorted(whole[1]) == list(range(240))
    finally:
        service.shutdown()


def test_an_actor_killed_mid_epoch_loses_and_repeats_nothing(ray_cluster):
    want = _values(_pipeline())
    service = skr.serve(_pipeline, num_workers=1)
    try:
        r = skr.reader(service)
        it = iter(r)
        head = _values([next(it) for _ in range(5)])
        ray_cluster.kill(service.actor(0))
        rest = _values(it)
        assert head + rest == want
        assert service.restarts == 1
    finally:
        service.shutdown()


def test_a_restarted_trainer_goes_on_from_its_state(ray_cluster):
    want = _values(_pipeline().shard(2, 1))
    service = skr.serve(_pipeline(), num_workers=2)
    try:
        r = skr.reader(service, rank=1, world_size=2)
        it = iter(r)
        head = _values([next(it) for _ in range(4)])
        state = r.state_dict()
        del it, r
        # A new trainer process would make a new reader (even a new service) and load it.
        again = skr.reader(service, rank=1, world_size=2)
        again.load_state_dict(state)
        assert head + _values(again) == want
    finally:
        service.shutdown()


def _with_bad_images():
    good = sk.io.encode_png(np.full((4, 4, 3), 7, np.uint8))
    images = np.array([good if i % 10 else b"not a png" for i in range(60)], dtype=object)
    ds = sk.Dataset.from_tensor_slices({"image": images, "i": np.arange(60)})
    return ds.map([ops.decode_image("image", channels=3)]).ignore_errors().batch(4)


def test_bad_input_under_ignore_errors_is_skipped_and_counted(ray_cluster):
    want = [i for i in range(60) if i % 10]
    service = skr.serve(_with_bad_images, num_workers=1)
    try:
        r = skr.reader(service)
        assert sorted(int(v) for b in r for v in b["i"]) == want
        assert r.skipped() == 6
        # Killed mid-epoch: the good elements exactly once still.
        it = iter(r)
        head = [next(it) for _ in range(4)]
        ray_cluster.kill(service.actor(0))
        assert sorted(int(v) for b in head + list(it) for v in b["i"]) == want
    finally:
        service.shutdown()


def test_wrong_arguments_name_themselves(ray_cluster):
    with pytest.raises(sk.InvalidArgumentError, match="num_workers"):
        skr.serve(_pipeline(), num_workers=0)
    service = skr.serve(_pipeline(), num_workers=1)
    try:
        with pytest.raises(sk.InvalidArgumentError, match="world_size"):
            skr.reader(service, rank=0, world_size=2)
        with pytest.raises(sk.InvalidArgumentError, match="mode"):
            skr.reader(service, mode="all")
    finally:
        service.shutdown()
