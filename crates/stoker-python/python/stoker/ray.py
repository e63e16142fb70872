"""Preprocessing on a Ray cluster, streamed to the trainers, exactly once.

``serve(pipeline, num_workers=k)`` starts ``k`` Ray actors; actor ``i`` runs the pipeline over
its share of the elements: positions ``i, i + k, ...`` of the stream where the planner puts the
share, which it moves towards the source through the maps and the ``batch`` (each actor then
batches its own share), into a ``global_shuffle`` (which reads only the share's records), and,
under ``ignore_errors()``, through the steps that skip. It stops above steps whose output
would change (a shuffle buffer, a filter, an interleave, a repeat, a cache, a batch with random
ops or a take after it; under ``ignore_errors()`` a take; a warning at ``serve`` names the
step, why, and the work every actor then repeats below it). No
element is left out: the shares differ by one element at most. Where the share is below the
batch, each actor's last batch may be short (with ``drop_remainder=True`` each actor drops its
own short batch). Trainers consume the service with
``reader(service, rank, world_size)``:

- ``mode="shard"`` (the default): trainer ``rank`` takes the actors ``i`` with
  ``i % world_size == rank``, in turn, one batch from each: across the trainers every element
  of an epoch comes exactly once (tf.data service's ``distributed_epoch``);
- ``mode="epoch"``: every trainer takes every actor's elements: a whole epoch each.

Batches move as NumPy arrays through Ray's object store (zero-copy on the same node). A reader
keeps at most ``prefetch`` requests in flight per actor, each for ``batches_per_request``
batches (fewer calls, each carrying more, cost the actor and the trainer less per batch), so an
actor hands out at most ``prefetch * batches_per_request`` batches ahead of its trainer (its
pipeline's own buffers aside): memory is bounded and nothing is spilled in steady state.

Exactly once under failure: each batch comes with the actor's iterator state after it
(stoker's exact, small state). The reader keeps, per actor, the state after the last batch it
handed to the trainer. When an actor dies (killed, its node lost), the reader starts a new one
for that shard at that state: it hands out the next batch the dead one would have, so nothing is
lost or repeated, in the same order. ``state_dict()`` holds those states, and a reader made with
``load_state_dict`` (a restarted trainer) goes on from them (a state of another trainer, of
other shards, is refused). Bad records under
``ignore_errors()`` are skipped by a successor as by the dead actor (the same elements come
out). Each batch comes with the bad records its actor skipped in the epoch before it, read
from the state after it (exact, however far the actor's pipeline ran ahead): those in its
share, and those below its share, where every actor reads the whole stream (a reader counts
these once: ``Reader.skipped``). An actor started at a state, after a death or for a restarted
trainer, counts on from the count the state holds: every bad record is counted once. Random
ops after a skipped record may draw other numbers on ``k`` actors than on one (their
positions are counted in the share).

With ``reader(..., batch_size=n)`` the actors run the pipeline up to a ``batch`` that carries
its rows, and the trainer cuts the rows (the items taken in turn) into batches of ``n``: the
state then holds the rows of an item already used, and a restore or a restart goes on at the
next row. Its ``len`` is the number of those batches, where the number of elements each actor
batches is known and the pipeline ends in its ``batch`` (the steps after it keep the rows).

A reader is what ``stoker.torch.loader(reader, device=...)`` and ``stoker.jax.iterator(reader)``
take in place of a pipeline: they put its batches on the device, and their ``state_dict`` is the
reader's. Each iteration of a reader is the epoch after the last one it ran (to its end or
not, as a pipeline's), or the one ``set_epoch`` names.

``service.resize(k)`` runs the pipeline on ``k`` actors from the readers' next epoch on: a
new epoch is split anew over the new actors, every element still once across the trainers. A
resize inside an epoch, or a state saved inside an epoch on another number of actors, is an
error at the reader's next batch, not data lost or repeated.

Seen from the trainer: ``reader.stats()`` (batches and bytes received, ``wait_s``: the time its
loop waited on the service; ``stoker.timed(reader)`` puts that wait in each step's report) and
``service.stats()`` (per actor: batches handed out and the time spent making them, per reader,
and its pipeline's stage counters).

Nothing of Ray is imported until a service starts (``pip install 'stoker[ray]'``).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
import uuid
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Union

import numpy as np

from ._check import whole
from ._feed import check_shard
from ._profile import next_span
from ._structure import flatten, pack
from .dataset import Dataset
from .errors import InvalidArgumentError

Pipeline = Union[Dataset, Callable[[], Dataset]]

_MODES = ("shard", "epoch")


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise InvalidArgumentError("stoker.ray needs Ray: pip install 'stoker[ray]'") from None
    if not ray.is_initialized():
        ray.init(log_to_driver=False)
    return ray


class _Worker:
    """One shard of the pipeline, on a Ray actor: builds it, and hands out its batches with the
    iterator's state after each, to each reader (by its key) from an iterator of its own."""

    def __init__(self, build: Any, shard: int, num_shards: int) -> None:
        self.build, self.shard, self.num_shards = build, shard, num_shards
        # The seeds every actor's pipeline takes for the steps given none (see `set_seeds`).
        self.seeds: list[int] | None = None
        # The whole pipeline's cardinality and batch rows (see `Service.rows`).
        self.whole: tuple[int, tuple[int, int] | None] = (-2, None)
        self.ds = self._pipeline()
        # Per reader: a pipeline of its own (so that its counters are its own), its iterator,
        # and what it has handed out.
        self.pipelines: dict[str, Dataset] = {}
        self.its: dict[str, Any] = {}
        self.handed_out: dict[str, int] = {}
        self.busy_s: dict[str, float] = {}

    def _pipeline(self) -> Dataset:
        if isinstance(self.build, str):  # a spec document
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                f.write(self.build)
            try:
                ds = Dataset.load_spec(f.name)
            finally:
                os.unlink(f.name)
        else:
            ds = self.build()
            if not isinstance(ds, Dataset):
                raise InvalidArgumentError(
                    f"serve: the function given as pipeline must return a stoker.Dataset, got {type(ds).__name__}"
                )
        self.whole = _whole_rows(ds)
        ds = _share(ds, self.num_shards, self.shard)
        if self.seeds is not None:
            ds._plan.set_seed_values(self.seeds)
        return ds

    def seed_values(self) -> list[int]:
        return list(self.ds._plan.seed_values())

    def set_seeds(self, seeds: list[int]) -> None:
        """Makes this actor's pipelines (those made from now on too) take ``seeds``: the
        shards of one order, not each of an order of its own."""
        self.seeds = list(seeds)
        for ds in [self.ds, *self.pipelines.values()]:
            ds._plan.set_seed_values(self.seeds)

    def cardinality(self) -> int:
        return self.ds.cardinality()

    def whole_rows(self) -> tuple[int, tuple[int, int] | None]:
        return self.whole

    def rows(self) -> int | None:
        """The rows of one pass of this actor's share, where it ends in a batch of known
        input (see `Service.rows`)."""
        return self.ds._plan.rows_per_pass()

    def plan_warnings(self) -> list[str]:
        return list(self.ds._plan.plan_warnings())

    def start(self, key: str, epoch: int, state: bytes | None) -> bytes:
        """Starts reader ``key``'s iterator at ``state`` (``None``: the start of ``epoch``);
        returns the state it starts at, which holds the seeds it draws from."""
        if key not in self.pipelines:
            self.pipelines[key] = self._pipeline()
        ds = self.pipelines[key]
        old = self.its.pop(key, None)
        if old is not None:
            old.close()
        self.its[key] = ds.iterator(state=state, epoch=None if state else epoch)
        self.handed_out.setdefault(key, 0)
        self.busy_s.setdefault(key, 0.0)
        return bytes(self.its[key].state())

    def drop(self, key: str) -> None:
        """Lets go of reader ``key``'s pipeline and iterator (the reader is gone)."""
        it = self.its.pop(key, None)
        if it is not None:
            it.close()
        for held in (self.pipelines, self.handed_out, self.busy_s):
            held.pop(key, None)

    def take(self, key: str, n: int) -> tuple[list[tuple[Any, bytes, _Skips]], bool, _Skips]:
        """Up to ``n`` batches, each with the state after it and the bad records skipped in
        the epoch before it (from the state: exact, and carried on from the state the
        iterator started at); whether the shard ended; and the bad records skipped in the
        epoch by now (at the end: after the last batch too)."""
        t0 = time.perf_counter()
        it = self.its[key]
        out: list[tuple[Any, bytes, _Skips]] = []
        ended = False
        for _ in range(n):
            try:
                batch = next(it)
            except StopIteration:
                ended = True
                break
            out.append((batch, it.state(), it._skipped_split()))
        self.handed_out[key] += len(out)
        self.busy_s[key] += time.perf_counter() - t0
        return out, ended, it._skipped_split()

    def stats(self) -> dict[str, Any]:
        stages: dict[str, Any] = {}
        for key, ds in self.pipelines.items():
            stages[key] = list(ds.stats())
        return {
            "batches": dict(self.handed_out),
            "busy_s": dict(self.busy_s),
            "stages": stages,
        }


def _share(ds: Dataset, num_workers: int, index: int) -> Dataset:
    """Actor ``index``'s share of ``ds``: elements ``index, index + num_workers, ...`` of the
    stream where the planner puts the share, as low as it moves (below a ``batch`` too: each
    actor then batches its own share), none left out (the shares differ by one element at
    most, so each actor's last batch may be short)."""
    if num_workers == 1:
        return ds
    return Dataset(ds._plan.shard(num_workers, index, True, True), ds._structure)


def _whole_rows(ds: Dataset) -> tuple[int, tuple[int, int] | None]:
    """``ds``'s cardinality and its batches' rows (see `Service.rows`), these where every
    batch is whole or a short one can only be the pass's last element."""
    rows = ds._rows if ds._rows is not None and (ds._rows[1] == 0 or ds._short_at_end) else None
    return ds.cardinality(), rows


#: Times a reader starts a shard on a new actor before the actor's death is its error (a
#: pipeline that kills its process as it starts would otherwise be started for ever).
_STARTS = 3

#: Bad records skipped: by the steps below an actor's share, which every actor runs over the
#: same stream, and by the steps after it, each actor over its own share.
_Skips = tuple[int, int]


def _epoch_skipped(by_shard: dict[int, _Skips]) -> int:
    """The bad records of an epoch, from the counts of a reader's shards: those below the
    shares once (each actor's count is the whole stream's there, up to where it stands), and
    every actor's own."""
    return _epoch_shared(by_shard) + sum(o for _, o in by_shard.values())


def _epoch_shared(by_shard: dict[int, _Skips]) -> int:
    """Of `_epoch_skipped`, the bad records below the shares."""
    return max((b for b, _ in by_shard.values()), default=0)


class Service:
    """The actors running a pipeline's shards (see :func:`serve`)."""

    def __init__(self, pipeline: Pipeline, num_workers: int, num_cpus: float, start_timeout: float) -> None:
        # The whole pipeline's cardinality and batch rows, where the driver knows them (a
        # pipeline sent as its spec does not carry its rows).
        self._whole: tuple[int, tuple[int, int] | None] | None = None
        if isinstance(pipeline, Dataset):
            self._build: Any = json.dumps(pipeline.spec())
            self._whole = _whole_rows(pipeline)
        elif callable(pipeline):
            self._build = pipeline
        else:
            raise InvalidArgumentError(
                f"serve: pipeline must be a stoker.Dataset or a function that makes one, got {type(pipeline).__name__}"
            )
        _check_workers("serve", num_workers)
        if isinstance(num_cpus, bool) or not isinstance(num_cpus, (int, float)) or not num_cpus > 0:
            raise InvalidArgumentError(f"serve: num_cpus must be a number above 0, got {num_cpus!r}")
        if isinstance(start_timeout, bool) or not isinstance(start_timeout, (int, float)) or not start_timeout > 0:
            raise InvalidArgumentError(
                f"serve: start_timeout must be a number of seconds above 0, got {start_timeout!r}"
            )
        self.num_cpus, self.start_timeout = num_cpus, float(start_timeout)
        self._ray = _ray()
        self._cls = self._ray.remote(num_cpus=num_cpus, max_restarts=0)(_Worker)
        self.num_workers = 0
        self._actors: list[Any] = []
        #: How many times the set of actors was resized: a reader's epoch runs on one set.
        self.generation = 0
        self.restarts = 0
        self._seeds: list[int] | None = None
        # Per actor: the rows of one pass of its share (see `rows`).
        self._share_rows: list[int | None] = []
        self.cardinalities: list[int] = []
        self._warned = False
        self._start(num_workers)

    def _start(self, num_workers: int) -> None:
        """Starts ``num_workers`` actors and waits until each runs (its pipeline built), at
        most ``start_timeout`` seconds: a cluster without room for them is an error, not a
        wait without end."""
        actors = [self._cls.remote(self._build, i, num_workers) for i in range(num_workers)]
        ready = [a.__ray_ready__.remote() for a in actors]
        done, _ = self._ray.wait(ready, num_returns=len(ready), timeout=self.start_timeout)
        if len(done) < len(ready):
            for a in actors:
                self._ray.kill(a)
            raise self._not_started(
                f"serve: {len(ready) - len(done)} of num_workers={num_workers} actors (num_cpus={self.num_cpus} each)",
                ": fewer workers, a smaller num_cpus, or more nodes",
            )
        self._ray.get(done)  # an actor whose pipeline failed to build raises its error here
        # A step given no seed (a shuffle, a random op) draws one in each actor: each would
        # take its shard of another order, and elements would be lost and repeated. Every
        # actor takes the first one's, for as long as the service runs.
        if self._seeds is None:
            self._seeds = self._ray.get(actors[0].seed_values.remote())
        if self._whole is None:
            self._whole = self._ray.get(actors[0].whole_rows.remote())
        if num_workers > 1 and not self._warned:
            self._warned = True
            # Work every actor repeats (its share stops above it): said once, on the driver.
            for message in self._ray.get(actors[0].plan_warnings.remote()):
                warnings.warn(message, stacklevel=4)
        self._share_rows = self._ray.get([a.rows.remote() for a in actors])
        # Per actor: its share's cardinality (known as it starts; a reader's `len` asks no
        # actor, which may have died since)
        self.cardinalities = self._ray.get([a.cardinality.remote() for a in actors])
        self._ray.get([a.set_seeds.remote(self._seeds) for a in actors])
        self._actors, self.num_workers = actors, num_workers

    def actor(self, shard: int) -> Any:
        return self._actors[shard]

    def replace(self, shard: int, dead: Any, generation: int) -> Any:
        """A new actor for ``shard`` in place of ``dead`` (another reader may have replaced it
        already), for a reader whose epoch runs on ``generation``'s actors."""
        if generation != self.generation:
            raise InvalidArgumentError(
                f"stoker.ray: the service was resized to {self.num_workers} workers during an epoch of a reader; "
                "resize between epochs"
            )
        if self._actors[shard] is dead:
            # Dead, or alive with a batch lost (its node's object store): out of use either way.
            with contextlib.suppress(Exception):
                self._ray.kill(dead)
            actor = self._cls.remote(self._build, shard, self.num_workers)
            self.ready(actor.set_seeds.remote(self._seeds), f"a new actor for shard {shard} in place of a dead one")
            self._actors[shard] = actor
            self.restarts += 1
        return self._actors[shard]

    def ready(self, ref: Any, what: str) -> Any:
        """``ref`` 's value, within ``start_timeout`` seconds: else an error naming ``what``, and
        the cluster's room, not a wait without end (no CPU free for a new actor, say)."""
        try:
            return self._ray.get(ref, timeout=self.start_timeout)
        except self._ray.exceptions.GetTimeoutError:
            raise self._not_started(f"stoker.ray: {what} (num_cpus={self.num_cpus})") from None

    def _not_started(self, who: str, remedy: str = "") -> InvalidArgumentError:
        """The error for actors (``who``) that did not start in time, with the cluster's room."""
        cpus = self._ray.cluster_resources().get("CPU", 0)
        free = self._ray.available_resources().get("CPU", 0)
        return InvalidArgumentError(
            f"{who} did not start within start_timeout={self.start_timeout:g} s; "
            f"the cluster has {cpus:g} CPUs, {free:g} free{remedy}"
        )

    def resize(self, num_workers: int) -> None:
        """Runs the pipeline on ``num_workers`` actors from the readers' next epoch on (each
        actor then runs shard ``i`` of ``num_workers``). Between epochs: a reader in the middle
        of one, or holding a state saved inside one, raises an error at its next batch."""
        _check_workers("resize", num_workers)
        # The old actors go first: the new ones may need their CPUs.
        for a in self._actors:
            self._ray.kill(a)
        self._actors, self.num_workers, self.cardinalities = [], 0, []
        self.generation += 1
        self._start(num_workers)

    def rows(self, shards: list[int]) -> int:
        """Rows in one pass of the actors ``shards``, where the pipeline ends in a ``batch`` (the
        steps after it keep its rows) of an input whose length is known; a ``TypeError`` where
        they are not known before it runs."""
        card, rows = self._whole if self._whole is not None else (-2, None)
        counts = [self._share_rows[i] for i in shards]
        if card < 0 or rows is None or any(c is None for c in counts):
            raise TypeError(
                "a reader that re-batches (batch_size) knows its length where the pipeline's cardinality is known "
                "and it ends in a batch (and the steps after it keep the rows); this one's is not known before it runs"
            )
        return sum(c for c in counts if c is not None)

    def stats(self) -> list[dict[str, Any]]:
        """Per actor: its shard, the batches it handed out and the time it spent making them
        (per reader), and its pipeline's stages' counters (``Dataset.stats()``, per reader)."""
        refs = [a.stats.remote() for a in self._actors]
        return [{"shard": i, **s} for i, s in enumerate(self._ray.get(refs))]

    def shutdown(self) -> None:
        for a in self._actors:
            self._ray.kill(a)
        self._actors = []


def _drop_key(service: Service, key: str) -> None:
    """Tells the service's actors that reader ``key`` is gone (its iterators' threads and
    buffers go too); nothing where the service or Ray has shut down."""
    with contextlib.suppress(Exception):
        if service._actors and service._ray.is_initialized():
            for a in service._actors:
                a.drop.remote(key)


def _loaded_skips(n: Any) -> _Skips:
    """A shard's count from a saved state (an int where an older reader saved it)."""
    if isinstance(n, int):
        return n, 0
    if not isinstance(n, (list, tuple)) or len(n) != 2:
        raise InvalidArgumentError(f"load_state_dict: state['skipped'] holds {n!r}, not a count or a pair of counts")
    return int(n[0]), int(n[1])


def _check_workers(what: str, num_workers: Any) -> None:
    whole(f"{what}: num_workers", num_workers, 1)


def serve(pipeline: Pipeline, num_workers: int = 2, num_cpus: float = 1, start_timeout: float = 60) -> Service:
    """Starts ``num_workers`` Ray actors (``num_cpus`` each), actor ``i`` running shard ``i`` of
    ``pipeline``: a :class:`stoker.Dataset` made of native steps (sent as its spec), or a
    function that makes one (sent with Ray's pickling; for pipelines with Python functions).
    Returns once every actor runs; an ``InvalidArgumentError`` after ``start_timeout`` seconds
    when the cluster has no room for them."""
    return Service(pipeline, num_workers, num_cpus, start_timeout)


class Reader:
    """A trainer's view of a service (see :func:`reader`): iterate it for one epoch's batches;
    ``set_epoch``, ``state_dict`` / ``load_state_dict`` and ``len`` as a data loader has."""

    def __init__(
        self,
        service: Service,
        rank: int,
        world_size: int,
        mode: str,
        prefetch: int,
        batch_size: int | None,
        drop_remainder: bool,
        batches_per_request: int = 2,
    ) -> None:
        if not isinstance(service, Service):
            raise InvalidArgumentError(
                f"reader: service must be what stoker.ray.serve returns, got {type(service).__name__}"
            )
        if mode not in _MODES:
            raise InvalidArgumentError(f"reader: mode must be one of {_MODES}, got {mode!r}")
        rank, world_size = check_shard(rank, world_size, "reader")
        prefetch = whole("reader: prefetch", prefetch, 1)
        self.batches_per_request = whole("reader: batches_per_request", batches_per_request, 1)
        if batch_size is not None:
            batch_size = whole("reader: batch_size", batch_size, 1)
        self.service, self.rank, self.world_size, self.mode, self.prefetch = service, rank, world_size, mode, prefetch
        self.batch_size, self.drop_remainder = batch_size, bool(drop_remainder)
        self.shards = self._shards()
        if mode == "shard" and service.num_workers % world_size:
            warnings.warn(
                f"reader: {service.num_workers} workers over world_size={world_size} trainers: the ranks take "
                "different numbers of shards, so different numbers of batches (under DDP every rank must take "
                "as many steps): serve num_workers a multiple of world_size",
                stacklevel=3,
            )
        self._new_key()
        self.epoch = 0
        # The epoch `set_epoch` named for the next iteration (None: the one after the last)
        self._next_epoch: int | None = None
        self._next_after_restored = False
        # An iteration of this reader has handed out batches and neither ended nor failed
        # (see `_iterate`)
        self._open = False
        # Bad records skipped in the epochs this reader finished.
        self._skipped_earlier = 0
        # Of those, the ones below the actors' shares (every trainer counts them).
        self._shared_earlier = 0
        self._fresh()
        self._restored = False
        self._wait_s = 0.0
        self._batches = 0
        self._bytes = 0
        self._restarts = 0

    def _new_key(self) -> None:
        """Each reader its own iterators on the actors, also where two have one mode and rank
        (two readers of a whole epoch each, say), and a copy of one (pickled, say): a key of
        its own, whose iterators the actors let go of when the reader goes (not at the
        interpreter's exit: Ray goes with it)."""
        self.key = f"{self.mode}:{self.rank}:{uuid.uuid4().hex}"
        weakref.finalize(self, _drop_key, self.service, self.key).atexit = False

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._new_key()

    def _shards(self) -> list[int]:
        """The shards this reader takes, of the service's current actors."""
        return self._shards_of(self.service.num_workers)

    def _shards_of(self, num_workers: int) -> list[int]:
        """The shards this reader takes of ``num_workers`` actors."""
        shards = list(range(num_workers))
        if self.mode == "epoch":
            return shards
        if num_workers < self.world_size:
            raise InvalidArgumentError(
                f"reader: mode='shard' needs at least one worker per trainer: {num_workers} workers "
                f"for world_size={self.world_size}"
            )
        return [i for i in shards if i % self.world_size == self.rank]

    def _fresh(self) -> None:
        # Per shard: the state after the last batch handed out (None: the epoch's start), and
        # the bad records skipped in the epoch up to it (what that state holds).
        self.shards = self._shards()
        self._workers = self.service.num_workers
        self._acked: dict[int, bytes | None] = {i: None for i in self.shards}
        # Per shard: rows of the item after the acknowledged state already handed out (in a
        # batch of the reader's own, with batch_size).
        self._rows: dict[int, int] = {i: 0 for i in self.shards}
        self._skipped: dict[int, _Skips] = {i: (0, 0) for i in self.shards}
        self._ended: set[int] = set()
        self._turn = 0

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration epoch ``epoch`` (its reshuffles and random ops); an
        iteration under way goes on with its own. Without it, each iteration is the epoch after
        the last one it ran (finished, or left before its end: as a pipeline's iterations); a
        state loaded inside an epoch goes on with that epoch where ``epoch`` is it. A state saved
        after it keeps it: loaded, the saved iteration goes on, then epoch ``epoch`` comes."""
        self._next_epoch = whole("set_epoch: epoch", epoch, 0)
        self._next_after_restored = False

    def __len__(self) -> int:
        if self.batch_size is not None:
            n, rest = divmod(self.service.rows(self._shards()), self.batch_size)
            return n + int(bool(rest) and not self.drop_remainder)
        counts = [self.service.cardinalities[i] for i in self._shards()]
        if any(c < 0 for c in counts):
            raise TypeError("the pipeline's length is not known before it runs (cardinality() < 0)")
        return int(sum(counts))

    def state_dict(self) -> dict[str, Any]:
        """Where this reader stands: after the last batch handed out; after an epoch's last
        batch, the start of the next epoch."""
        return {
            "mode": self.mode,
            "rank": self.rank,
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            "epoch": self.epoch,
            "next_epoch": self._next_epoch,
            "workers": self._workers,
            "turn": self._turn,
            "acked": {str(i): (s.hex() if s is not None else None) for i, s in self._acked.items()},
            "rows": {str(i): n for i, n in self._rows.items()},
            "skipped": {str(i): list(n) for i, n in self._skipped.items()},
            "skipped_earlier": self._skipped_earlier,
            "shared_earlier": self._shared_earlier,
            "ended": sorted(self._ended),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The next iteration goes on from ``state`` (from :meth:`state_dict`, also of a reader
        in another process, of another service running the same pipeline), of a reader of the
        same mode, rank, world_size and batch_size: another's is an ``InvalidArgumentError``
        (it holds another trainer's shards)."""
        mine: dict[str, Any] = {"mode": self.mode, "batch_size": self.batch_size}
        if self.mode == "shard":  # (each trainer of a whole epoch reads the same)
            mine.update(rank=self.rank, world_size=self.world_size)
        other = {k: state[k] for k in mine if k in state and state[k] != mine[k]}
        workers = int(state.get("workers", self.service.num_workers))
        shards = sorted(int(i) for i in state["acked"])
        if other or shards != self._shards_of(workers):
            said = ", ".join(f"{k}={v!r}" for k, v in other.items()) or f"shards {shards} of {workers} actors"
            raise InvalidArgumentError(
                f"load_state_dict: the state is of a reader with {said}; this reader has "
                + ", ".join(f"{k}={v!r}" for k, v in mine.items())
                + f" (shards {self._shards_of(workers)} of {workers} actors): load each trainer's own state"
            )
        self.epoch = int(state["epoch"])
        given = state.get("next_epoch")
        self._next_epoch = None if given is None else int(given)
        # Named by set_epoch before the state was saved: the epoch after the one it stands in
        self._next_after_restored = given is not None
        self._open = False
        self._workers = workers
        self._turn = int(state["turn"])
        self._acked = {int(i): (bytes.fromhex(s) if s is not None else None) for i, s in state["acked"].items()}
        self._rows = {int(i): int(state.get("rows", {}).get(i, 0)) for i in state["acked"]}
        self._skipped = {int(i): _loaded_skips(n) for i, n in state["skipped"].items()}
        self._ended = {int(i) for i in state["ended"]}
        self._skipped_earlier = int(state.get("skipped_earlier", 0))
        # A state from before the split: every count was the whole stream's.
        self._shared_earlier = int(state.get("shared_earlier", self._skipped_earlier))
        self.shards = sorted(self._acked)
        self._restored = True

    def _started(self) -> bool:
        return bool(self._ended) or any(s is not None for s in self._acked.values()) or any(self._rows.values())

    def skipped(self) -> int:
        """Bad records skipped under ``ignore_errors()`` in the epochs this reader ran (from a
        loaded state: in the epochs of the reader that saved it too): those its actors skipped
        in their shares, and, once, those skipped below the shares (where every actor reads
        the whole stream; ``stats()["skipped_shared"]``, the same for every trainer). A job's
        total under ``mode="shard"``: the trainers' counts less ``skipped_shared``, summed, plus
        ``skipped_shared`` (under ``mode="epoch"`` each trainer's count is the whole epoch's).
        Inside an epoch it counts those before the last item each actor handed to this reader
        (not those its pipeline skipped ahead of it), also across an actor's death and from a
        state saved inside the epoch: every bad record once."""
        return self._skipped_earlier + _epoch_skipped(self._skipped)

    def stats(self) -> dict[str, Any]:
        """This trainer's side: batches and bytes received, the time its loop waited for them
        (``wait_s``), the actors started again for its shards, and the bad records skipped."""
        return {
            "batches": self._batches,
            "bytes": self._bytes,
            "wait_s": self._wait_s,
            "restarts": self._restarts,
            "skipped": self.skipped(),
            "skipped_shared": self._shared_earlier + _epoch_shared(self._skipped),
            "shards": list(self.shards),
            "workers": self._workers,
        }

    def _feed_source(self) -> _FeedSource:
        """This reader as the batches of ``stoker.torch.loader`` / ``stoker.jax.iterator``."""
        return _FeedSource(self)

    def __iter__(self) -> Iterator[Any]:
        return self._iterate(span=True)

    def _iterate(self, span: bool) -> Iterator[Any]:
        """This epoch's batches (see :meth:`__iter__`); each wait in a profiler span with
        ``span``."""
        if self._open and not self._restored:
            # The last iteration was left before its end (a loop of `len(reader)` steps that
            # did not ask past them, a `break`): this one is the next epoch, as a pipeline's
            # next iteration is, not that epoch again
            self._end_epoch()
        goes_on = self._restored and self._started()
        if goes_on and self._next_after_restored:
            given = None  # the saved iteration goes on first; its named successor after it
        else:
            given, self._next_epoch = self._next_epoch, None
        self._next_after_restored = False
        if given is not None and given != self.epoch:
            if self._restored and self._started():
                self._leave_epoch()  # a state inside another epoch: that epoch is left
            self.epoch, self._restored = given, False
        self._open = False
        if not self._restored or not self._started():
            self._fresh()
        elif self._workers != self.service.num_workers:
            raise InvalidArgumentError(
                f"stoker.ray: this reader's state is inside an epoch on {self._workers} workers, and the service "
                f"has {self.service.num_workers}: resize between epochs, or serve with num_workers={self._workers} "
                "to go on from it"
            )
        self._restored = False
        return _spanned(self._epoch_batches()) if span else self._epoch_batches()

    def _epoch_batches(self) -> Iterator[Any]:
        chunks = self._chunks()
        batches = chunks if self.batch_size is None else self._rebatched(chunks, self.batch_size)
        try:
            for i, batch, state in batches:
                if i >= 0:
                    self._settle(i, state)
                self._open = True
                yield self._counted(batch)
        except GeneratorExit:
            raise  # left by the loop: see `_iterate`
        except BaseException:
            # An error (Ctrl-C, a fetch that timed out): the next iteration goes on after the
            # last batch handed out, as from a state saved then
            self._open, self._restored = False, self._started()
            raise
        # The epoch is over: the next iteration (and a state saved now) is the next epoch's.
        self._end_epoch()

    def _end_epoch(self) -> None:
        """This epoch is over (or left): the next one's start."""
        self.epoch += 1
        self._leave_epoch()

    def _leave_epoch(self) -> None:
        """The positions of this epoch are dropped; its bad records counted."""
        self._open = False
        self._skipped_earlier += _epoch_skipped(self._skipped)
        self._shared_earlier += _epoch_shared(self._skipped)
        self._fresh()

    def _settle(self, i: int, state: bytes) -> None:
        """Shard ``i``'s item in hand was handed out whole: the state after it is acknowledged,
        and the next item is the next shard's in turn."""
        self._acked[i], self._rows[i] = state, 0
        self._turn += 1

    def _counted(self, batch: Any) -> Any:
        self._batches += 1
        self._bytes += _nbytes(batch)
        return batch

    def _chunks(self) -> Iterator[tuple[int, Any, bytes]]:
        """The service's items for this epoch, one from each of this reader's shards in turn
        (the next one asked for once the last one is settled), each with its shard and the
        shard's state after it. An actor that dies is replaced and goes on after the last item
        received from it."""
        ray = self.service._ray
        generation = self.service.generation
        actors = {i: self.service.actor(i) for i in self.shards}
        pending: dict[int, deque[Any]] = {i: deque() for i in self.shards}
        # Items received and not yet handed on, per shard; the shards whose actor said they
        # ended; per shard, the state after the last item handed on, where a new actor starts;
        # rows of the first item a restored state had handed out already.
        ready: dict[int, deque[tuple[Any, bytes, _Skips]]] = {i: deque() for i in self.shards}
        ending: set[int] = set()
        # Per shard whose actor said it ended: the bad records it skipped in all.
        final: dict[int, _Skips] = {}
        resume = dict(self._acked)
        drop = {i: self._rows.get(i, 0) for i in self.shards}

        def restart(i: int) -> bytes:
            """Starts shard ``i`` at ``resume[i]`` on a new actor in place of a dead one (also
            one that died since this reader last used it, between epochs say)."""
            for attempt in range(_STARTS):
                try:
                    actors[i] = self.service.replace(i, actors[i], generation)
                    self._restarts += 1
                    # (no time limit: a restore may run the stream up to its state; the new
                    # actor's coming up has one, in `replace`)
                    return bytes(ray.get(actors[i].start.remote(self.key, self.epoch, resume[i])))
                except ray.exceptions.RayActorError:
                    if attempt == _STARTS - 1:
                        raise
            raise AssertionError("unreachable")

        t0 = time.perf_counter()
        calls = {i: actors[i].start.remote(self.key, self.epoch, resume[i]) for i in self.shards}
        for i in self.shards:
            try:
                at = ray.get(calls[i])
            except ray.exceptions.RayActorError:
                at = restart(i)
            # A shard not begun yet is held at its start state, with the seeds it draws from:
            # a state saved now restores to the same order, also under another service's seeds.
            if resume[i] is None:
                resume[i] = self._acked[i] = at
        self._wait_s += time.perf_counter() - t0
        while len(self._ended) < len(self.shards):
            # the next shard in turn that has not ended (the turns go on round the others)
            while self.shards[self._turn % len(self.shards)] in self._ended:
                self._turn += 1
            i = self.shards[self._turn % len(self.shards)]
            t0 = time.perf_counter()
            while not ready[i] and i not in ending:
                while len(pending[i]) < self.prefetch:
                    pending[i].append(actors[i].take.remote(self.key, self.batches_per_request))
                try:
                    got, ended, skipped_by_now = ray.get(pending[i].popleft())
                except ray.exceptions.ObjectFetchTimedOutError:
                    raise  # the batch may still be there: not a reason to replace the actor
                except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError):
                    # Lost with the actor: what it made after the last item handed on. A new
                    # actor goes on from there, counting on from the count that state holds.
                    pending[i].clear()
                    ready[i].clear()
                    restart(i)
                    continue
                ready[i].extend(got)
                if ended:
                    ending.add(i)
                    final.setdefault(i, skipped_by_now)
            self._wait_s += time.perf_counter() - t0
            if not ready[i]:
                # Bad records after the shard's last item count too (its actor passed over
                # the rest of the stream looking for another).
                self._skipped[i] = final.get(i, self._skipped[i])
                self._ended.add(i)
                pending[i].clear()
                continue
            item, state, skipped = ready[i].popleft()
            resume[i] = state
            self._skipped[i] = skipped
            if drop[i]:
                item, self._rows[i] = _rows(item, drop[i], None), drop[i]
                drop[i] = 0
            yield i, item, state

    def _rebatched(self, chunks: Iterator[tuple[int, Any, bytes]], size: int) -> Iterator[tuple[int, Any, bytes]]:
        """The rows of the service's items, in turn, cut into batches of ``size``; the last
        one shorter, or dropped with ``drop_remainder``. A state saved between them holds, per
        shard, the state after its last item used up and the rows taken from the next."""
        parts: list[Any] = []
        have = 0
        # What the rows in `parts` use up, settled once their batch is handed out (a state
        # saved then, or an error before, goes on after the rows handed out): per piece, its
        # shard, the state after its item where it ends the item, and its rows.
        # The turns move on as items are used up (the next item is the next shard's).
        used: list[tuple[int, bytes | None, int]] = []
        try:
            for i, item, state in chunks:
                n, at = _length(item), 0
                while at < n:
                    k = min(size - have, n - at)
                    parts.append(_rows(item, at, at + k))
                    at += k
                    have += k
                    used.append((i, state if at == n else None, k))
                    if at == n:
                        self._turn += 1
                    if have == size:
                        self._use(used)
                        batch = _concat(parts)
                        parts, have, used = [], 0, []
                        yield -1, batch, b""
        except BaseException:
            # the rows not handed out are the next iteration's: their items' turns again
            self._turn -= sum(1 for _, state, _ in used if state is not None)
            raise
        self._use(used)  # the rows of a last short batch, or those dropped with drop_remainder
        if parts and not self.drop_remainder:
            yield -1, _concat(parts), b""

    def _use(self, used: list[tuple[int, bytes | None, int]]) -> None:
        for i, state, k in used:
            if state is not None:
                self._acked[i], self._rows[i] = state, 0
            else:
                self._rows[i] += k


def _spanned(batches: Iterator[Any]) -> Iterator[Any]:
    """``batches``, each wait for the next one in a ``stoker:next#stoker.ray`` span where a
    profiler records (PyTorch's, JAX's): the analyzer counts it as input, as the loaders'."""
    while True:
        with next_span("stoker.ray"):
            try:
                batch = next(batches)
            except StopIteration:
                return
        yield batch


def _length(item: Any) -> int:
    """Rows of a service item (its leaves' first dimension)."""
    _, fields = flatten(item)
    lengths = {len(v) for _, v in fields}
    if len(lengths) != 1:
        raise InvalidArgumentError(
            f"reader: batch_size re-batches the service's items by rows, and this item's fields have "
            f"{sorted(lengths)} rows: serve a pipeline that ends in batch()"
        )
    return lengths.pop()


def _rows(item: Any, start: int, stop: int | None) -> Any:
    template, fields = flatten(item)
    return pack(template, {name: v[start:stop] for name, v in fields})


def _concat(parts: list[Any]) -> Any:
    if len(parts) == 1:
        return parts[0]
    template, first = flatten(parts[0])
    columns = [flatten(p)[1] for p in parts]
    out = {}
    for k, (name, _) in enumerate(first):
        pieces = [np.asarray(c[k][1]) for c in columns]
        try:
            out[name] = np.concatenate(pieces)
        except ValueError as e:
            shapes = sorted({p.shape[1:] for p in pieces})
            raise InvalidArgumentError(
                f"reader: batch_size: field '{name}' has rows of shapes {shapes} in the service's items, "
                f"which cannot go in one batch ({e})"
            ) from None
    return pack(template, out)


def _nbytes(batch: Any) -> int:
    if isinstance(batch, dict):
        return sum(_nbytes(v) for v in batch.values())
    if isinstance(batch, (tuple, list)):
        return sum(_nbytes(v) for v in batch)
    return int(getattr(batch, "nbytes", 0))


class _FeedSource:
    """A reader where the framework adapters take a pipeline: ``iterator(state, epoch)`` as
    ``Dataset.iterator`` has, over iterations whose ``state()`` is the reader's, in bytes."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader

    def __len__(self) -> int:
        return len(self.reader)

    def explain(self) -> str:
        r = self.reader
        return (
            f"stoker.ray reader: rank {r.rank} of {r.world_size}, mode={r.mode!r}, "
            f"shards {r._shards()} of {r.service.num_workers} actors"
        )

    def start_state(self, epoch: int | None) -> bytes:
        state = self.reader.state_dict()
        if epoch is not None and not self.reader._started():
            state["epoch"] = epoch
        return json.dumps(state).encode()

    def iterator(self, state: bytes | None = None, epoch: int | None = None) -> _Iteration:
        if state is not None:
            self.reader.load_state_dict(json.loads(state))
        if epoch is not None and not (state is not None and self.reader._started()):
            self.reader.set_epoch(epoch)
        return _Iteration(self.reader)


class _Iteration:
    """One iteration of a reader, as the adapters drive a ``DatasetIterator``."""

    _span: str | None = None

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        # The adapter's own span covers the wait (and the copy to the device).
        self._batches = reader._iterate(span=False)

    def __iter__(self) -> _Iteration:
        return self

    def __next__(self) -> Any:
        return next(self._batches)

    def state(self) -> bytes:
        return json.dumps(self.reader.state_dict()).encode()

    def close(self) -> None:
        close = getattr(self._batches, "close", None)
        if close is not None:
            close()


def reader(
    service: Service,
    rank: int = 0,
    world_size: int = 1,
    mode: str = "shard",
    prefetch: int = 2,
    batch_size: int | None = None,
    drop_remainder: bool = False,
    batches_per_request: int = 2,
) -> Reader:
    """Trainer ``rank`` of ``world_size``'s batches from ``service`` (see the module's text for
    the modes and what happens when an actor dies). ``prefetch``: requests in flight per actor;
    ``batches_per_request``: the batches each asks for (the reader asks again once it has
    handed out those it received, so an actor runs at most ``prefetch * batches_per_request``
    batches ahead).

    ``batch_size``: the trainer makes its own batches of that many rows from the service's
    items (the pipeline's CPU-heavy part runs on the actors, up to a ``batch`` of any size that
    carries its rows; the reader cuts them into ``batch_size`` rows, taking the items in turn):
    one shorter batch at the epoch's end (none with ``drop_remainder``), not one per actor."""
    return Reader(service, rank, world_size, mode, prefetch, batch_size, drop_remainder, batches_per_request)
