"""stoker.ray: a pipeline's shards on Ray actors, streamed to trainers, every element exactly once
across them, also when an actor is killed mid-epoch or a trainer restarts from its state."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import warnings

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


def _in_turn(shards: list[list]) -> list:
    """The batches of ``shards`` one from each in turn, the ones that ended left out."""
    out, at = [], [0] * len(shards)
    while any(a < len(s) for a, s in zip(at, shards)):
        for k, s in enumerate(shards):
            if at[k] < len(s):
                out.append(s[at[k]])
                at[k] += 1
    return out


def _kill(ray, actor) -> None:
    """Kills ``actor`` and waits until it is dead (Ray's kill returns at once, and the actor
    could still answer a request sent just after it)."""
    ray.kill(actor)
    _wait_dead(ray, actor)


def _wait_dead(ray, actor) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=1)
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            pass
        time.sleep(0.05)
    raise AssertionError("the actor killed is still alive after 10 s")


def test_every_element_exactly_once_across_two_trainers(ray_cluster):
    service = skr.serve(_pipeline(), num_workers=2)
    try:
        readers = [skr.reader(service, rank=r, world_size=2) for r in range(2)]
        got = [_values(r) for r in readers]
        assert sorted(got[0] + got[1]) == list(range(240))
        assert got[0] and got[1]
        # Each trainer's share is what its actor's shard of the local pipeline hands out.
        assert got[0] == _values(skr._share(_pipeline(), 2, 0))
        assert len(readers[0]) == len(list(skr._share(_pipeline(), 2, 0)))
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


def _mapped():
    return sk.Dataset.range(250).shuffle(32, seed=5).map(lambda x: x * 2).batch(8)


def _mapped_first():
    return sk.Dataset.range(40).map(lambda x: x + 1).shuffle(8, seed=1).batch(4)


def test_each_actor_makes_and_batches_only_its_share(ray_cluster):
    # 250 elements on three actors: each maps only its 84 or 83 and batches them itself (its
    # last batch short); the shuffle buffer, which its share stops above, runs in each.
    ds = _mapped()
    whole = _values(ds)
    service = skr.serve(_mapped, num_workers=3, num_cpus=0.5)
    try:
        r = skr.reader(service)
        got = _values(r)
        assert sorted(got) == sorted(whole)
        assert len(r) == 33
        for i, actor in enumerate(service.stats()):
            stages = {s["name"].split("[")[0]: s["elements"] for s in actor["stages"][r.key]}
            share = len(range(i, 250, 3))
            assert stages["map"] == share, (i, stages)
            assert stages["batch(8)"] == -(-share // 8), (i, stages)
            # Its elements: positions i, i + 3, ... of the shuffled stream.
            assert sorted(_values(skr._share(ds, 3, i))) == sorted(whole[i::3])
    finally:
        service.shutdown()
    # A share that stops above a map: every actor maps every element, and serve() says so.
    with pytest.warns(UserWarning, match=r"every shard runs map"):
        repeated = skr.serve(_mapped_first, num_workers=2, num_cpus=0.5)
    repeated.shutdown()
    # One actor repeats nothing; resized to two, they do, and it is said then.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        alone = skr.serve(_mapped_first, num_workers=1)
    try:
        with pytest.warns(UserWarning, match=r"every shard runs map"):
            alone.resize(2)
    finally:
        alone.shutdown()


def test_steps_given_no_seed_take_one_order_across_the_actors(ray_cluster):
    # A shuffle without a seed: each actor would draw its own, and the shards of two orders
    # lose some elements and repeat others. Every actor takes the first one's seeds.
    service = skr.serve(sk.Dataset.range(240).shuffle(32).batch(8), num_workers=2)
    try:
        readers = [skr.reader(service, rank=r, world_size=2) for r in range(2)]
        for epoch in range(2):
            got = [_values(r) for r in readers]
            assert sorted(got[0] + got[1]) == list(range(240)), f"epoch {epoch}"
        # An actor started again, and the actors of a resize, take the same seeds.
        it = iter(readers[0])
        head = _values([next(it) for _ in range(3)])
        _kill(ray_cluster, service.actor(0))
        rest = _values(it)
        assert sorted(head + rest + _values(readers[1])) == list(range(240))
        service.resize(2)
        got = [_values(r) for r in readers]
        assert sorted(got[0] + got[1]) == list(range(240))
        # A trainer that saved its state after one batch (one of its shards not begun) and
        # goes on under a new service, which draws other seeds: the same order still.
        r = skr.reader(service)
        r.set_epoch(4)
        want = _values(r)
        r.set_epoch(4)
        it = iter(r)
        head = _values([next(it)])
        state = r.state_dict()
        it.close()
    finally:
        service.shutdown()
    again = skr.serve(sk.Dataset.range(240).shuffle(32).batch(8), num_workers=2)
    try:
        r = skr.reader(again)
        r.load_state_dict(state)
        assert head + _values(r) == want
    finally:
        again.shutdown()


def test_an_actor_killed_mid_epoch_loses_and_repeats_nothing(ray_cluster):
    want = _values(_pipeline())
    service = skr.serve(_pipeline, num_workers=1)
    try:
        r = skr.reader(service)
        it = iter(r)
        head = _values([next(it) for _ in range(5)])
        _kill(ray_cluster, service.actor(0))
        rest = _values(it)
        assert head + rest == want
        assert service.restarts == 1
    finally:
        service.shutdown()


def test_a_batch_lost_with_its_node_is_made_again_by_a_new_actor(ray_cluster, monkeypatch):
    # A node lost takes the batches in its object store with it: Ray raises ObjectLostError
    # for a request's result, whose actor may be alive (here it is). The reader replaces it
    # and goes on after the last batch handed out.
    service = skr.serve(_pipeline(), num_workers=1)
    try:
        want = _values(skr.reader(service))
        r = skr.reader(service, batches_per_request=2)
        it = iter(r)
        head = [next(it) for _ in range(5)]
        first = service.actor(0)
        real_get = ray_cluster.get
        lost = []

        def get(refs, *args, **kwargs):
            if not lost:
                lost.append(refs)
                raise ray_cluster.exceptions.ObjectLostError("00" * 28, "", "")
            return real_get(refs, *args, **kwargs)

        monkeypatch.setattr(ray_cluster, "get", get)
        rest = list(it)
        monkeypatch.setattr(ray_cluster, "get", real_get)
        assert lost and r.stats()["restarts"] == 1
        assert _values(head + rest) == want
        assert service.actor(0) is not first
        _wait_dead(ray_cluster, first)  # the one replaced was stopped
    finally:
        service.shutdown()


def test_a_fetch_that_timed_out_is_an_error_not_a_new_actor(ray_cluster, monkeypatch):
    # The batch may still be there: the actor is not replaced, and the error reaches the trainer.
    service = skr.serve(_pipeline(), num_workers=1)
    try:
        r = skr.reader(service)
        it = iter(r)
        next(it)
        first = service.actor(0)
        real_get = ray_cluster.get

        def get(refs, *args, **kwargs):
            raise ray_cluster.exceptions.ObjectFetchTimedOutError("00" * 28, "", "")

        monkeypatch.setattr(ray_cluster, "get", get)
        with pytest.raises(ray_cluster.exceptions.ObjectFetchTimedOutError):
            for _ in it:
                pass
        monkeypatch.setattr(ray_cluster, "get", real_get)
        assert r.stats()["restarts"] == 0 and service.actor(0) is first
        real_get(first.__ray_ready__.remote(), timeout=10)  # still alive
    finally:
        service.shutdown()


def test_a_restarted_trainer_goes_on_from_its_state(ray_cluster):
    want = _values(skr._share(_pipeline(), 2, 1))
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


def _trainer_process(ray_cluster, script: str, *args: str) -> subprocess.Popen:
    """A new trainer process (its own Ray driver on this test's cluster) running ``script``."""
    address = ray_cluster.get_runtime_context().gcs_address
    head = (
        "import json, sys, time\n"
        "import numpy as np, ray\n"
        "import stoker as sk, stoker.ray as skr\n"
        f"ray.init(address={address!r}, log_to_driver=False, configure_logging=False)\n"
    )
    return subprocess.Popen([sys.executable, "-c", head + script, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))


def test_a_state_saved_at_an_epoch_s_end_goes_on_in_a_new_process(ray_cluster, tmp_path):
    service = skr.serve(_pipeline(), num_workers=2)
    try:
        r = skr.reader(service, rank=0, world_size=2)
        it = iter(r)
        epoch0 = [next(it) for _ in range(len(r))]
        at_last_batch = r.state_dict()  # saved inside the loop, at the epoch's last batch
        assert list(it) == []
        after_loop = r.state_dict()  # saved once the loop ended
        want1 = _values(skr._share(_pipeline(), 2, 0).iterator(epoch=1))
        assert _values(epoch0) == _values(skr._share(_pipeline(), 2, 0))
        # saved inside an epoch, after set_epoch named the next one
        named = skr.reader(service, rank=0, world_size=2)
        it = iter(named)
        first = _values([next(it)])
        named.set_epoch(7)
        after_set_epoch = named.state_dict()
        want7 = _values(skr._share(_pipeline(), 2, 0).iterator(epoch=7))
    finally:
        service.shutdown()
    (tmp_path / "states.json").write_text(json.dumps([at_last_batch, after_loop, after_set_epoch]))
    # A new trainer process, a new service: each state gives the next iteration where it stands.
    child = _trainer_process(ray_cluster, """
def pipeline():
    return sk.Dataset.range(240).shuffle(32, seed=5).batch(8)
service = skr.serve(pipeline(), num_workers=2)
out = []
for state in json.load(open(sys.argv[1])):
    r = skr.reader(service, rank=0, world_size=2)
    r.load_state_dict(state)
    out.append([[int(v) for b in r for v in np.asarray(b).ravel()] for _ in range(2)])
service.shutdown()
print(json.dumps(out))
""", str(tmp_path / "states.json"))
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err
    at_last, after, named_next = json.loads(out.strip().splitlines()[-1])
    # After the loop: the next epoch's start. At the last batch: the rest of epoch 0 (nothing),
    # then epoch 1. Epoch 1 is its own (the shuffle reshuffles before the shard), not epoch 0's.
    assert after[0] == want1
    assert at_last == [[], want1]
    assert want1 != _values(epoch0)
    # After set_epoch(7): the rest of epoch 0, then epoch 7.
    assert named_next == [_values(epoch0)[len(first):], want7]
    assert want7 not in (want1, _values(epoch0))


def test_ctrl_c_ends_a_trainer_waiting_on_the_service(ray_cluster):
    child = _trainer_process(ray_cluster, """
def slow(x):
    time.sleep(30)
    return x
def pipeline():
    return sk.Dataset.range(8).map(slow).batch(2)
service = skr.serve(pipeline, num_workers=1)
print("waiting", flush=True)
try:
    next(iter(skr.reader(service)))
except KeyboardInterrupt:
    print("interrupted", time.time(), flush=True)
    raise
finally:
    service.shutdown()
""")
    try:
        assert child.stdout is not None and child.stderr is not None
        line = child.stdout.readline().strip()
        assert line == "waiting", child.stderr.read()
        time.sleep(2)  # inside the wait for the first batch
        sent = time.time()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode != 0 and "KeyboardInterrupt" in err, err
    # The wait ends at once (the actor's 30-s element is not waited for); the service's
    # shutdown and the driver's exit come after.
    interrupted = float(out.split("interrupted", 1)[1].split()[0])
    assert interrupted - sent < 1.0, (interrupted - sent, err)
    assert time.time() - sent < 20, err


_GOOD = [i for i in range(60) if i % 7]  # 9 bad: 5 at even positions, 4 at odd ones


def _decoded():
    good = sk.io.encode_png(np.full((4, 4, 3), 7, np.uint8))
    images = np.array([good if i % 7 else b"not a png" for i in range(60)], dtype=object)
    ds = sk.Dataset.from_tensor_slices({"image": images, "i": np.arange(60)})
    return ds.map([ops.decode_image("image", channels=3)]).ignore_errors()


def _with_bad_images():
    return _decoded().batch(4)


def _bad_then_shuffled():
    # The shares stop above the shuffle buffer: every actor decodes every image.
    return _decoded().shuffle(8, seed=1).batch(4)


def _slow_bad_images():
    # A parallel map runs ahead of the batches handed out, over bad records too.
    return _decoded().map(lambda e: e, num_parallel_calls=2).prefetch(4).batch(4)


def test_bad_input_under_ignore_errors_is_skipped_and_counted(ray_cluster):
    want = _GOOD
    service = skr.serve(_slow_bad_images, num_workers=1)
    try:
        r = skr.reader(service)
        assert sorted(int(v) for b in r for v in b["i"]) == want
        assert r.skipped() == 9
        # Killed mid-epoch, each time after another batch: the good elements exactly once
        # still, and each bad record counted once (the dead actor had skipped some beyond the
        # batches handed out; the new one counts on from the state of the last batch).
        for epoch, cut in enumerate([1, 4, 9], start=1):
            it = iter(r)
            head = [next(it) for _ in range(cut)]
            at_cut = r.skipped() - 9 * epoch
            assert at_cut == sum(1 for i in range(4 * cut + at_cut) if i % 7 == 0)
            _kill(ray_cluster, service.actor(0))
            assert sorted(int(v) for b in head + list(it) for v in b["i"]) == want
            assert r.skipped() == 9 * (epoch + 1), cut
        assert service.restarts == 3
        # Killed between epochs: the next epoch starts on a new actor.
        _kill(ray_cluster, service.actor(0))
        assert sorted(int(v) for b in r for v in b["i"]) == want
        assert r.skipped() == 9 * 5
        assert service.restarts == 4
        # A trainer restarted from a state saved mid-epoch counts on from it.
        it = iter(r)
        head = [next(it) for _ in range(6)]
        state = r.state_dict()
        del it
        again = skr.reader(service)
        again.load_state_dict(state)
        rest = list(again)
        assert sorted(int(v) for b in head + rest for v in b["i"]) == want
        assert again.skipped() == 9 * 6
    finally:
        service.shutdown()


def test_bad_input_is_counted_once_over_several_actors(ray_cluster):
    # Each actor decodes only its share and counts the bad records in it: a trainer's count
    # is its actors' shares'; the trainers' counts add up to the epoch's.
    service = skr.serve(_with_bad_images, num_workers=2, num_cpus=0.5)
    try:
        alone = skr.reader(service)
        assert sorted(int(v) for b in alone for v in b["i"]) == _GOOD
        assert alone.skipped() == 9
        # Epoch after epoch (a count read after the next epoch's iterator started would
        # leave out what its threads skipped at once).
        pair = [skr.reader(service, r, 2) for r in range(2)]
        for epoch in range(1, 4):
            got = [[int(v) for b in r for v in b["i"]] for r in pair]
            assert sorted(got[0] + got[1]) == _GOOD
            assert [r.skipped() for r in pair] == [5 * epoch, 4 * epoch]
            assert [r.stats()["skipped_shared"] for r in pair] == [0, 0]
    finally:
        service.shutdown()
    # Decoded below the shares: every actor passes over every bad record, and each trainer
    # counts the epoch's (as shared: once in a job's total).
    with pytest.warns(UserWarning, match=r"every shard runs map\[decode_image\]"):
        service = skr.serve(_bad_then_shuffled, num_workers=2, num_cpus=0.5)
    try:
        pair = [skr.reader(service, r, 2) for r in range(2)]
        got = [[int(v) for b in r for v in b["i"]] for r in pair]
        assert sorted(got[0] + got[1]) == _GOOD
        assert [r.skipped() for r in pair] == [9, 9]
        assert [r.stats()["skipped_shared"] for r in pair] == [9, 9]
        state = pair[1].state_dict()
        again = skr.reader(service, 1, 2)
        again.load_state_dict(state)
        assert again.skipped() == 9 and again.stats()["skipped_shared"] == 9
        # A state saved before the counts were split holds one count per shard: the whole
        # stream's.
        old = {k: v for k, v in state.items() if k != "shared_earlier"}
        old["skipped"] = {i: sum(n) for i, n in state["skipped"].items()}
        again = skr.reader(service, 1, 2)
        again.load_state_dict(old)
        assert again.skipped() == 9 and again.stats()["skipped_shared"] == 9
        with pytest.raises(sk.InvalidArgumentError, match="skipped"):
            again.load_state_dict({**state, "skipped": {"1": "nine"}})
    finally:
        service.shutdown()


def test_an_actor_runs_at_most_its_requests_ahead_of_the_trainer(ray_cluster):
    # One actor, a reader of its own (its own key) per setting. The actor runs a call in the
    # order it was sent, so the stats asked for after a batch count every batch asked for.
    service = skr.serve(sk.Dataset.range(400).batch(4), num_workers=1)
    try:
        for rank, (prefetch, per) in enumerate(((1, 1), (2, 3), (3, 2))):
            r = skr.reader(service, rank, 3, mode="epoch", prefetch=prefetch, batches_per_request=per)
            it = iter(r)
            got = []
            for n in range(1, 20):
                got.append(next(it))
                made = service.stats()[0]["batches"][r.key]
                # Asked for again only once the batches received are handed out.
                assert made == per * (prefetch + (n - 1) // per), (prefetch, per, n, made)
                assert made - n < prefetch * per
            got += list(it)
            assert _values(got) == list(range(400))
        with pytest.raises(sk.InvalidArgumentError, match="batches_per_request"):
            skr.reader(service, batches_per_request=0)
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


def test_a_cluster_without_room_is_an_error_not_a_wait(ray_cluster):
    with pytest.raises(sk.InvalidArgumentError, match=r"num_workers=3 .*2 CPUs"):
        skr.serve(_pipeline(), num_workers=3, start_timeout=3)


def test_workers_added_and_removed_between_epochs(ray_cluster):
    service = skr.serve(_pipeline(), num_workers=2, num_cpus=0.5)
    try:
        readers = [skr.reader(service, rank=r, world_size=2) for r in range(2)]
        first = [_values(r) for r in readers]
        assert sorted(first[0] + first[1]) == list(range(240))
        service.resize(4)
        # Epoch 1 on four actors: two shards per trainer, every element once still.
        second = [_values(r) for r in readers]
        assert sorted(second[0] + second[1]) == list(range(240))
        assert readers[0].stats()["shards"] == [0, 2] and readers[0].stats()["workers"] == 4
        # In turn, a batch from each of its actors: their shards' epoch 1.
        shards = [list(skr._share(_pipeline(), 4, i).iterator(epoch=1)) for i in (0, 2)]
        assert second[0] == _values(_in_turn(shards))
        # A state saved inside an epoch on four actors does not go on over two.
        it = iter(readers[1])
        next(it)
        inside = readers[1].state_dict()
        it.close()
        service.resize(2)
        again = skr.reader(service, rank=1, world_size=2)
        again.load_state_dict(inside)
        with pytest.raises(sk.InvalidArgumentError, match="resize between epochs"):
            next(iter(again))
        # Resized during an epoch: the reader says so at its next batch.
        it = iter(readers[0])
        next(it)
        service.resize(2)
        with pytest.raises(sk.InvalidArgumentError, match="resize between epochs"):
            list(it)
    finally:
        service.shutdown()


def test_two_trainers_on_one_actor_count_their_own_skips(ray_cluster):
    service = skr.serve(_with_bad_images, num_workers=1)
    try:
        readers = [skr.reader(service, rank=r, world_size=2, mode="epoch") for r in range(2)]
        for a, b in zip(readers[0], readers[1]):
            assert list(a["i"]) == list(b["i"])
        assert [r.skipped() for r in readers] == [9, 9]
        assert all(r.stats()["skipped"] == 9 for r in readers)
    finally:
        service.shutdown()


def test_the_step_timer_and_the_reader_agree_on_the_wait(ray_cluster, monkeypatch):
    service = skr.serve(_pipeline(), num_workers=2)
    try:
        r = skr.reader(service)
        timer = sk.timed(r, warmup=0)
        batches = list(timer)
        stats = r.stats()
        assert stats["batches"] == len(batches) == 30
        assert stats["bytes"] == sum(np.asarray(b).nbytes for b in batches)
        # The reader's wait is the loop's wait for input, but for the step timer's own work.
        waited = sum(timer.report().input_s)
        assert 0 < stats["wait_s"] and abs(stats["wait_s"] - waited) <= 0.2 * waited + 0.05
        # Each wait is a `stoker:next#stoker.ray` span where a profiler records (the analyzer
        # counts those as input); inside a loader, the loader's own span covers it instead.
        spans = []

        @contextlib.contextmanager
        def recorded(where):
            spans.append(where)
            yield

        monkeypatch.setattr(skr, "next_span", recorded)
        assert len(list(r)) == 30 and spans == ["stoker.ray"] * 31
        per_actor = service.stats()
        assert sum(a["batches"][r.key] for a in per_actor) == 60
    finally:
        service.shutdown()


def test_the_torch_loader_and_the_jax_iterator_take_a_reader(ray_cluster):
    torch = pytest.importorskip("torch")
    import stoker.torch as skt

    service = skr.serve(_pipeline(), num_workers=2)
    try:
        loader = skt.loader(skr.reader(service))
        assert len(loader) == 30
        it = iter(loader)
        head = [next(it) for _ in range(7)]
        assert all(isinstance(b, torch.Tensor) for b in head)
        state = loader.state_dict()
        # Another process would make its own service and loader, and load the state.
        again = skt.loader(skr.reader(service))
        again.load_state_dict(state)
        rest = list(again)
        # Two actors, a batch from each in turn: the shards' batches interleaved.
        shards = [list(skr._share(_pipeline(), 2, i)) for i in (0, 1)]
        assert [int(v) for b in head + rest for v in b.reshape(-1)] == _values(_in_turn(shards))
        with pytest.raises(sk.InvalidArgumentError, match="stoker.ray.reader"):
            skt.loader(skr.reader(service), shard=(0, 2))
    finally:
        service.shutdown()
    jax = pytest.importorskip("jax")
    import stoker.jax as skj

    service = skr.serve(_pipeline(), num_workers=1)
    try:
        batches = list(skj.iterator(skr.reader(service)))
        assert all(isinstance(b, jax.Array) for b in batches)
        assert [int(v) for b in batches for v in np.asarray(b).ravel()] == _values(_pipeline())
    finally:
        service.shutdown()


def _chunked():
    return sk.Dataset.range(243).shuffle(32, seed=5).batch(7)


def test_the_trainer_makes_its_own_batches_from_the_actors_rows(ray_cluster):
    # The actors run the pipeline up to a batch of 7 that carries rows; the trainer cuts the
    # rows, taken from its actors in turn, into batches of 10: one short batch at the end.
    rows = _values(_in_turn([list(skr._share(_chunked(), 2, i)) for i in (0, 1)]))
    want = [rows[k : k + 10] for k in range(0, len(rows), 10)]
    service = skr.serve(_chunked, num_workers=2)
    try:
        r = skr.reader(service, batch_size=10)
        assert len(r) == len(want)
        assert [list(b) for b in r] == want
        # Cut at a state saved inside an item of 7 rows: a new reader goes on exactly.
        r = skr.reader(service, batch_size=10)
        it = iter(r)
        head = [list(next(it)) for _ in range(5)]
        state = r.state_dict()
        assert any(state["rows"].values())
        again = skr.reader(service, batch_size=10)
        again.load_state_dict(state)
        assert head + [list(b) for b in again] == want
        # An actor killed mid-epoch: the same batches.
        r = skr.reader(service, batch_size=10)
        it = iter(r)
        head = [list(next(it)) for _ in range(3)]
        _kill(ray_cluster, service.actor(1))
        assert head + [list(b) for b in it] == want
        assert r.stats()["restarts"] == 1
        dropped = skr.reader(service, batch_size=10, drop_remainder=True)
        assert len(dropped) == len(want) - 1
        assert [list(b) for b in dropped] == want[:-1]
        with pytest.raises(sk.InvalidArgumentError, match="batch_size"):
            skr.reader(service, batch_size=0)
    finally:
        service.shutdown()


def test_a_re_batching_reader_knows_its_length(ray_cluster):
    # Served as its spec, on three actors: shares of 84, 83 and 83 elements, each actor's last
    # batch short.
    ds = sk.Dataset.range(250).shuffle(32, seed=5).batch(8)
    service = skr.serve(ds, num_workers=3, num_cpus=0.5)
    try:
        for mode, world_size in (("shard", 2), ("epoch", 2), ("shard", 1)):
            for size in (7, 10, 41):
                for drop in (False, True):
                    for rank in range(world_size):
                        r = skr.reader(service, rank, world_size, mode=mode, batch_size=size, drop_remainder=drop)
                        got = [len(b) for b in r]
                        assert len(r) == len(got), (mode, size, drop, rank, got)
    finally:
        service.shutdown()
    # Rows only the run tells: a TypeError, as len() of such a pipeline. After an unbatch
    # before the batch; and after a shuffle of batches where one is short (it may be any
    # actor's), not where all are whole.
    for pipeline in (sk.Dataset.range(50).batch(5).unbatch().batch(8),
                     sk.Dataset.range(50).batch(8).shuffle(8, seed=1)):
        unknown = skr.serve(pipeline, num_workers=2, num_cpus=0.5)
        try:
            with pytest.raises(TypeError, match="not known before it runs"):
                len(skr.reader(unknown, 0, 2, batch_size=4))
        finally:
            unknown.shutdown()
    whole = skr.serve(sk.Dataset.range(48).batch(8).shuffle(8, seed=1), num_workers=2, num_cpus=0.5)
    try:
        r = skr.reader(whole, 1, 2, batch_size=5)
        assert len(r) == len(list(r)) == 5
    finally:
        whole.shutdown()


def test_a_re_batching_reader_of_a_pipeline_function_knows_its_length(ray_cluster):
    # Built on the actors: the rows come from the first actor's pipeline.
    service = skr.serve(_chunked, num_workers=2, num_cpus=0.5)
    try:
        for rank in range(2):
            r = skr.reader(service, rank, 2, batch_size=6)
            assert len(r) == len(list(r)) == -(-sum(len(b) for b in skr._share(_chunked(), 2, rank)) // 6)
    finally:
        service.shutdown()


def test_a_workers_share_goes_through_a_spec_unchanged(tmp_path):
    # An actor may build its pipeline from a spec: the share's kind must survive it.
    share = skr._share(_pipeline(), 3, 1)
    share.save_spec(str(tmp_path / "share.json"))
    again = sk.Dataset.load_spec(str(tmp_path / "share.json"))
    assert "shard(3, 1) by worker" in again.explain()
    got = _values(again)
    assert got == _values(share)
    others = [_values(skr._share(_pipeline(), 3, i)) for i in (0, 2)]
    assert sorted(got + others[0] + others[1]) == list(range(240))


def test_readers_of_one_mode_and_rank_each_get_their_own_iteration(ray_cluster):
    """Two readers of a whole epoch each, both rank 0 (the default), read in turns: each gets
    the whole epoch (they shared the actors' iterators, and each lost what the other took)."""
    service = skr.serve(_pipeline(), num_workers=2, num_cpus=0.5)
    try:
        a, b = skr.reader(service, mode="epoch"), skr.reader(service, mode="epoch")
        got_a, got_b = [], []
        for x, y in zip(a, b):
            got_a += _values([x])
            got_b += _values([y])
        assert sorted(got_a) == sorted(got_b) == list(range(240))
        # A reader that goes lets go of its iterators on the actors.
        key = a.key
        assert all(key in s["batches"] for s in service.stats())
        del a
        import gc

        gc.collect()
        deadline = time.monotonic() + 10
        while any(key in s["stages"] for s in service.stats()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(key in s["stages"] for s in service.stats())
    finally:
        service.shutdown()


def test_a_state_of_another_trainer_is_refused(ray_cluster):
    service = skr.serve(_pipeline(), num_workers=2, num_cpus=0.5)
    try:
        r0 = skr.reader(service, rank=0, world_size=2)
        it0 = iter(r0)
        next(it0)
        state = r0.state_dict()
        for other in (
            skr.reader(service, rank=1, world_size=2),
            skr.reader(service, rank=0, world_size=1),
            skr.reader(service, rank=0, world_size=2, mode="epoch"),
            skr.reader(service, rank=0, world_size=2, batch_size=4),
        ):
            with pytest.raises(sk.InvalidArgumentError, match="load_state_dict: the state is of a reader with"):
                other.load_state_dict(state)
        # A state saved before the reader said its mode and rank: its shards tell.
        old = {k: v for k, v in state.items() if k not in ("mode", "rank", "world_size", "batch_size")}
        with pytest.raises(sk.InvalidArgumentError, match=r"shards \[0\] of 2 actors"):
            skr.reader(service, rank=1, world_size=2).load_state_dict(old)
        same = skr.reader(service, rank=0, world_size=2)
        same.load_state_dict(old)
        assert _values(it0) == _values(same)
    finally:
        service.shutdown()


def test_an_iteration_left_before_its_end_is_followed_by_the_next_epoch(ray_cluster):
    """A loop of ``len(reader)`` steps never asks past the last batch: the next iteration is
    the next epoch (another order), as a pipeline's is; ``set_epoch`` during an iteration
    names the next one; ``len`` needs no live actor."""
    import itertools

    service = skr.serve(_pipeline(), num_workers=2, num_cpus=0.5)
    try:
        r = skr.reader(service)
        n = len(r)
        epochs = [_values(itertools.islice(r, n)) for _ in range(3)]
        assert all(sorted(e) == list(range(240)) for e in epochs)
        # (the last one left open: the next iteration moves on from it)
        assert epochs[0] != epochs[1] != epochs[2] and r.epoch == 2
        # the same epochs as a reader that ran each to its end, with set_epoch
        full = skr.reader(service)
        for e in range(3):
            full.set_epoch(e)
            assert _values(full) == epochs[e]
        # a break at a step limit: the rest of that epoch is left, the next one comes
        head = _values(itertools.islice(r, 5))
        assert sorted(_values(r)) == list(range(240)) and len(head) == 40
        assert r.epoch == 5
        it = iter(r)
        next(it)
        r.set_epoch(9)  # the next iteration's: this one goes on with its own
        assert sorted(_values([next(it)]) + _values(it)) != list(range(240))  # (one batch was taken before)
        full.set_epoch(9)
        nine = _values(full)
        assert _values(r) == nine and r.epoch == 10
        # set_epoch before an iteration under way has its first batch
        it = iter(r)
        r.set_epoch(9)
        assert _values(it) == _values(full.__iter__()) != nine  # that one ran epoch 10 (full: 10 too)
        assert _values(r) == nine
        # a state saved after set_epoch, inside an iteration: the restored reader goes on with
        # that iteration, then that epoch; the reader itself left its iteration
        it = iter(r)
        first = _values([next(it)])
        full.set_epoch(r.epoch)
        rest = _values(full)[len(first):]
        r.set_epoch(7)
        state = r.state_dict()
        restored = skr.reader(service)
        restored.load_state_dict(state)
        full.set_epoch(7)
        seven = _values(full)
        assert _values(r) == seven
        assert _values(restored) == rest and _values(restored) == seven
        # set_epoch after the load names the next iteration, and leaves the saved one
        restored.load_state_dict(state)
        restored.set_epoch(7)
        assert _values(restored) == seven
        # len() after an actor died between epochs
        _kill(ray_cluster, service.actor(0))
        assert len(r) == n
        assert sorted(_values(r)) == list(range(240))
    finally:
        service.shutdown()


def test_turns_go_round_the_actors_that_have_not_ended(ray_cluster):
    """Bad records only in actor 0's share end it early: the others go on in turn."""
    def uneven():
        good = sk.io.encode_png(np.full((2, 2, 3), 7, np.uint8))
        images = np.array([b"bad" if (i % 3 == 0 and i < 40) else good for i in range(60)], dtype=object)
        ds = sk.Dataset.from_tensor_slices({"image": images, "i": np.arange(60)})
        return ds.map([ops.decode_image("image", channels=3)]).ignore_errors().batch(2)

    service = skr.serve(uneven, num_workers=3, num_cpus=0.5)
    try:
        shards = [int(b["i"][0]) % 3 for b in skr.reader(service)]
        per_actor = [[k] * shards.count(k) for k in range(3)]
        assert shards.count(0) < shards.count(1)  # actor 0 ended first
        assert shards == _in_turn(per_actor)  # 0 1 2 0 1 2 ... then 1 2 1 2 ...
    finally:
        service.shutdown()


def test_a_dead_actor_with_no_room_for_its_successor_is_an_error_not_a_wait(ray_cluster):
    service = skr.serve(_pipeline(), num_workers=2, num_cpus=1, start_timeout=3)
    hog = None
    try:
        it = iter(skr.reader(service))
        next(it)
        _kill(ray_cluster, service.actor(0))

        @ray_cluster.remote(num_cpus=1)
        class Hog:
            def ping(self) -> int:
                return 1

        hog = Hog.remote()
        ray_cluster.get(hog.ping.remote())
        # On a thread, so that a wait without end fails the test instead of hanging it.
        raised: list[BaseException] = []

        def rest() -> None:
            try:
                list(it)
            except BaseException as e:  # noqa: BLE001 - examined below
                raised.append(e)

        worker = threading.Thread(target=rest, daemon=True)
        worker.start()
        worker.join(60)
        assert not worker.is_alive(), "the reader waited for a successor with no CPU free"
        assert len(raised) == 1 and isinstance(raised[0], sk.InvalidArgumentError), raised
        assert re.search(r"new actor .* start_timeout=3 s; the cluster has 2 CPUs", str(raised[0]))
    finally:
        if hog is not None:
            ray_cluster.kill(hog)
        service.shutdown()


def test_an_error_in_an_iteration_goes_on_and_a_copy_reads_on_its_own(ray_cluster):
    """An iteration that raised (a fetch that timed out, Ctrl-C) is followed by the rest of its
    epoch; a copy of a reader (pickled) has iterators of its own, which the original's going
    does not take away."""
    import copy
    import gc

    service = skr.serve(_pipeline(), num_workers=2, num_cpus=0.5)
    try:
        for size in (None, 12):
            r = skr.reader(service, batch_size=size)
            it = r._iterate(span=False)
            first = _values([next(it), next(it)])
            with pytest.raises(RuntimeError, match="interrupted"):
                it.throw(RuntimeError("interrupted"))
            rest = _values(r)
            assert sorted(first + rest) == list(range(240)), size
            full = skr.reader(service, batch_size=size)
            assert first + rest == _values(full)
        r = skr.reader(service, mode="epoch")
        twin = copy.copy(r)
        assert twin.key != r.key
        it = iter(twin)
        head = _values([next(it)])
        del r
        gc.collect()
        time.sleep(0.5)
        assert sorted(head + _values(it)) == list(range(240))
    finally:
        service.shutdown()
