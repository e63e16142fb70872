"""Feeding PyTorch: a stoker pipeline as the loader of a training loop.

    loader = stoker.torch.loader(ds, device="cuda")
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:          # the dataset's structure, of torch.Tensors on the device
            ...
        torch.save({"data": loader.state_dict(), ...}, path)

On the CPU (``device=None`` or ``"cpu"``) the tensors share the engine's memory: no copy. A
batch array that is read-only (a memory cache hands out the same arrays every epoch) is copied,
so that a training step writing into its input cannot change the cache.

On a CUDA device (or with ``pin_memory=True``), the engine writes its batches into page-locked
("pinned") host memory that it allocates with the CUDA runtime PyTorch loaded and pools, so a
batch goes to the device from where the engine wrote it, with no copy from pageable into
pinned memory; from then on, in this process, every batch the engine makes is in pinned
memory. A thread copies each batch to the device on a side CUDA stream, ``prefetch`` batches
ahead of the step, and keeps the batch's host memory until that copy is done. Arrays that do
not come from the engine's batches (a Python function's output, a memory cache's read-only
arrays) go through a small pool of pinned staging buffers instead. The consumer's
stream waits on the copy's event, and each tensor is marked as used by that stream
(``record_stream``), so PyTorch's caching allocator never hands its memory to another tensor
while the step may still read it. Strings (object arrays) stay NumPy arrays.

``len(loader)`` is the number of batches when the pipeline knows its cardinality (see
:meth:`stoker.Dataset.cardinality`). ``state_dict()`` / ``load_state_dict()`` save and restore
the position of the last batch handed out (a few hundred bytes, see
:class:`stoker.DatasetIterator`), so code written for torchdata's ``StatefulDataLoader``
(torchtune, Lightning) resumes exactly.

Distributed data parallel: ``shard="auto"`` reads the rank and world size from
``torch.distributed`` (when initialised) or from ``RANK`` / ``WORLD_SIZE``, and gives rank
``r`` its share of every epoch, which only it makes: the planner moves the share towards the
source (positions ``r, r + n, ...`` of a ``global_shuffle``'s permutation, as
``DistributedSampler``; of a shuffle buffer's output otherwise), each rank batches its share,
and every rank gets as many batches (the last ``count % world_size`` elements are left out,
which needs a known count). Random ops give an element the same result whatever the world
size. Steps given no seed (``shuffle(n)``, ``random_flip(...)``) use rank 0's drawn seeds,
which the loader sends to every rank through ``torch.distributed`` when it is initialised;
without it (a ``shard`` tuple, or ``RANK`` / ``WORLD_SIZE`` alone) such steps are an
``InvalidArgumentError`` naming them. The ranks on one machine share its cores: each rank's
thread budget is its share (see the README's "Many GPUs"). ``explain()`` shows the rank's plan.

``state_dict()`` after an epoch's last batch is the start of the next epoch (it holds its
epoch: ``set_epoch`` with the next one, or not at all); before the first batch, the start of
the epoch to come.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import multiprocessing
import os
import queue
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _stoker
from ._check import whole
from ._device_images import DeviceImages, ShareTuner
from ._feed import Feed, check_shard
from ._profile import next_span
from ._structure import known_template, like, pack
from .dataset import Dataset, DatasetIterator
from .errors import InternalError, InvalidArgumentError

try:
    import torch
    import torch.utils.data
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("stoker.torch needs PyTorch: pip install torch") from e

__all__ = ["Loader", "IterableDataset", "loader", "to_torch"]

if TYPE_CHECKING:
    from .ray import Reader


def to_torch(element: Any) -> Any:
    """``element`` (a batch of NumPy arrays in the dataset's structure) as torch tensors that
    share its memory; read-only arrays are copied; strings stay NumPy arrays."""
    if isinstance(element, dict):
        return {k: to_torch(v) for k, v in element.items()}
    if isinstance(element, list):
        return [to_torch(v) for v in element]
    if isinstance(element, tuple):
        return like(element, [to_torch(v) for v in element])
    if isinstance(element, np.ndarray):
        if element.dtype == object:
            return element
        if not element.flags.writeable:
            return torch.from_numpy(element.copy())
        return torch.from_numpy(element)
    if isinstance(element, np.generic):
        return torch.from_numpy(np.asarray(element))
    return element


def _leaves(element: Any) -> list[Any]:
    if isinstance(element, dict):
        return [x for v in element.values() for x in _leaves(v)]
    if isinstance(element, (tuple, list)):
        return [x for v in element for x in _leaves(v)]
    return [element]


def _rebuild(element: Any, leaves: Iterator[Any]) -> Any:
    if isinstance(element, dict):
        return {k: _rebuild(v, leaves) for k, v in element.items()}
    if isinstance(element, list):
        return [_rebuild(v, leaves) for v in element]
    if isinstance(element, tuple):
        return like(element, [_rebuild(v, leaves) for v in element])
    return next(leaves)


_GLOO: dict[int, Any] = {}


def _cpu_group() -> Any:
    """A CPU (gloo) group of every rank, made once per default group (every loader of the
    process shares it): NCCL would send from the current CUDA device, which may not be set yet
    when a loader is made. ``None``: the default group, which is gloo already."""
    dist = torch.distributed
    if dist.get_backend() == "gloo":
        return None
    key = id(dist.distributed_c10d._get_default_group())
    if key not in _GLOO:
        made = dist.new_group(backend="gloo")
        _GLOO[key] = made if isinstance(made, dist.ProcessGroup) else None
    return _GLOO[key]


def _rank_and_world() -> tuple[int, int]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return check_shard(dist.get_rank(), dist.get_world_size())
    try:
        rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise InvalidArgumentError(
            f"shard='auto': RANK={os.environ.get('RANK')!r} and WORLD_SIZE={os.environ.get('WORLD_SIZE')!r} "
            "must be whole numbers"
        ) from None
    return check_shard(rank, world, "shard='auto' (RANK, WORLD_SIZE)")


_CUDA_HOST_FUNCTIONS = ("cudaSetDevice", "cudaHostAlloc", "cudaFreeHost")
_engine_pinned = False


def _cuda_runtime_functions() -> tuple[int, int, int] | None:
    """The addresses of ``cudaSetDevice``, ``cudaHostAlloc`` and ``cudaFreeHost`` in the CUDA
    runtime that PyTorch loaded (found in the process's mappings), else in the runtime of
    PyTorch's CUDA version; ``None`` if neither is found."""
    names = []
    try:
        with open("/proc/self/maps") as maps:
            names = sorted({line.split()[-1] for line in maps if "/libcudart.so" in line})
    except OSError:
        pass
    major = (torch.version.cuda or "").split(".")[0]
    if major:
        names.append(f"libcudart.so.{major}")
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            addresses = [ctypes.cast(getattr(lib, f), ctypes.c_void_p).value for f in _CUDA_HOST_FUNCTIONS]
        except (OSError, AttributeError):
            continue
        if all(addresses):
            return addresses[0], addresses[1], addresses[2]  # type: ignore[return-value]
    return None


def _pin_engine_batches(device: torch.device) -> bool:
    """Makes the engine write batches into pinned memory from now on (once per process);
    ``False`` if the CUDA runtime's functions were not found (batches then go through
    staging buffers)."""
    global _engine_pinned
    if not _engine_pinned:
        functions = _cuda_runtime_functions()
        if functions is None:
            return False
        index = device.index if device.type == "cuda" and device.index is not None else torch.cuda.current_device()
        _stoker.set_batch_host_memory(functions, index)
        _engine_pinned = True
    return True


class Loader(Feed):
    """A stoker pipeline as a PyTorch loader; see :func:`loader`."""

    def __init__(
        self,
        dataset: Dataset | Reader,
        device: str | torch.device | None = None,
        pin_memory: bool | None = None,
        prefetch: int = 2,
        non_blocking: bool = True,
        shard: str | tuple[int, int] | None = None,
        decode_on: str | torch.device | None = None,
        cpu_share: float | str = 0.0,
    ) -> None:
        prefetch = whole("loader: prefetch", prefetch, 1)
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        if self.device.type not in ("cpu", "cuda"):
            raise InvalidArgumentError(f"device must be 'cpu' or a CUDA device, got {device!r}")
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise InvalidArgumentError(f"device {device!r}: CUDA is not available")
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.pin_memory = self.device.type == "cuda" if pin_memory is None else bool(pin_memory)
        if self.pin_memory and not torch.cuda.is_available():
            raise InvalidArgumentError("pin_memory=True needs CUDA")
        self.prefetch = prefetch
        self.non_blocking = non_blocking
        self._images: DeviceImages | None = None
        self._tuner: ShareTuner | None = None
        self._template: Any = None
        if decode_on is not None:
            if not isinstance(dataset, Dataset):
                raise InvalidArgumentError("decode_on: a stoker.ray reader's batches are decoded by the service")
            dataset = self._images_on(dataset, decode_on, cpu_share)
        super().__init__(dataset, *self._shard_of(shard))
        if self.pin_memory:
            _pin_engine_batches(self.device)
        # Bytes that went through a staging buffer (arrays not in pinned memory): a check.
        self._staged_bytes = 0

    _runtime = "torch.distributed (init_process_group)"

    def _images_on(self, dataset: Dataset, decode_on: str | torch.device, cpu_share: float | str) -> Dataset:
        """``dataset`` with its image chains' pixels left to ``decode_on`` (see
        ``stoker._device_images``)."""
        try:
            where = torch.device(decode_on)
        except (RuntimeError, TypeError) as e:
            raise InvalidArgumentError(f"decode_on must be 'cpu' or a CUDA device, got {decode_on!r}") from e
        if where.type == "cuda":
            if where.index is None:
                where = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
            if where != self.device:
                raise InvalidArgumentError(
                    f"decode_on={decode_on!r}: decode on the loader's device ({self.device}) or on 'cpu'"
                )
        elif where.type != "cpu":
            raise InvalidArgumentError(f"decode_on must be 'cpu' or a CUDA device, got {decode_on!r}")
        auto = cpu_share == "auto"
        if auto:
            cpu_share = 0.0
        elif isinstance(cpu_share, bool) or not isinstance(cpu_share, (int, float)) or not 0 <= cpu_share <= 1:
            raise InvalidArgumentError(f"cpu_share must be a number in [0, 1] or 'auto', got {cpu_share!r}")
        self._cpu_share = float(cpu_share)
        self._template = known_template(dataset._structure)
        if self._template is None:
            raise InvalidArgumentError("decode_on: the dataset's structure is not known before it runs")
        plan, specs = dataset._plan.device_images(float(cpu_share), auto)
        schema = plan.schema()
        if schema is None:
            raise InvalidArgumentError("decode_on: the dataset's fields are not known before it runs")
        self._images = DeviceImages(specs, where)
        self._tuner = ShareTuner() if auto else None
        return Dataset(plan, {n: n for n, _, _ in schema})._rows_of(dataset)

    @property
    def cpu_share(self) -> float | None:
        """The share of the JPEGs the engine decodes (``decode_on``; with
        ``cpu_share="auto"``, the tuner's current one); ``None`` without ``decode_on``."""
        if self._images is None:
            return None
        return self._tuner.share if self._tuner is not None else self._cpu_share

    def _finish_images(self, batch: Any) -> Any:
        """The batch with its images made (``decode_on``), in the dataset's own structure."""
        if self._images is None:
            return batch
        return pack(self._template, self._images(dict(batch)))

    def _broadcast_seeds(self, values: list[int]) -> list[int] | None:
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()):
            return None
        if dist.get_world_size() != self.world_size:
            raise InvalidArgumentError(
                f"shard: world size {self.world_size} differs from torch.distributed's {dist.get_world_size()}"
            )
        sent = [list(values)]
        dist.broadcast_object_list(sent, src=0, group=self._cpu_group())
        return [int(v) for v in sent[0]]

    def _cpu_group(self) -> Any:
        return _cpu_group()

    def _hosts(self) -> list[str] | None:
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() != self.world_size:
            return None
        hosts: list[Any] = [None] * self.world_size
        dist.all_gather_object(hosts, socket.gethostname(), group=self._cpu_group())
        return [str(h) for h in hosts]

    @staticmethod
    def _shard_of(shard: str | tuple[int, int] | None) -> tuple[int, int]:
        if shard is None:
            return 0, 1
        if shard == "auto":
            return _rank_and_world()
        if isinstance(shard, tuple) and len(shard) == 2:
            return check_shard(*shard)
        raise InvalidArgumentError(f"shard must be None, 'auto' or (rank, world_size), got {shard!r}")

    def __iter__(self) -> Iterator[Any]:
        it = self._start()
        if self.device.type == "cpu" and not self.pin_memory:
            return self._cpu(it)
        return self._to_device(it)

    def _cpu(self, it: DatasetIterator) -> Iterator[Any]:
        it._span = None
        while True:
            try:
                with next_span("torch.Loader"):
                    out = to_torch(self._finish_images(next(it)))
            except StopIteration:
                self._finished(it)
                return
            self._handed_out(it.state())
            yield out
            # Not kept while the next batch is made: its buffer can then go back to the
            # engine's pool as soon as the loop lets go of it.
            del out

    def _to_device(self, it: DatasetIterator) -> Iterator[Any]:
        # The feeder's thread pulls the batches: the loop's wait is for the feeder.
        it._span = None
        feeder = _DeviceFeeder(
            it,
            self.device,
            self.pin_memory,
            self.prefetch,
            self.non_blocking,
            self._finish_images,
            self._tuner.update if self._tuner is not None else None,
        )
        try:
            while True:
                with next_span("torch.Loader"):
                    item = feeder.get()
                if item is None:
                    self._finished(it)
                    return
                batch, state = item
                self._handed_out(state)
                yield batch
        finally:
            feeder.close()
            self._staged_bytes += feeder.staged_bytes


class _DeviceFeeder:
    """Copies batches to the device on a side CUDA stream, ``prefetch`` ahead: an array in
    pinned memory (the engine's batches) straight from there, kept until the copy is done;
    another through a pinned staging buffer, reused once the copy out of it is done."""

    _END = object()

    def __init__(
        self,
        it: DatasetIterator,
        device: torch.device,
        pin: bool,
        prefetch: int,
        non_blocking: bool,
        transform: Callable[[Any], Any] | None = None,
        tune: Callable[[float, float, bool], None] | None = None,
    ) -> None:
        self.it = it
        # Run on the host batch first, on the side stream (device decoding).
        self.transform = transform
        # Told, per batch, how long the engine was waited for, how long the batch's device
        # work took, and whether the batches ready were waiting for the consumer.
        self.tune = tune
        self.device = device
        self.pin = pin
        self.non_blocking = non_blocking
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device=device) if self.cuda else None
        self.ready: queue.Queue[Any] = queue.Queue(maxsize=prefetch)
        # Pinned buffers by (dtype, number of elements), each with the event after which the
        # copy out of it is done.
        self.pool: dict[tuple[torch.dtype, int], list[tuple[torch.Tensor, Any]]] = {}
        # Pinned host tensors being copied out of, with the event after which that is done.
        self.in_flight: deque[tuple[Any, list[torch.Tensor]]] = deque()
        self.staged_bytes = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="stoker-torch-feeder", daemon=True)
        self.thread.start()

    def _pinned(self, t: torch.Tensor) -> torch.Tensor:
        key = (t.dtype, t.numel())
        free = self.pool.setdefault(key, [])
        for i, (buf, done) in enumerate(free):
            if done is None or done.query():
                free.pop(i)
                return buf
        return torch.empty(t.numel(), dtype=t.dtype, pin_memory=True)

    def _move(self, batch: Any) -> tuple[Any, Any]:
        while self.in_flight and self.in_flight[0][0].query():
            self.in_flight.popleft()
        if self.transform is not None:
            batch = self.transform(batch)
        leaves = _leaves(to_torch(batch))
        used: list[tuple[torch.Tensor, tuple[torch.dtype, int]]] = []
        held: list[torch.Tensor] = []
        out = []
        for t in leaves:
            if not isinstance(t, torch.Tensor) or (t.is_cuda and t.device == self.device):
                out.append(t)
                continue
            src = t
            if self.pin and t.is_pinned():
                held.append(t)
            elif self.pin:
                buf = self._pinned(t)
                src = buf[: t.numel()].view(t.shape)
                src.copy_(t)
                used.append((buf, (t.dtype, t.numel())))
                self.staged_bytes += t.numel() * t.element_size()
            out.append(src.to(self.device, non_blocking=self.non_blocking) if self.cuda else src)
        event = None
        if self.cuda:
            event = torch.cuda.Event()
            event.record(self.stream)
            if held:
                self.in_flight.append((event, held))
        for buf, key in used:
            self.pool.setdefault(key, []).append((buf, event))
        return _rebuild(batch, iter(out)), event

    def _run(self) -> None:
        try:
            stream_ctx = torch.cuda.stream(self.stream) if self.cuda else contextlib.nullcontext()
            with stream_ctx:
                while True:
                    started = time.perf_counter()
                    try:
                        batch = next(self.it)
                    except StopIteration:
                        break
                    if self.stop.is_set():
                        return
                    got = time.perf_counter()
                    state = self.it.state()
                    moved, event = self._move(batch)
                    if self.tune is not None:
                        if event is not None:
                            event.synchronize()
                        self.tune(got - started, time.perf_counter() - got, self.ready.full())
                    self._put((moved, event, state))
            self._put(self._END)
        except BaseException as e:  # handed to the consumer, raised there
            self._put(e)

    def _put(self, item: Any) -> None:
        while not self.stop.is_set():
            try:
                self.ready.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def get(self) -> tuple[Any, bytes] | None:
        while True:
            try:
                item = self.ready.get(timeout=0.1)
                break
            except queue.Empty:
                if not self.thread.is_alive() and self.ready.empty():
                    raise InternalError("stoker.torch: the feeder thread ended without a result") from None
        if item is self._END:
            return None
        if isinstance(item, BaseException):
            raise item
        batch, event, state = item
        if self.cuda:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(event)
            for t in _leaves(batch):
                if isinstance(t, torch.Tensor) and t.is_cuda:
                    t.record_stream(current)
        return batch, state

    def close(self) -> None:
        self.stop.set()
        # The thread stops after the batch it is making; the iterator cannot be closed under
        # its `next()`.
        self.thread.join()
        self.it.close()
        # The engine reuses a batch's memory once it is let go: not before its copy is done.
        while self.in_flight:
            self.in_flight.popleft()[0].synchronize()


def loader(
    dataset: Dataset | Reader,
    device: str | torch.device | None = None,
    pin_memory: bool | None = None,
    prefetch: int = 2,
    non_blocking: bool = True,
    shard: str | tuple[int, int] | None = None,
    decode_on: str | torch.device | None = None,
    cpu_share: float | str = 0.0,
) -> Loader:
    """``dataset`` as a loader for a PyTorch training loop: iterating it yields the dataset's
    structure (dict / tuple / single) of ``torch.Tensor`` s on ``device``. See the module's
    documentation for the CPU and CUDA paths, ``len``, ``set_epoch``, ``state_dict`` and
    ``shard``.

    ``decode_on="cuda"`` (the loader's CUDA device) decodes the JPEGs of an image chain
    (``decode_image`` → ``random_resized_crop`` → flips, ``convert_image_dtype``,
    brightness/contrast ``color_jitter``, ``normalize`` → ``layout``) on the GPU with nvJPEG,
    and crops, resizes, flips and normalises there; the engine still reads, shuffles, shards
    and draws every random decision, from the same seeds, so an element's box and flip and the
    loader's state do not depend on where it is decoded. ``cpu_share`` (0 to 1) of the JPEGs
    are decoded by the engine instead (mixed mode, as DALI's ``hw_decoder_load``), and so is
    any other format; ``cpu_share="auto"`` moves that share after each batch towards where the
    engine and the GPU take as long per batch (``loader.cpu_share`` is the current one).
    ``decode_on="cpu"`` runs the same device half with torchvision's CPU decoder. An
    ``InvalidArgumentError`` says why a pipeline has no such chain."""
    return Loader(dataset, device, pin_memory, prefetch, non_blocking, shard, decode_on, cpu_share)


class IterableDataset(torch.utils.data.IterableDataset, Feed):  # type: ignore[misc, type-arg]
    """For code that keeps a ``torch.utils.data.DataLoader``: use it with ``batch_size=None``
    (stoker batches; another ``batch_size`` would stack several of its batches into one, so it
    is an error) and ``num_workers=0`` (stoker has its own threads) or 1 (the pipeline then
    runs in the worker process; more workers would each run the whole pipeline, an error).
    This is the slower path: the DataLoader adds its own collation and pinning on the
    training thread; :func:`loader` is the fast one.

    ``len``, ``set_epoch``, ``state_dict`` and ``load_state_dict`` work as for :func:`loader`.
    Each iteration is the pipeline's next epoch, also in a worker process: the epoch count is
    kept in memory shared with the worker, so ``set_epoch`` reaches a persistent worker too
    (with a worker, the passes are epochs 0, 1, 2, ... in the order they run, unless
    ``set_epoch`` says otherwise). With a worker, the position is in the worker's process:
    ``state_dict()`` in the main process is then an error (torchdata's ``StatefulDataLoader``
    asks the worker for it). A worker started with ``spawn`` or ``forkserver`` gets the
    pipeline as its spec (see ``Dataset.spec``; in-memory arrays go in it): one with Python
    functions has none and cannot be sent, an error that says so (use ``num_workers=0``)."""

    def __init__(self, dataset: Dataset) -> None:
        torch.utils.data.IterableDataset.__init__(self)
        Feed.__init__(self, dataset)
        self.dataset = dataset
        # [next epoch, 1 when a worker process iterated last], shared with the workers.
        self._shared = multiprocessing.RawArray("q", [0, 0])

    def set_epoch(self, epoch: int) -> None:
        Feed.set_epoch(self, epoch)
        self._shared[0] = epoch

    def state_dict(self) -> dict[str, Any]:
        if self._shared[1] and torch.utils.data.get_worker_info() is None:
            raise InvalidArgumentError(
                "state_dict: the pipeline ran in a DataLoader worker process, where its position is; "
                "use num_workers=0, or torchdata's StatefulDataLoader, which asks the worker for it"
            )
        return Feed.state_dict(self)

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            raise InvalidArgumentError(
                "stoker.torch.IterableDataset runs its own threads: use DataLoader(num_workers=0) "
                "(or 1: the pipeline then runs in the worker process)"
            )
        _check_unbatched(sys._getframe(1))
        if info is None:
            self._shared[1] = 0
        else:
            # The worker has a copy of this object, made when the DataLoader started it: the
            # epoch comes from the memory it shares with the main process.
            epoch = int(self._shared[0])
            self._shared[0] = epoch + 1
            self._shared[1] = 1
            if self._state is None:
                self._epoch = epoch
        return self._batches(self._start())

    def _batches(self, it: DatasetIterator) -> Iterator[Any]:
        while True:
            try:
                out = to_torch(next(it))
            except StopIteration:
                self._finished(it)
                return
            self._handed_out(it.state())
            yield out
            del out

    def __getstate__(self) -> dict[str, Any]:
        # What a worker started with `spawn` or `forkserver` gets: the datasets as their
        # specs, no running iteration.
        # A dataset held under several names (`dataset`, and `Feed`'s own) is sent once.
        state = dict(self.__dict__)
        recipes: dict[int, _Recipe] = {}
        for k, v in state.items():
            if isinstance(v, Dataset):
                if id(v) not in recipes:
                    recipes[id(v)] = _Recipe(v)
                state[k] = recipes[id(v)]
            elif isinstance(v, DatasetIterator):
                state[k] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        made: dict[int, Dataset] = {}
        for k, v in state.items():
            if isinstance(v, _Recipe):
                if id(v) not in made:
                    made[id(v)] = v.dataset()
                state[k] = made[id(v)]
        self.__dict__.update(state)


def _check_unbatched(caller: Any) -> None:
    """A DataLoader that collates (any ``batch_size`` but ``None``) would stack its
    ``batch_size`` of stoker's batches into one, a leading dimension nobody asked for: its
    fetcher, which asks for the iterator, says whether it collates."""
    try:
        from torch.utils.data._utils.fetch import _IterableDatasetFetcher
    except ImportError:  # pragma: no cover - another PyTorch: the documented rule stands alone
        return
    if isinstance(caller.f_locals.get("self"), _IterableDatasetFetcher) and caller.f_locals.get("auto_collation"):
        raise InvalidArgumentError(
            "stoker.torch.IterableDataset hands out whole batches: give the DataLoader batch_size=None "
            "(a batch_size would stack that many of them into one batch)"
        )


class _Recipe:
    """A dataset sent to another process: its spec, structure and class names."""

    def __init__(self, ds: Dataset) -> None:
        from .errors import SpecError

        try:
            self.spec = json.dumps(ds.spec())
        except SpecError as e:
            raise InvalidArgumentError(
                "stoker.torch.IterableDataset: a DataLoader worker started with spawn or forkserver gets the "
                f"pipeline as its spec, and this one has none ({e}); use num_workers=0 (stoker runs its own "
                "threads) or the fork start method"
            ) from None
        structure = ds._structure
        if not isinstance(structure, (str, dict, tuple)):  # a window's datasets
            raise InvalidArgumentError(
                "stoker.torch.IterableDataset: this pipeline's elements hold datasets (window), which cannot be "
                "sent to a DataLoader worker started with spawn or forkserver; use num_workers=0"
            )
        self.structure = structure
        self.class_names = ds.class_names

    def dataset(self) -> Dataset:
        ds = Dataset(_stoker.Plan.from_spec_json(self.spec), self.structure)
        if self.class_names is not None:
            ds.class_names = self.class_names
        return ds
