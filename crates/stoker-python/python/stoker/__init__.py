"""stoker: keeps accelerators fed.

An input-pipeline engine for ML training with tf.data's API: a Rust engine that reads,
parses, shuffles, batches, caches and prefetches on worker threads without the GIL, and hands
batches to NumPy without copying.

    import stoker as sk
    ds = (sk.TFRecordDataset("data/*.tfrecord", num_parallel_reads=sk.AUTOTUNE)
            .shuffle(10_000, seed=0)
            .batch(512, drop_remainder=True)
            .map(sk.ops.parse_example({"s": sk.FixedLenFeature([], sk.int64)}))
            .prefetch(sk.AUTOTUNE))
    for batch in ds:
        ...
"""

from . import data, datasets, errors, experimental, io, ops
from ._dtypes import (
    bfloat16,
    bool_,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    string,
    uint8,
    uint16,
)
from ._stoker import JPEG_BACKEND as _JPEG_BACKEND
from ._stoker import __version__
from ._stoker import set_local_ranks as _set_local_ranks
from .analyze import TraceAnalysis, TraceComparison, analyze
from .dataset import (
    AUTOTUNE,
    CsvDataset,
    Dataset,
    DatasetIterator,
    FixedLengthRecordDataset,
    Options,
    TensorSpec,
    TextLineDataset,
    TFRecordDataset,
)
from .diagnosis import Diagnosis, Recommendation
from .errors import (
    ArgumentTypeError,
    CorruptRecordError,
    FileError,
    FilePermissionError,
    InternalError,
    InvalidArgumentError,
    InvalidRecordError,
    MissingFileError,
    ResourceError,
    SchemaError,
    SpecError,
    StokerError,
    TraceError,
    WorkerPanicError,
)
from .ops import FixedLenFeature, VarLenFeature
from .timing import Headspace, StepReport, StepTimer, headspace, timed
from .tracing import _trace_from_environment, trace

JPEG_BACKEND: str = _JPEG_BACKEND
"""The JPEG decoder this build uses: ``zune-jpeg`` (default) or ``libjpeg-turbo``."""


def set_local_ranks(n: int) -> None:
    """Tells stoker how many ranks of a data-parallel job run on this machine (e.g.
    ``hvd.local_size()``), where no ``LOCAL_WORLD_SIZE`` says it and no process group the
    adapters see does: each pipeline's default thread budget is then this process's share of
    the cores it may run on. ``0`` forgets it."""
    from ._check import whole

    _set_local_ranks(whole("set_local_ranks: n", n, 0))

__all__ = [
    "AUTOTUNE",
    "JPEG_BACKEND",
    "Dataset",
    "DatasetIterator",
    "Diagnosis",
    "Recommendation",
    "StepReport",
    "StepTimer",
    "timed",
    "analyze",
    "TraceComparison",
    "TraceAnalysis",
    "headspace",
    "Headspace",
    "trace",
    "set_local_ranks",
    "TFRecordDataset",
    "TextLineDataset",
    "FixedLengthRecordDataset",
    "CsvDataset",
    "Options",
    "TensorSpec",
    "FixedLenFeature",
    "VarLenFeature",
    "ops",
    "io",
    "data",
    "experimental",
    "errors",
    "datasets",
    "StokerError",
    "CorruptRecordError",
    "InvalidRecordError",
    "SchemaError",
    "InvalidArgumentError",
    "WorkerPanicError",
    "SpecError",
    "InternalError",
    "ArgumentTypeError",
    "FileError",
    "MissingFileError",
    "FilePermissionError",
    "ResourceError",
    "TraceError",
    "bool_",
    "uint8",
    "uint16",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "string",
    "__version__",
]

_trace_from_environment()
