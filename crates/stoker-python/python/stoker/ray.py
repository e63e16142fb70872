"""Preprocessing on a Ray cluster, streamed to the trainers, exactly once.

``serve(pipeline, num_workers=k)`` starts ``k`` Ray actors; actor ``i`` runs the pipeline's shard
``i`` of ``k`` (``Dataset.shard``, which the planner moves towards the source, so that each
actor reads and decodes only its share). Trainers consume the service with
``reader(service, rank, world_size)``:

- ``mode="shard"`` (the default): trainer ``rank`` takes the actors ``i`` with
  ``i % world_size == rank``, in turn, one batch from each: across the trainers every element
  of an epoch comes exactly once (tf.data service's ``distributed_epoch``);
- ``mode="epoch"``: every trainer takes every actor's elements: a whole epoch each.

Batches move as NumPy arrays through Ray's object store (zero-copy on the same node). A reader
keeps at most ``prefetch`` requests in flight per actor, so an actor runs at most that far
ahead of its trainer: memory is bounded and nothing is spilled in steady state.

Exactly once under failure: each batch comes with the actor's iterator state after it
(stoker's exact, small state). The reader keeps, per actor, the state after the last batch it
handed to the trainer. When an actor dies (killed, its node lost), the reader starts a new one
for that shard at that state: it hands out the next batch the dead one would have, so nothing is
lost or repeated, in the same order. ``state_dict()`` holds those states, and a reader made with
``load_state_dict`` (a restarted trainer) goes on from them. Bad records skipped under
``ignore_errors()`` are counted once: what a dead actor skipped after the last batch handed out
is counted again by its successor only.

Nothing of Ray is imported until a service starts (``pip install 'stoker[ray]'``).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Union

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
        if isinstance(build, str):  # a spec document
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                f.write(build)
            try:
                ds = Dataset.load_spec(f.name)
            finally:
                os.unlink(f.name)
        else:
            ds = build()
        self.ds = ds.shard(num_shards, shard) if num_shards > 1 else ds
        self.its: dict[str, Any] = {}
        # Per reader: the bad records skipped before its iterator started.
        self.skipped_before: dict[str, int] = {}

    def cardinality(self) -> int:
        return self.ds.cardinality()

    def _skipped(self) -> int:
        return sum(int(s.get("skipped", 0)) for s in self.ds.stats())

    def start(self, key: str, epoch: int, state: bytes | None) -> None:
        self.its[key] = self.ds.iterator(state=state, epoch=None if state else epoch)
        self.skipped_before[key] = self._skipped()

    def take(self, key: str, n: int) -> tuple[list[tuple[Any, bytes, int]], bool]:
        """Up to ``n`` batches, each with the state after it and the bad records skipped since
        the reader's iterator started; and whether the shard ended."""
        it, before = self.its[key], self.skipped_before[key]
        out: list[tuple[Any, bytes, int]] = []
        for _ in range(n):
            try:
                batch = next(it)
            except StopIteration:
                return out, True
            out.append((batch, it.state(), self._skipped() - before))
        return out, False

    def stats(self) -> list[dict[str, Any]]:
        return list(self.ds.stats())


class Service:
    """The actors running a pipeline's shards (see :func:`serve`)."""

    def __init__(self, pipeline: Pipeline, num_workers: int, num_cpus: float) -> None:
        if isinstance(pipeline, Dataset):
            self._build: Any = json.dumps(pipeline.spec())
        elif callable(pipeline):
            self._build = pipeline
        else:
            raise InvalidArgumentError(
                f"serve: pipeline must be a stoker.Dataset or a function that makes one, got {type(pipeline).__name__}"
            )
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise InvalidArgumentError(f"serve: num_workers must be a whole number, at least 1, got {num_workers!r}")
        self.num_workers = num_workers
        self._ray = _ray()
        self._cls = self._ray.remote(num_cpus=num_cpus, max_restarts=0)(_Worker)
        self._actors = [self._new(i) for i in range(num_workers)]
        self.restarts = 0

    def _new(self, shard: int) -> Any:
        return self._cls.remote(self._build, shard, self.num_workers)

    def actor(self, shard: int) -> Any:
        return self._actors[shard]

    def replace(self, shard: int, dead: Any) -> Any:
        """A new actor for ``shard`` in place of ``dead`` (another reader may have replaced it
        already)."""
        if self._actors[shard] is dead:
            self._actors[shard] = self._new(shard)
            self.restarts += 1
        return self._actors[shard]

    def stats(self) -> list[dict[str, Any]]:
        """Per actor: its shard, and its pipeline's stages' counters (``Dataset.stats()``)."""
        refs = [a.stats.remote() for a in self._actors]
        return [{"shard": i, "stages": s} for i, s in enumerate(self._ray.get(refs))]

    def shutdown(self) -> None:
        for a in self._actors:
            self._ray.kill(a)
        self._actors = []


def serve(pipeline: Pipeline, num_workers: int = 2, num_cpus: float = 1) -> Service:
    """Starts ``num_workers`` Ray actors (``num_cpus`` each), actor ``i`` running shard ``i`` of
    ``pipeline``: a :class:`stoker.Dataset` made of native steps (sent as its spec), or a
    function that makes one (sent with Ray's pickling; for pipelines with Python functions)."""
    return Service(pipeline, num_workers, num_cpus)


class Reader:
    """A trainer's view of a service (see :func:`reader`): iterate it for one epoch's batches;
    ``set_epoch``, ``state_dict`` / ``load_state_dict`` and ``len`` as a data loader has."""

    def __init__(self, service: Service, rank: int, world_size: int, mode: str, prefetch: int) -> None:
        if mode not in _MODES:
            raise InvalidArgumentError(f"reader: mode must be one of {_MODES}, got {mode!r}")
        if not 0 <= rank < world_size:
            raise InvalidArgumentError(f"reader: rank must be in 0..world_size={world_size}, got {rank}")
        shards = list(range(service.num_workers))
        if mode == "shard":
            if service.num_workers < world_size:
                raise InvalidArgumentError(
                    f"reader: mode='shard' needs at least one worker per trainer: {service.num_workers} workers "
                    f"for world_size={world_size}"
                )
            shards = [i for i in shards if i % world_size == rank]
        self.service, self.shards, self.prefetch = service, shards, max(1, prefetch)
        self.key = f"{mode}:{rank}"
        self.epoch = 0
        self._fresh()
        self._restored = False

    def _fresh(self) -> None:
        # Per shard: the state after the last batch handed out (None: the epoch's start), the
        # bad records skipped up to it, and those counted by actors that died before.
        self._acked: dict[int, bytes | None] = {i: None for i in self.shards}
        self._skipped: dict[int, int] = {i: 0 for i in self.shards}
        self._base: dict[int, int] = {i: 0 for i in self.shards}
        self._ended: set[int] = set()
        self._turn = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        ray = self.service._ray
        counts = ray.get([self.service.actor(i).cardinality.remote() for i in self.shards])
        if any(c < 0 for c in counts):
            raise TypeError("the pipeline's length is not known before it runs (cardinality() < 0)")
        return int(sum(counts))

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "turn": self._turn,
            "acked": {str(i): (s.hex() if s is not None else None) for i, s in self._acked.items()},
            "skipped": {str(i): n for i, n in self._skipped.items()},
            "ended": sorted(self._ended),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self._turn = int(state["turn"])
        self._acked = {int(i): (bytes.fromhex(s) if s is not None else None) for i, s in state["acked"].items()}
        self._skipped = {int(i): int(n) for i, n in state["skipped"].items()}
        self._base = dict(self._skipped)
        self._ended = {int(i) for i in state["ended"]}
        self._restored = True

    def skipped(self) -> int:
        """Bad records skipped under ``ignore_errors()`` in this reader's shards, each once."""
        return sum(self._skipped.values())

    def __iter__(self) -> Iterator[Any]:
        ray = self.service._ray
        if not self._restored:
            self._fresh()
        self._restored = False
        actors = {i: self.service.actor(i) for i in self.shards}
        pending: dict[int, deque[Any]] = {i: deque() for i in self.shards}
        # Batches received and not yet handed out, per shard; the shards whose actor said
        # they ended.
        ready: dict[int, deque[tuple[Any, bytes, int]]] = {i: deque() for i in self.shards}
        ending: set[int] = set()
        ray.get([actors[i].start.remote(self.key, self.epoch, self._acked[i]) for i in self.shards])
        while len(self._ended) < len(self.shards):
            order = [s for s in self.shards if s not in self._ended]
            i = order[self._turn % len(order)]
            while not ready[i] and i not in ending:
                while len(pending[i]) < self.prefetch:
                    pending[i].append(actors[i].take.remote(self.key, 1))
                try:
                    got, ended = ray.get(pending[i].popleft())
                except ray.exceptions.RayActorError:
                    # Lost with the actor: what it made after the last batch handed out. A new
                    # actor goes on from there; what it skips from there on is counted anew.
                    actors[i] = self.service.replace(i, actors[i])
                    pending[i].clear()
                    ready[i].clear()
                    self._base[i] = self._skipped[i]
                    ray.get(actors[i].start.remote(self.key, self.epoch, self._acked[i]))
                    continue
                ready[i].extend(got)
                if ended:
                    ending.add(i)
            if ready[i]:
                batch, state, skipped = ready[i].popleft()
                self._acked[i] = state
                self._skipped[i] = self._base[i] + skipped
                self._turn += 1
                yield batch
            else:
                self._ended.add(i)
                pending[i].clear()


def reader(service: Service, rank: int = 0, world_size: int = 1, mode: str = "shard", prefetch: int = 2) -> Reader:
    """Trainer ``rank`` of ``world_size``'s batches from ``service`` (see the module's text for
    the modes and what happens when an actor dies). ``prefetch``: requests in flight per actor."""
    return Reader(service, rank, world_size, mode, prefetch)
