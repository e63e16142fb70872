"""What the framework adapters share: an iteration over a pipeline for a training loop, with
an epoch length, epochs chosen by the loop, a resumable position, and an even share of the
batches for each rank of a data-parallel job."""

from __future__ import annotations

import socket
import warnings
from typing import TYPE_CHECKING, Any

from . import _stoker
from .dataset import Dataset, DatasetIterator, _state_bytes
from .errors import InvalidArgumentError

if TYPE_CHECKING:
    from .ray import Reader


def check_shard(rank: Any, world: Any, what: str = "shard") -> tuple[int, int]:
    """``(rank, world)`` checked: whole numbers, ``0 <= rank < world``."""
    if not (isinstance(rank, int) and isinstance(world, int)) or isinstance(rank, bool) or isinstance(world, bool):
        raise InvalidArgumentError(f"{what}: rank and world size must be whole numbers, got {rank!r}, {world!r}")
    if world < 1 or not 0 <= rank < world:
        raise InvalidArgumentError(f"{what}: rank {rank!r} is not in 0..world_size={world!r}")
    return rank, world


def shard_evenly(ds: Dataset, rank: int, world: int) -> Dataset:
    """Rank ``rank``'s share of ``ds`` (a shard ``by_rank``): the planner moves it towards the
    source, so that the rank makes only its own elements: positions ``rank, rank + world, ...``
    of the stream where it stops (of a ``global_shuffle``'s permutation, of a shuffle buffer's
    output), batched by each rank. Every rank gets as many elements, so as many batches: the
    last ``count % world`` elements there are dropped (a data-parallel step waits for every
    rank, so a rank with a batch more would wait forever), which needs a known count.
    ``explain()`` shows where the share is made and why it stops there."""
    if world == 1:
        return ds
    # The batch size stays; a rank's last batch may be other than the pipeline's.
    out = Dataset(ds._plan.shard(world, rank, True), ds._structure)._rows_of(ds, False)
    for message in out._plan.plan_warnings():
        warnings.warn(message, stacklevel=5)
    return out


class Feed:
    """A pipeline as the data of a training loop, for one rank of ``world``.

    ``len()`` is the number of batches per epoch when the pipeline knows its cardinality;
    ``set_epoch(n)`` makes the next iteration epoch ``n``; ``state_dict()`` is the position
    after the last batch handed out, and ``load_state_dict()`` makes the next iteration go on
    from one. Subclasses turn the NumPy batches of :meth:`_start`'s iterator into their
    framework's arrays and report each batch's position with :meth:`_handed_out`."""

    def __init__(self, dataset: Dataset | Reader, rank: int = 0, world: int = 1) -> None:
        self._epoch: int | None = None
        self._state: bytes | None = None
        self._last_state: bytes | None = None
        self._iterator: DatasetIterator | None = None
        self._dataset: Any = dataset
        source = getattr(dataset, "_feed_source", None)
        if source is not None:
            # Batches made elsewhere (a ``stoker.ray`` reader), already this rank's share.
            if world != 1:
                raise InvalidArgumentError(
                    "shard: a stoker.ray reader is already one trainer's share: give rank and world_size "
                    "to stoker.ray.reader, not to the loader"
                )
            self.rank, self.world_size = 0, 1
            self._sharded: Any = source()
            return
        if not isinstance(dataset, Dataset):
            raise InvalidArgumentError(
                f"dataset must be a stoker.Dataset or a stoker.ray reader, got {type(dataset).__name__}"
            )
        self.rank, self.world_size = check_shard(rank, world)
        if self.world_size > 1:
            local = self._local_ranks()
            if local is not None:
                _stoker.set_local_ranks(local, True)
        self._sharded = shard_evenly(dataset, self.rank, self.world_size)
        if self.world_size > 1:
            self._share_seeds()

    def _share_seeds(self) -> None:
        """Makes every rank take rank 0's drawn seeds for the steps given none (shuffles,
        random ops), so that the ranks split one order of the data between them. Without a
        way to send them (the framework's multi-process runtime not initialised), such steps
        are an error that names them."""
        plan = self._sharded._plan
        unseeded = plan.unseeded_steps()
        if not unseeded:
            return
        values = self._broadcast_seeds(plan.seed_values())
        if values is None:
            raise InvalidArgumentError(
                f"shard: rank {self.rank} of {self.world_size}: every rank must shuffle and augment alike, "
                f"but these steps have no seed, so each process would draw its own: {', '.join(unseeded)}. "
                f"Give each a seed (e.g. shuffle(n, seed=0)), or initialise {self._runtime} before making "
                "the loader, so that rank 0's seeds are sent to every rank"
            )
        plan.set_seed_values(values)

    #: The multi-process runtime that sends rank 0's seeds to the others, for messages.
    _runtime = "the framework's distributed runtime"

    def _broadcast_seeds(self, values: list[int]) -> list[int] | None:
        """Rank 0's ``values``, sent to every rank; ``None`` where no runtime can send them."""
        return None

    def _hosts(self) -> list[str] | None:
        """Every rank's host name, from the framework's runtime; ``None`` without one."""
        return None

    def _local_ranks(self) -> int | None:
        """The ranks of the job on this machine (they share its cores): from the runtime's
        host names; ``None`` where it cannot tell (``LOCAL_WORLD_SIZE`` then counts)."""
        if _stoker.local_ranks()[1] in ("set_local_ranks", "LOCAL_WORLD_SIZE"):
            return None  # said already: no need to ask every rank
        hosts = self._hosts()
        if hosts is None:
            return None
        return max(1, hosts.count(socket.gethostname()))

    def __len__(self) -> int:
        return len(self._sharded)

    def explain(self) -> str:
        """The plan this rank runs (see :meth:`stoker.Dataset.explain`): where its share is
        made and why there, and its thread budget."""
        return self._sharded.explain()

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration epoch ``epoch`` of the pipeline: its reshuffles and random
        ops draw from that epoch, whatever iterations came before (as with
        ``DistributedSampler.set_epoch``)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise InvalidArgumentError(f"epoch must be a whole number, at least 0, got {epoch!r}")
        self._epoch = epoch
        # A state saved from now until the epoch's first batch is that epoch's start.
        self._last_state = None

    def state_dict(self) -> dict[str, Any]:
        """Where the iteration stands after the last batch handed out (a restore goes on with
        the next one). After an epoch's last batch, the start of the next epoch; before any
        batch, the start of the epoch the next iteration would run (with the seeds it would
        draw)."""
        if self._last_state is not None:
            return {"stoker_iterator_state": self._last_state}
        if self._state is not None:
            return {"stoker_iterator_state": self._state}
        if isinstance(self._sharded, Dataset):
            return {"stoker_iterator_state": bytes(self._sharded._plan.start_state(self._epoch))}
        return {"stoker_iterator_state": self._sharded.start_state(self._epoch)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """The next iteration goes on from ``state_dict``."""
        self._state = _state_bytes(state_dict)
        self._last_state = None

    def _start(self) -> DatasetIterator:
        """The next iteration: from a loaded state (a state at an epoch's start starts the
        epoch set, when one is), else at the epoch set, else the next one."""
        if self._iterator is not None:
            self._iterator.close()
        state, self._state = self._state, None
        self._iterator = it = self._sharded.iterator(state=state, epoch=self._epoch)
        self._epoch = None
        # Until its first batch, a state saved is where it starts.
        self._last_state = it.state()
        return it

    def _handed_out(self, state: bytes) -> None:
        """Records the position after a batch handed out."""
        self._last_state = state

    def _finished(self, it: DatasetIterator) -> None:
        """Records that `it` handed out its epoch's last batch: a state saved now starts the
        next epoch. Then lets go of it."""
        self._last_state = it.state()
        self._release(it)

    def _release(self, it: DatasetIterator) -> None:
        """Lets go of an iteration (its threads and buffers)."""
        it.close()
        if self._iterator is it:
            self._iterator = None

    def close(self) -> None:
        """Stops the pipeline's threads."""
        if self._iterator is not None:
            self._release(self._iterator)
