"""Feeding JAX: a stoker pipeline as an iterator of ``jax.Array`` s placed on the devices.

    it = stoker.jax.iterator(ds)          # each batch split over the devices (data parallel)
    for epoch in range(epochs):
        it.set_epoch(epoch)
        for batch in it:                  # the dataset's structure, of jax.Arrays
            state = train_step(state, batch)
        checkpoint(..., data=it.state_dict())

Each array of a batch is built with ``jax.make_array_from_process_local_data`` from this
process's NumPy batch, with ``sharding``: by default its first dimension is split over every
device (``NamedSharding(Mesh(jax.devices(), ("data",)), PartitionSpec("data"))``), so the
batch size must be a multiple of the number of local devices (checked when the iterator is
made, where the pipeline tells the batches' rows: a ``batch(n, drop_remainder=True)``, or a
``batch(n)`` of an input of known cardinality and its last batch). Pass any other sharding (e.g.
replicated: ``PartitionSpec()``) to place every array so. Arrays without dimensions are
replicated; strings (object arrays) stay NumPy arrays.

``prefetch`` batches are placed ahead of the one handed out: JAX copies them to the devices
while the step runs.

With several processes (``jax.process_count() > 1``), process ``i`` of ``n`` gets its share of
every epoch, which only it makes, the same number of batches for each (as
:func:`stoker.torch.loader`'s ``shard="auto"``; steps given no seed use process 0's drawn
seeds, sent to the others with ``multihost_utils.broadcast_one_to_all``; the processes on one
host share its cores). ``shard=(index, count)`` sets the share instead.

``len()``, ``set_epoch()``, ``state_dict()`` and ``load_state_dict()`` work as for
:func:`stoker.torch.loader`.
"""

from __future__ import annotations

import collections
import socket
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ._check import whole
from ._feed import Feed, check_shard
from ._profile import next_span
from .dataset import Dataset, DatasetIterator
from .errors import InvalidArgumentError

try:
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("stoker.jax needs JAX: pip install jax") from e

__all__ = ["BatchIterator", "data_parallel", "iterator"]

if TYPE_CHECKING:
    from .ray import Reader


def data_parallel() -> NamedSharding:
    """The default sharding: the first dimension split over every device."""
    return NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))


class BatchIterator(Feed):
    """A stoker pipeline as an iterable of batches of ``jax.Array`` s; see :func:`iterator`."""

    def __init__(
        self,
        dataset: Dataset | Reader,
        sharding: jax.sharding.Sharding | None = None,
        prefetch: int = 2,
        shard: tuple[int, int] | None = None,
    ) -> None:
        prefetch = whole("iterator: prefetch", prefetch, 0)
        if sharding is not None and not isinstance(sharding, jax.sharding.Sharding):
            raise InvalidArgumentError(f"sharding must be a jax.sharding.Sharding, got {type(sharding).__name__}")
        self.sharding = data_parallel() if sharding is None else sharding
        self.prefetch = prefetch
        if shard is None:
            rank, world = jax.process_index(), jax.process_count()
        elif isinstance(shard, tuple) and len(shard) == 2:
            rank, world = shard
        else:
            raise InvalidArgumentError(f"shard must be None or (index, count), got {shard!r}")
        super().__init__(dataset, *check_shard(rank, world))
        self._check_rows(self._sharded)

    def _check_rows(self, ds: Any) -> None:
        """Refuses, before the first batch, batches the sharding cannot split: where the
        pipeline tells their rows (a batch's size with ``drop_remainder``, or with the
        cardinality of its input, the last batch's), rather than at the batch that fails."""
        pieces = _pieces(self.sharding)
        if pieces <= 1 or not isinstance(ds, Dataset):
            return
        sizes: dict[int, str] = {}
        if ds._rows is not None:
            full, last = ds._rows
            sizes[full] = "the batches have"
            if last:
                sizes.setdefault(last, "the last batch of each pass has")
        for name, dtype, shape in ds._plan.schema() or []:
            if shape and shape[0] is not None and dtype != "string":  # strings stay NumPy arrays
                sizes.setdefault(shape[0], f"field '{name}' has")
        for rows, what in sizes.items():
            if rows % pieces:
                raise InvalidArgumentError(
                    f"iterator: {what} {rows} rows, which the sharding {self.sharding} cannot split evenly: "
                    f"the batch size must be a multiple of the number of local devices it splits the first "
                    f"dimension over ({pieces}): use batch(n, drop_remainder=True) with such an n"
                )

    def __iter__(self) -> Iterator[Any]:
        return self._place(self._start())

    def _place(self, it: DatasetIterator) -> Iterator[Any]:
        # The wait the loop sees is for the next batch and its placement on the devices: both
        # in the span, as the input time a profile shows.
        it._span = None
        ahead: collections.deque[tuple[Any, bytes]] = collections.deque()
        exhausted = False
        try:
            while True:
                with next_span("jax.iterator"):
                    while not exhausted and len(ahead) <= self.prefetch:
                        try:
                            batch = next(it)
                        except StopIteration:
                            exhausted = True
                            break
                        ahead.append((jax.tree_util.tree_map(self._array, batch), it.state()))
                    if not ahead:
                        break
                    out, state = ahead.popleft()
                self._handed_out(state)
                yield out
            self._finished(it)
        finally:
            self._release(it)

    def _array(self, a: Any) -> Any:
        if not isinstance(a, np.ndarray) or a.dtype == object:
            return a
        if a.ndim == 0:
            return jax.device_put(a, self._replicated())
        try:
            return jax.make_array_from_process_local_data(self.sharding, a)
        except ValueError as e:
            raise InvalidArgumentError(
                f"a batch of shape {a.shape} cannot be placed with sharding {self.sharding}: {e} "
                "(with the default sharding the batch size must be a multiple of the number of "
                "local devices: batch(..., drop_remainder=True) with such a size)"
            ) from e

    _runtime = "JAX's multi-process runtime (jax.distributed.initialize)"

    def _broadcast_seeds(self, values: list[int]) -> list[int] | None:
        if jax.process_count() == 1:
            return None
        from jax.experimental import multihost_utils

        # Two 32-bit halves each: without jax_enable_x64 a 64-bit integer would be cut.
        halves = np.array([[v >> 32, v & 0xFFFFFFFF] for v in values], dtype=np.uint32).reshape(-1, 2)
        sent = np.asarray(multihost_utils.broadcast_one_to_all(halves))
        return [(int(hi) << 32) | int(lo) for hi, lo in sent]

    def _hosts(self) -> list[str] | None:
        if jax.process_count() == 1 or jax.process_count() != self.world_size:
            return None
        from jax.experimental import multihost_utils

        # A host is told by a 32-bit hash of its name (what can be gathered as an array).
        name = zlib.crc32(socket.gethostname().encode())
        gathered = np.asarray(multihost_utils.process_allgather(np.array([name], dtype=np.uint32)))
        here = socket.gethostname()
        return [here if int(h) == name else f"host-{int(h)}" for h in gathered.reshape(-1)]

    def _replicated(self) -> jax.sharding.Sharding:
        mesh = getattr(self.sharding, "mesh", None)
        if isinstance(mesh, Mesh):
            return NamedSharding(mesh, PartitionSpec())
        return jax.sharding.SingleDeviceSharding(jax.local_devices()[0])


def _pieces(sharding: jax.sharding.Sharding) -> int:
    """How many pieces a ``NamedSharding`` cuts this process's first dimension into (1 when
    not cut, or for other shardings, which are not checked ahead)."""
    if not isinstance(sharding, NamedSharding) or len(sharding.spec) == 0 or sharding.spec[0] is None:
        return 1
    first = sharding.spec[0]
    axes = first if isinstance(first, tuple) else (first,)
    pieces = int(np.prod([sharding.mesh.shape[a] for a in axes]))
    processes = jax.process_count()
    return pieces // processes if pieces % processes == 0 else pieces


def iterator(
    dataset: Dataset | Reader,
    sharding: jax.sharding.Sharding | None = None,
    prefetch: int = 2,
    shard: tuple[int, int] | None = None,
) -> BatchIterator:
    """``dataset`` as an iterable of batches of ``jax.Array`` s placed with ``sharding``
    (default: split over every device along the first dimension), ``prefetch`` batches
    ahead. See the module's documentation."""
    return BatchIterator(dataset, sharding, prefetch, shard)
