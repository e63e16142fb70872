"""Native ops: they run in Rust on worker threads, without the GIL.

Each op reads a named field of the element and writes its result to ``output`` (by default the
same field, replacing it). Ops marked element-wise work on single elements and on whole
batches alike; when one comes right before ``batch``, stoker moves it after the batch so that
it runs once per batch (see ``Dataset.explain()``), unless the elements are large and the op
writes its rows of the batch itself (then it stays per element; see the README).

Use them with ``Dataset.map``: ``ds.map([ops.decode_raw("d", "uint8"), ops.unpack_bits("d")])``.

Arithmetic on fields is :func:`compute` with an expression built from :func:`field`:
``ops.compute("y", ops.tanh(ops.field("x") / 600) * 0.75)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from . import _expr
from ._check import whole
from ._dtypes import DType, dtype_name
from ._expr import Expr, ceil, exp, field, floor, log, maximum, minimum, sign, sqrt, square, tanh, where
from .errors import ArgumentTypeError, InvalidArgumentError


class NativeOp:
    """A native op, described by its spec (what ``save_spec`` writes). ``as_tuple``: the
    fields the elements are handed out as a tuple of, when this op ends its ``map``."""

    def __init__(self, spec: dict[str, Any], as_tuple: tuple[str, ...] | None = None) -> None:
        self.spec = spec
        self.as_tuple = as_tuple

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.spec.items() if k != "op")
        return f"stoker.ops.{self.spec['op']}({args})"


def _out(spec: dict[str, Any], output: str | None) -> NativeOp:
    if output is not None:
        spec["output"] = output
    return NativeOp(spec)


@dataclass(frozen=True)
class FixedLenFeature:
    """A feature with a fixed number of values (like ``tf.io.FixedLenFeature``)."""

    shape: Sequence[int]
    dtype: Any
    default_value: Any = None


@dataclass(frozen=True)
class VarLenFeature:
    """A feature with any number of values (like ``tf.io.VarLenFeature``): per element a 1-D
    tensor of its values, per batch a dense ``(batch, longest)`` tensor padded with zeros."""

    dtype: Any


Feature = Union[FixedLenFeature, VarLenFeature]


def _feature_spec(name: str, f: Feature) -> dict[str, Any]:
    if isinstance(f, VarLenFeature):
        return {"name": name, "kind": "var_len", "dtype": dtype_name(f.dtype)}
    if not isinstance(f, FixedLenFeature):
        raise ArgumentTypeError(f"feature '{name}': expected FixedLenFeature or VarLenFeature, got {f!r}")
    spec: dict[str, Any] = {
        "name": name,
        "kind": "fixed",
        "dtype": dtype_name(f.dtype),
        "shape": [int(d) for d in f.shape],
    }
    if f.default_value is not None:
        import numpy as np

        values = np.asarray(f.default_value).ravel().tolist()
        spec["default"] = [v.decode() if isinstance(v, bytes) else v for v in values]
    return spec


def parse_example(features: Mapping[str, Feature], key: str | None = None) -> NativeOp:
    """Parses serialized ``tf.train.Example`` s, per element (like
    ``tf.io.parse_single_example``) or per batch (like ``tf.io.parse_example``). The field
    ``key`` (by default the element's only string field) is replaced by the features."""
    spec: dict[str, Any] = {
        "op": "parse_example",
        "features": [_feature_spec(n, f) for n, f in features.items()],
    }
    if key is not None:
        spec["key"] = key
    return NativeOp(spec)


def decode_raw(field: str, out_type: Any, little_endian: bool = True, output: str | None = None) -> NativeOp:
    """Bytes → numbers, like ``tf.io.decode_raw``: a string of shape S becomes ``S + [n]``."""
    return _out(
        {"op": "decode_raw", "field": field, "dtype": dtype_name(out_type), "little_endian": little_endian}, output
    )


_CSV_TYPES = ("int32", "int64", "float32", "float64", "string")


def _csv_column(i: int, name: str, d: Any) -> dict[str, Any]:
    """A record default as ``tf.io.decode_csv`` takes it: a value (Python int → int32, float →
    float32, str/bytes → string, a NumPy scalar → its dtype) gives the column's type and
    default; a dtype (stoker's ``sk.int32``, NumPy's, or TensorFlow's) or an empty array makes
    the column required."""
    import numpy as np

    col: dict[str, Any] = {"name": name}
    if isinstance(d, bool) or isinstance(d, np.bool_):
        raise InvalidArgumentError(f"decode_csv: record_defaults[{i}]: bool columns are not CSV types")
    if isinstance(d, DType):  # before str: stoker's dtypes are strings too
        col.update(dtype=dtype_name(d))
    elif isinstance(d, np.generic):  # before float: np.float64 is a float too
        col.update(dtype=dtype_name(d.dtype), default=d.item())
    elif isinstance(d, int):
        col.update(dtype="int32", default=d)
    elif isinstance(d, float):
        col.update(dtype="float32", default=d)
    elif isinstance(d, (str, bytes)):
        col.update(dtype="string", default=d.decode() if isinstance(d, bytes) else d)
    elif isinstance(d, (np.dtype, type)) or hasattr(d, "as_numpy_dtype"):
        col.update(dtype=dtype_name(d))
    elif isinstance(d, (list, tuple, np.ndarray)) and np.size(d) == 0:
        col.update(dtype=dtype_name(np.asarray(d).dtype if isinstance(d, np.ndarray) else "float32"))
    else:
        raise InvalidArgumentError(
            f"decode_csv: record_defaults[{i}] must be a default value or a dtype, got {d!r}"
        )
    if col["dtype"] not in _CSV_TYPES:
        raise InvalidArgumentError(
            f"decode_csv: record_defaults[{i}] is {col['dtype']}; CSV columns are {', '.join(_CSV_TYPES)}"
        )
    return col


def decode_csv(
    field: str,
    record_defaults: Sequence[Any],
    names: Sequence[str] | None = None,
    field_delim: str = ",",
    use_quote_delim: bool = True,
    na_value: str = "",
    select_cols: Sequence[int] | None = None,
) -> NativeOp:
    """CSV records (a string, or a vector of them) → one field per column, as
    ``tf.io.decode_csv``: ``record_defaults`` gives each column's type and the default of an
    empty field (or of ``na_value``); a column given as a dtype is required. The fields are
    ``names`` (default ``"0"``, ``"1"``, ...), and replace ``field``. ``select_cols`` keeps
    those columns of each record (ascending). A bad field or record is an
    ``InvalidRecordError`` naming the file, the line and the column when the records came
    from ``TextLineDataset``."""
    defaults = list(record_defaults)
    if names is None:
        names = [str(i) for i in range(len(defaults))]
    if len(names) != len(defaults):
        raise InvalidArgumentError(f"decode_csv: {len(names)} names for {len(defaults)} record_defaults")
    if not isinstance(field_delim, str) or len(field_delim.encode()) != 1:
        raise InvalidArgumentError(f"decode_csv: field_delim must be one character, got {field_delim!r}")
    spec: dict[str, Any] = {
        "op": "decode_csv",
        "field": field,
        "columns": [_csv_column(i, n, d) for i, (n, d) in enumerate(zip(names, defaults))],
        "field_delim": field_delim,
        "use_quote_delim": bool(use_quote_delim),
        "na_value": na_value,
    }
    if select_cols is not None:
        cols = [whole(f"decode_csv: select_cols[{i}]", c, 0) for i, c in enumerate(select_cols)]
        if any(b <= a for a, b in zip(cols, cols[1:])):
            raise InvalidArgumentError(f"decode_csv: select_cols must be strictly ascending, got {cols}")
        spec["select_cols"] = cols
    return NativeOp(spec)


def read_file(field: str, output: str | None = None) -> NativeOp:
    """A file name → the file's bytes (like ``tf.io.read_file``); errors on them name the file."""
    return _out({"op": "read_file", "field": field}, output)


def convert_image_dtype(field: str, output: str | None = None) -> NativeOp:
    """uint8 → float32 in [0, 1] the way ``tf.image.convert_image_dtype`` computes it:
    ``float32(x) * float32(1 / 255)`` (a multiplication, which differs from ``x / 255`` in the
    last bit for some values; use ``rescale(field, divisor=255)`` for the division)."""
    return rescale(field, scale=1.0 / 255.0, output=output)


def decode_image(
    field: str,
    channels: int = 0,
    max_pixels: int = 1 << 28,
    output: str | None = None,
    dtype: str = "uint8",
    dct_method: str = "",
    expand_animations: bool = False,
) -> NativeOp:
    """PNG, JPEG, GIF or BMP bytes → ``[H, W, C]`` (format sniffed, like ``tf.io.decode_image``).

    As TensorFlow decodes them: a CMYK (or YCCK) JPEG becomes RGB by TensorFlow's own formula
    (``channels`` 0 or 3; not 1, which TensorFlow refuses too); a GIF gives its first frame,
    ``[H, W, 3]``, as ``tf.io.decode_image(..., expand_animations=False)`` (``channels`` 0 or
    3; the canvas is TensorFlow's: as large as the largest frame); a BMP (8, 24 or 32 bits,
    uncompressed) is read as TensorFlow reads it (``channels`` 0, 3 or 4; an 8-bit BMP gives
    one channel of its 8-bit values, the palette not applied, as in TensorFlow).
    ``expand_animations=True`` (TensorFlow's default, a GIF's frames as ``[frames, H, W, 3]``)
    is refused: stoker's decode gives one image.

    ``channels=0`` keeps what the file stores; 1, 3 or 4 converts (a JPEG refuses 4, as
    TensorFlow's decoder does: no alpha is made up for it). ``dtype="uint8"`` (16-bit
    PNG samples keep their high byte) or ``"uint16"`` (as ``tf.io.decode_image(dtype=tf.uint16)``:
    16-bit PNG samples as stored, 8-bit PNG × 257, JPEG × 256). A header claiming more than
    ``max_pixels`` pixels, or more than the file's image data can hold, is refused before
    anything is allocated. Bad images raise ``InvalidRecordError`` naming the file and record
    (or are skipped under the skip policy); a JPEG with damage libjpeg recovers from is used
    and counted in ``stats()`` as a warning.

    ``dct_method`` is ``tf.io.decode_jpeg``'s: ``""`` (TensorFlow's default) and
    ``"INTEGER_FAST"`` run libjpeg's fast integer IDCT, whose pixels equal TensorFlow's default
    decode; ``"INTEGER_ACCURATE"`` the accurate one (PIL's and torchvision's pixels; they
    differ from the fast one by a few levels). The zune-jpeg build (``stoker.JPEG_BACKEND``)
    has one IDCT of its own, close to the accurate one, and ignores it.
    """
    if dtype not in ("uint8", "uint16"):
        raise InvalidArgumentError(f"dtype={dtype!r}: expected 'uint8' or 'uint16'")
    if dct_method not in ("", "INTEGER_FAST", "INTEGER_ACCURATE"):
        raise InvalidArgumentError(
            f"dct_method={dct_method!r}: expected '', 'INTEGER_FAST' or 'INTEGER_ACCURATE' (as tf.io.decode_jpeg)"
        )
    if expand_animations:
        raise InvalidArgumentError(
            "decode_image: expand_animations=True (a GIF's frames as [frames, H, W, 3]) is not supported: "
            "decode_image gives one image [H, W, C]; pass expand_animations=False for a GIF's first frame"
        )
    spec = {"op": "decode_image", "field": field, "channels": int(channels), "max_pixels": int(max_pixels)}
    if dtype != "uint8":
        spec["dtype"] = dtype
    if dct_method == "INTEGER_ACCURATE":
        spec["dct_method"] = dct_method
    return _out(spec, output)


def unpack_bits(field: str, output: str | None = None) -> NativeOp:
    """uint8 ``[..., k]`` → uint8 ``[..., 8k]`` of 0/1, most significant bit first."""
    return _out({"op": "unpack_bits", "field": field}, output)


def gather_channels(
    field: str,
    indices: Sequence[int],
    signs: Sequence[int] | None = None,
    dtype: Any = "float32",
    output: str | None = None,
) -> NativeOp:
    """``out[..., j] = signs[j] * x[..., indices[j]]`` on the last axis, cast to ``dtype``."""
    spec: dict[str, Any] = {
        "op": "gather_channels",
        "field": field,
        "indices": [int(i) for i in indices],
        "dtype": dtype_name(dtype),
    }
    if signs is not None:
        spec["signs"] = [int(s) for s in signs]
    return _out(spec, output)


def bit_planes(
    field: str,
    start: int,
    shape: Sequence[int],
    indices: Sequence[int] | None = None,
    signs: Sequence[int] | None = None,
    dtype: Any = "float32",
    output: str | None = None,
    row_bytes: int | None = None,
) -> NativeOp:
    """Bits ``start .. start + prod(shape)`` of each row of uint8 bytes (most significant bit
    first), as ``shape`` (channels last), the channels gathered by ``indices`` and negated by
    ``signs``, as ``dtype``, in one pass from the packed bytes: what ``unpack_bits → slice →
    unflatten → gather_channels`` give, without their intermediate tensors. ``row_bytes``:
    the length every row must have (a row of another length is an error)."""
    dims = [whole(f"bit_planes: shape[{i}]", d, 1) for i, d in enumerate(shape)]
    if not dims:
        raise InvalidArgumentError("bit_planes: shape must have at least one axis")
    spec: dict[str, Any] = {
        "op": "bit_planes",
        "field": field,
        "start": whole("bit_planes: start", start, 0),
        "shape": dims,
        "dtype": dtype_name(dtype),
    }
    if indices is not None:
        spec["indices"] = [whole(f"bit_planes: indices[{i}]", v, 0) for i, v in enumerate(indices)]
    if signs is not None:
        spec["signs"] = [int(v) for v in signs]
    if row_bytes is not None:
        spec["row_bytes"] = whole("bit_planes: row_bytes", row_bytes, 1)
    return _out(spec, output)


def signed_channels(order: Sequence[int]) -> tuple[list[int], list[int]]:
    """Splits a channel order where ``-c`` means "channel c, negated" into indices and signs."""
    return [abs(int(c)) for c in order], [-1 if int(c) < 0 else 1 for c in order]


def cast(field: str, dtype: Any, output: str | None = None) -> NativeOp:
    """Converts to another numeric dtype as ``tf.cast`` does on x86: float → int truncates
    toward zero, through int32 (int64 for int64), where NaN and values out of its range
    become its minimum, then saturates to a narrower integer's range."""
    return _out({"op": "cast", "field": field, "dtype": dtype_name(dtype)}, output)


def compute(output: str, expr: Expr | float, dtype: Any = "float32") -> NativeOp:
    """Field ``output`` = ``expr``, an expression over the element's numeric fields (see
    :func:`field`), evaluated natively in one pass, as ``dtype``. Values are computed in
    float32 for a float32 (or narrower) ``dtype``, in float64 otherwise; ``tanh`` in float32
    is TensorFlow's own approximation, so that results equal TensorFlow's. Fields broadcast
    against each other as NumPy arrays do."""
    if not isinstance(output, str):
        raise InvalidArgumentError(f"compute: output must be a field name, got {type(output).__name__}")
    node = _expr._node(expr, "compute")
    return NativeOp({"op": "compute", "output": output, "dtype": dtype_name(dtype), "expr": node})


def rescale(
    field: str,
    divisor: float = 1.0,
    scale: float = 1.0,
    offset: float = 0.0,
    dtype: Any = "float32",
    output: str | None = None,
) -> NativeOp:
    """``(x / divisor) * scale + offset`` as float32 (or float64). ``divisor`` is a true
    division: ``rescale("x", divisor=255)`` equals ``tf.cast(x, tf.float32) / 255``."""
    spec = {
        "op": "rescale",
        "field": field,
        "divisor": float(divisor),
        "scale": float(scale),
        "offset": float(offset),
        "dtype": dtype_name(dtype),
    }
    return _out(spec, output)


def slice(  # noqa: A001
    field: str, start: int, stop: int, axis: int = -1, output: str | None = None, clamp: bool = False
) -> NativeOp:
    """``x[..., start:stop]`` on ``axis`` (negative axes count from the end). Bounds past the
    axis's end are an error, or with ``clamp`` cut to it, as Python's slices (``x[:512]`` of
    a shorter ``x`` is all of it)."""
    spec: dict[str, Any] = {"op": "slice", "field": field, "start": int(start), "stop": int(stop), "axis": int(axis)}
    if clamp:
        spec["clamp"] = True
    return _out(spec, output)


def unflatten(field: str, shape: Sequence[int], axis: int = -1, output: str | None = None) -> NativeOp:
    """Splits one axis into ``shape`` (like ``torch.Tensor.unflatten``), without copying."""
    return _out({"op": "unflatten", "field": field, "shape": [int(d) for d in shape], "axis": int(axis)}, output)


def ensure_shape(field: str, shape: Sequence[int | None]) -> NativeOp:
    """Checks that every element's ``field`` has ``shape`` (``None``: any size there), as
    ``tf.ensure_shape``: an element of another shape is an ``InvalidArgumentError`` naming
    both; the dataset's spec takes the sizes ``shape`` names. Nothing is copied."""
    dims = [None if d is None else whole(f"ensure_shape: shape[{i}]", d, 0) for i, d in enumerate(shape)]
    return NativeOp({"op": "ensure_shape", "field": field, "shape": dims})


def resize_with_crop_or_pad(field: str, height: int, width: int, output: str | None = None) -> NativeOp:
    """Centre-crops or zero-pads ``[..., H, W, C]`` to ``height x width``, exactly as
    ``tf.image.resize_with_crop_or_pad``."""
    h = whole("resize_with_crop_or_pad: height", height, 1)
    w = whole("resize_with_crop_or_pad: width", width, 1)
    return _out({"op": "resize_with_crop_or_pad", "field": field, "height": h, "width": w}, output)


def center_crop(field: str, size: int | Sequence[int], output: str | None = None) -> NativeOp:
    """torchvision's ``CenterCrop``: the centred ``size = (height, width)`` window of
    ``[..., H, W, C]``, zero-padded where the image is smaller. Like
    :func:`resize_with_crop_or_pad` except for odd differences, where torchvision rounds the
    offset half to even and TensorFlow floors it."""
    height, width = _size(size, "center_crop")
    return _out({"op": "center_crop", "field": field, "height": height, "width": width}, output)


def resize(
    field: str,
    size: int | Sequence[int],
    method: str = "bilinear",
    antialias: bool = True,
    output: str | None = None,
) -> NativeOp:
    """Resizes uint8 ``[H, W, C]`` (or ``[B, H, W, C]``; C = 1, 3 or 4) to ``size = (height,
    width)``. ``method``: ``"bilinear"`` (PIL's BILINEAR with ``antialias``, the default, as
    torchvision's ``Resize`` on PIL images; without it a fixed 2x2 kernel like OpenCV's
    INTER_LINEAR / ``tf.image.resize(antialias=False)``), ``"bicubic"`` (PIL's BICUBIC),
    ``"area"`` (PIL's BOX: the mean of the covered source area) or ``"nearest"``."""
    if method not in ("bilinear", "bicubic", "area", "nearest"):
        raise InvalidArgumentError(f"method={method!r}: expected 'bilinear', 'bicubic', 'area' or 'nearest'")
    height, width = _size(size, "resize")
    spec = {"op": "resize", "field": field, "height": height, "width": width, "method": method}
    spec["antialias"] = bool(antialias)
    return _out(spec, output)


def resize_bilinear(
    field: str,
    size: int | Sequence[int],
    align_corners: bool = False,
    half_pixel_centers: bool = True,
    output: str | None = None,
) -> NativeOp:
    """TensorFlow's ``tf.image.resize(images, size)`` (bilinear, without antialias): uint8 or
    float32 ``[H, W, C]`` (or ``[B, H, W, C]``, any number of channels) to float32 ``size =
    (height, width)``, not rounded, with the values of TensorFlow's ``ResizeBilinear`` kernel
    bit for bit (its float32 weights and arithmetic). ``align_corners`` and
    ``half_pixel_centers`` as that op's (``tf.compat.v1.image.resize`` has neither).
    :func:`resize` is the uint8 resize."""
    if bool(align_corners) and bool(half_pixel_centers):
        raise InvalidArgumentError("resize_bilinear: align_corners and half_pixel_centers cannot both be True")
    height, width = _size(size, "resize_bilinear")
    spec = {
        "op": "resize_bilinear",
        "field": field,
        "height": height,
        "width": width,
        "align_corners": bool(align_corners),
        "half_pixel_centers": bool(half_pixel_centers),
    }
    return _out(spec, output)


def _size(size: int | Sequence[int], op: str = "size") -> tuple[int, int]:
    if not isinstance(size, Sequence):
        side = whole(f"{op}: size", size, 1)
        return side, side
    height, width = size
    return whole(f"{op}: height", height, 1), whole(f"{op}: width", width, 1)


def _color_table(op: str, colors: Sequence[Sequence[int]] | tuple[list[str], list[list[int]]]) -> list[list[int]]:
    rgb: Sequence[Any] = colors
    if (
        isinstance(colors, tuple)
        and len(colors) == 2
        and not isinstance(colors[0], str)
        and all(isinstance(n, str) for n in colors[0])
    ):
        rgb = colors[1]  # read_class_colors' (names, colours)
    table = []
    for i, c in enumerate(rgb):
        if isinstance(c, (str, bytes)) or len(c) != 3:
            raise InvalidArgumentError(f"{op}: colour {i} must be (r, g, b), got {c!r}")
        table.append([whole(f"{op}: colour {i}", v, 0) for v in c])
        if max(table[-1]) > 255:
            raise InvalidArgumentError(f"{op}: colour {i} has a value above 255: {c!r}")
    return table


def one_hot_colors(
    field: str,
    colors: Sequence[Sequence[int]] | tuple[list[str], list[list[int]]],
    fallback: int | None = None,
    output: str | None = None,
    others: str = "error",
) -> NativeOp:
    """RGB label map ``[..., 3]`` uint8 → one-hot ``[..., len(colors)]`` float32. ``colors``: one
    ``(r, g, b)`` per class, or what :func:`read_class_colors` returns (names and colours). A
    pixel of another colour raises ``InvalidArgumentError`` unless ``fallback`` names its class,
    or ``others="zeros"`` gives it a row of zeros (what TensorFlow's per-colour ``tf.equal``
    one-hot gives)."""
    if others not in ("error", "zeros"):
        raise InvalidArgumentError(f"one_hot_colors: others must be 'error' or 'zeros', got {others!r}")
    spec: dict[str, Any] = {"op": "one_hot_colors", "field": field, "colors": _color_table("one_hot_colors", colors)}
    if fallback is not None:
        spec["fallback"] = int(fallback)
    if others == "zeros":
        spec["zeros_for_others"] = True
    return _out(spec, output)


def color_index(
    field: str,
    colors: Sequence[Sequence[int]] | tuple[list[str], list[list[int]]],
    fallback: int | None = None,
    output: str | None = None,
) -> NativeOp:
    """RGB label map ``[..., 3]`` uint8 → the class index of each pixel's colour ``[...]``
    (uint8 for up to 256 classes, else int32): what to store offline (``Dataset.convert``),
    with :func:`one_hot` online. ``colors`` and ``fallback`` as :func:`one_hot_colors`;
    ``one_hot(color_index(x), len(colors))`` equals ``one_hot_colors(x)``."""
    spec: dict[str, Any] = {"op": "color_index", "field": field, "colors": _color_table("color_index", colors)}
    if fallback is not None:
        spec["fallback"] = int(fallback)
    return _out(spec, output)


def one_hot(field: str, depth: int, output: str | None = None) -> NativeOp:
    """Integer class indices ``[...]`` → float32 ``[..., depth]`` as ``tf.one_hot(x, depth)``:
    1.0 at the index, an index outside ``0..depth`` (negative too) a row of zeros."""
    return _out({"op": "one_hot", "field": field, "depth": whole("one_hot: depth", depth, 1)}, output)


def read_class_colors(path: str) -> tuple[list[str], list[list[int]]]:
    """Class names and colours from a CamVid-style ``class_dict.csv`` (``name,r,g,b``)."""
    import csv

    names, colors = [], []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            names.append(row["name"])
            colors.append([int(row["r"]), int(row["g"]), int(row["b"])])
    return names, colors


def _seed(seed: int | None) -> int | None:
    """A given seed, or ``None``: the pipeline draws one for each run (see the README's
    "Seeds"), which a saved iterator state records and the ranks of a data-parallel job share."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**64:
        raise InvalidArgumentError(f"seed={seed!r}: expected None or a whole number in [0, 2**64)")
    return int(seed)


def element_seed(output: str, seed: int | None = None) -> NativeOp:
    """A ``[2]`` int64 field ``output`` holding a seed for this element, as TensorFlow's
    stateless random ops take one (``tf.random.stateless_uniform(shape, seed=x["seed"])``). It
    depends on the seed, the epoch and the element's position only, as the random ops' draws
    do (see ``random_flip_left_right``): the same on 1 or N threads, on every rank and after a
    resume, new every epoch."""
    if not isinstance(output, str) or not output:
        raise InvalidArgumentError(f"element_seed: output={output!r}: expected a field name")
    return NativeOp({"op": "element_seed", "output": output, "seed": _seed(seed)})


def random_flip_left_right(
    field: str, seed: int | None = None, probability: float = 0.5, output: str | None = None
) -> NativeOp:
    """Flips ``[H, W, C]`` left-right with ``probability``. The decision depends on the seed, the
    epoch and the element's position only: the same on 1 or N threads, new every epoch. Without
    a seed the pipeline draws one (see the README's "Seeds")."""
    spec = {
        "op": "random_flip",
        "field": field,
        "axis": "horizontal",
        "probability": float(probability),
        "seed": _seed(seed),
    }
    return _out(spec, output)


def random_flip_up_down(
    field: str, seed: int | None = None, probability: float = 0.5, output: str | None = None
) -> NativeOp:
    """Flips ``[H, W, C]`` up-down with ``probability`` (see ``random_flip_left_right``)."""
    spec = {
        "op": "random_flip",
        "field": field,
        "axis": "vertical",
        "probability": float(probability),
        "seed": _seed(seed),
    }
    return _out(spec, output)


def random_crop(field: str, size: int | Sequence[int], seed: int | None = None, output: str | None = None) -> NativeOp:
    """A ``size = (height, width)`` window of ``[H, W, C]`` at a random position, every
    position equally likely, like ``tf.image.random_crop(image, [height, width, C])`` (an image
    smaller than the window is an error). The position depends on (seed, epoch, element
    position) only (see ``random_flip_left_right``)."""
    height, width = _size(size, "random_crop")
    spec = {"op": "random_crop", "field": field, "height": height, "width": width, "seed": _seed(seed)}
    return _out(spec, output)


def random_resized_crop(
    field: str,
    size: int | Sequence[int],
    scale: Sequence[float] = (0.08, 1.0),
    ratio: Sequence[float] = (3 / 4, 4 / 3),
    seed: int | None = None,
    box_output: str | None = None,
    output: str | None = None,
) -> NativeOp:
    """torchvision's ``RandomResizedCrop`` on uint8 ``[H, W, C]``: a random box (area fraction
    in ``scale``, aspect ratio log-uniform in ``ratio``; torchvision's ten tries and central
    fallback) resized to ``size = (height, width)`` with antialiased bilinear filtering, in one
    pass. Decisions depend on (seed, epoch, element position) only. ``box_output`` adds a field
    with the box ``[top, left, height, width]``."""
    height, width = _size(size, "random_resized_crop")
    spec: dict[str, Any] = {
        "op": "random_resized_crop",
        "field": field,
        "height": height,
        "width": width,
        "scale": [float(v) for v in scale],
        "ratio": [float(v) for v in ratio],
        "seed": _seed(seed),
    }
    if box_output is not None:
        spec["box_output"] = box_output
    return _out(spec, output)


def _range(value: float | Sequence[float] | None, center: float, name: str) -> list[float] | None:
    """A scalar ``v`` means ``[center - v, center + v]`` (torchvision's convention)."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        if value < 0:
            raise InvalidArgumentError(f"{name}={value} must be >= 0")
        lo = center - float(value)
        return [max(lo, 0.0) if center == 1.0 else lo, center + float(value)]
    lo, hi = (float(v) for v in value)
    return [lo, hi]


def color_jitter(
    field: str,
    brightness: float | Sequence[float] | None = None,
    contrast: float | Sequence[float] | None = None,
    saturation: float | Sequence[float] | None = None,
    hue: float | Sequence[float] | None = None,
    seed: int | None = None,
    output: str | None = None,
) -> NativeOp:
    """Random brightness/contrast/saturation/hue of a float32 ``[H, W, C]`` image, each with
    TensorFlow's ``tf.image.adjust_*`` semantics and a factor drawn uniformly, in that order.
    A scalar ``b`` gives the brightness delta range ``[-b, b]``, contrast/saturation factor range
    ``[max(0, 1-c), 1+c]`` and hue delta range ``[-h, h]``; a pair gives the range itself. Like
    TensorFlow, values are not clipped afterwards. Draws depend on (seed, epoch, element)."""
    spec: dict[str, Any] = {"op": "color_jitter", "field": field, "seed": _seed(seed)}
    for name, value, center in (
        ("brightness", brightness, 0.0),
        ("contrast", contrast, 1.0),
        ("saturation", saturation, 1.0),
        ("hue", hue, 0.0),
    ):
        r = _range(value, center, name)
        if r is not None:
            spec[name] = r
    return _out(spec, output)


def normalize(field: str, mean: Sequence[float], std: Sequence[float], output: str | None = None) -> NativeOp:
    """``(x - mean[c]) / std[c]`` per channel (last axis) as float32 (torchvision's Normalize)."""
    spec = {"op": "normalize", "field": field, "mean": [float(m) for m in mean], "std": [float(s) for s in std]}
    return _out(spec, output)


def hwc_to_chw(field: str, output: str | None = None) -> NativeOp:
    """``[..., H, W, C]`` → ``[..., C, H, W]``."""
    return _out({"op": "layout", "field": field, "to": "chw"}, output)


def chw_to_hwc(field: str, output: str | None = None) -> NativeOp:
    """``[..., C, H, W]`` → ``[..., H, W, C]``."""
    return _out({"op": "layout", "field": field, "to": "hwc"}, output)


def select(fields: Sequence[str], as_tuple: bool = False) -> NativeOp:
    """Keeps only ``fields``, in that order. With ``as_tuple`` the elements are handed out
    as a tuple of those fields instead of a dict (``(image, label)`` for Keras' ``fit``);
    it must then be the last op of its ``map``."""
    if isinstance(fields, str) or not all(isinstance(f, str) for f in fields) or not list(fields):
        raise InvalidArgumentError(f"select: fields must be a non-empty list of field names, got {fields!r}")
    names = list(fields)
    return NativeOp({"op": "select", "fields": names}, tuple(names) if as_tuple else None)


__all__ = [
    "NativeOp",
    "FixedLenFeature",
    "VarLenFeature",
    "parse_example",
    "decode_raw",
    "decode_csv",
    "decode_image",
    "read_file",
    "convert_image_dtype",
    "unpack_bits",
    "gather_channels",
    "bit_planes",
    "signed_channels",
    "cast",
    "compute",
    "Expr",
    "field",
    "tanh",
    "exp",
    "log",
    "sqrt",
    "square",
    "sign",
    "floor",
    "ceil",
    "minimum",
    "maximum",
    "where",
    "rescale",
    "slice",
    "unflatten",
    "ensure_shape",
    "resize_with_crop_or_pad",
    "center_crop",
    "resize",
    "one_hot_colors",
    "color_index",
    "one_hot",
    "read_class_colors",
    "element_seed",
    "random_flip_left_right",
    "random_flip_up_down",
    "random_crop",
    "random_resized_crop",
    "color_jitter",
    "normalize",
    "hwc_to_chw",
    "chw_to_hwc",
    "select",
]
