"""TensorFlow functions in ``map``: traced as tf.data traces them, then run natively.

A function handed to ``map`` that uses TensorFlow (``tf.io.parse_single_example``,
``tf.cast``, ``tf.image.*``) is traced once, when ``map`` is called, into a ``tf.function``
with the input's signature, as tf.data does. Its graph is then read op by op:

- each op stoker has natively becomes that native op (``ParseExampleV2`` → ``parse_example``,
  ``DecodeJpeg`` → ``decode_image``, ``Cast`` → ``cast``, element-wise arithmetic → one
  ``compute``, ...), and the ``tf.image`` functions whose graph is a block of shape checks
  around one operation (``resize_with_crop_or_pad``, ``random_crop``, the flips) are read as
  that one operation; where every op is translated, the function runs as native ops, without
  the GIL, with the planner's fusions;
- an op without a native counterpart, and every op that reads what it computes, stay in
  TensorFlow: they run as one graph (cut out of the traced one) per element, on what the
  native ops computed; when nothing is translated the whole traced graph runs, never eagerly.
  ``explain()`` names the first such op and why.

TensorFlow is only imported for a function that uses it (it is then already imported).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import sys
import threading
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from . import ops
from ._dtypes import as_tf_converts
from ._expr import Expr
from ._structure import Dynamic, Template, as_args, flatten, is_namedtuple, like, pack
from ._tf_bits import Bits
from .errors import InvalidArgumentError

# ----------------------------------------------------------------------------- detection


# Off: TensorFlow functions run eagerly as Python, as before tracing (for A/B measurements).
TRACE = True
# Off: their stateful random ops run as they are, unseeded (see `trace`; for A/B measurements).
SEED = True
# Off: an untranslated function runs per element even where a batch follows (see `batch_call`;
# for A/B measurements).
WHOLE_PER_BATCH = True


def uses_tensorflow(fn: Any, depth: int = 0) -> bool:
    """Whether ``fn`` calls TensorFlow: it is a ``tf.function``, or its code reads a
    TensorFlow module, tensor or a function that does (a few calls deep)."""
    if not TRACE or "tensorflow" not in sys.modules or depth > 3 or getattr(fn, "_stoker_graph", False):
        return False  # a function already traced calls its graph, not TensorFlow's Python API
    module = getattr(type(fn), "__module__", "") or ""
    if module.startswith(("tensorflow", "tf_keras", "keras")):
        return True
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    inner = getattr(fn, "func", None)  # functools.partial
    if inner is not None and inner is not fn:
        return uses_tensorflow(inner, depth + 1)
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return False
    seen: list[Any] = []
    names = {n for c in _codes(code) for n in c.co_names}
    scope = getattr(fn, "__globals__", {})
    seen.extend(scope[n] for n in names if n in scope)
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            seen.append(cell.cell_contents)
        except ValueError:
            continue
    for obj in seen:
        if isinstance(obj, types.ModuleType):
            if obj.__name__.split(".")[0] in ("tensorflow", "keras", "tf_keras"):
                return True
        elif (getattr(type(obj), "__module__", "") or "").startswith(("tensorflow", "keras", "tf_keras")):
            return True  # a tensor, a tf.Module, a Keras layer or model (preprocessing layers)
        elif isinstance(obj, (types.FunctionType, types.MethodType)) and obj is not fn:
            if uses_tensorflow(obj, depth + 1):
                return True
    return False


def _codes(code: types.CodeType) -> list[types.CodeType]:
    out = [code]
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out.extend(_codes(c))
    return out


# ----------------------------------------------------------------------------- tracing


@dataclass
class Traced:
    """A function traced with the input's signature: the concrete function, the field each
    of its placeholders reads, and the structure of its outputs."""

    name: str
    concrete: Any
    in_template: Template
    in_fields: list[str]
    out_template: Template
    out_values: list[tuple[str, Any]]  # (flat name, graph tensor or Python value)
    # the field of the element's seed its random ops draw from (see `trace`), the last of
    # `in_fields`; None: traced as the user wrote it
    seed_field: str | None = None
    # the seed `ops.element_seed` writes it from: given where its random ops were (see
    # `_given_seed`), else None (drawn)
    seed: int | None = None
    # its random ops that draw from that seed (see `_op_seed`), and whether the random ops of
    # tf.image functions were left for the translator
    drawn: list[str] = field(default_factory=list)
    kept_native: bool = False
    # a Keras random function drew from a generator's state (see `_keras_draw_seed`)
    keras_random: bool = False
    # the function traced, kept with its graph: the graph holds the variables it reads (a
    # generator's state, a layer's weights) only weakly, and they may be the function's alone
    fn: Any = None
    _random: list[str] | None = None  # see `random`

    def random(self) -> list[str]:
        """``unseeded(concrete)``, read from the graph once, and Keras's draws from a state."""
        if self._random is None:
            self._random = unseeded(self.concrete) + self.keras()
        return self._random

    def keras(self) -> list[str]:
        """What ``random`` says of Keras's draws from a generator's state."""
        return ["keras.random (a SeedGenerator)"] if self.keras_random else []

    def args(self, flat: dict[str, Any]) -> tuple[Any, ...]:
        """The concrete function's arguments for the element ``flat``."""
        args = as_args(pack(self.in_template, flat))
        return (*args, flat[self.seed_field]) if self.seed_field is not None else args


# TensorFlow's random ops that draw from a state of their own (kept in the kernel, or in a
# generator's variable) rather than from a seed given with each call.
_STATEFUL_RANDOM = frozenset(
    {
        "RandomUniform",
        "RandomUniformInt",
        "RandomStandardNormal",
        "TruncatedNormal",
        "ParameterizedTruncatedNormal",
        "RandomShuffle",
        "RandomCrop",
        "Multinomial",
        "RandomGamma",
        "RandomPoisson",
        "RandomPoissonV2",
        "SampleDistortedBoundingBox",
        "SampleDistortedBoundingBoxV2",
        "StatefulUniform",
        "StatefulUniformInt",
        "StatefulUniformFullInt",
        "StatefulStandardNormal",
        "StatefulStandardNormalV2",
        "StatefulTruncatedNormal",
        "StatefulRandomBinomial",
        "RngSkip",
        "RngReadAndSkip",
        "NonDeterministicInts",
        "UniformCandidateSampler",
        "LogUniformCandidateSampler",
        "LearnedUnigramCandidateSampler",
        "FixedUnigramCandidateSampler",
        "AllCandidateSampler",
        "ThreadUnsafeUnigramCandidateSampler",
    }
)
# ops that call functions of the graph's library (conditions, loops, nested tf.functions)
_CALLS = frozenset(
    {
        "If",
        "StatelessIf",
        "While",
        "StatelessWhile",
        "Case",
        "StatelessCase",
        "PartitionedCall",
        "StatefulPartitionedCall",
    }
)


def unseeded(concrete: Any, among: set[str] | None = None) -> list[str]:
    """The types of the random ops in ``concrete``'s graph (of the ops named ``among``, with
    the functions they call; all where ``None``) that draw from a state of their own. Run in
    TensorFlow, they give values the pipeline's seeds do not fix: their state is the
    process's, advanced by every call on any thread, and starts afresh in a new process, so
    an element's values differ between runs, workers and ranks, and after a resume."""
    graph = concrete.graph.as_graph_def()
    top = [n for n in graph.node if among is None or n.name in among]
    found = {n.op for n in top if n.op in _STATEFUL_RANDOM}
    # the functions of the graph's library that these ops call (or a tf.data dataset's)
    if any(n.op in _CALLS or "Dataset" in n.op for n in top):
        found |= {n.op for f in graph.library.function for n in f.node_def if n.op in _STATEFUL_RANDOM}
    return sorted(found)


def random_caveat(random: list[str]) -> str:
    """What ``explain()`` and the warning say of a function whose TensorFlow part has
    ``random`` ops (see ``unseeded``)."""
    return (
        f"its random ops ({', '.join(random)}) run in TensorFlow, not seeded by stoker: an element's values "
        "differ between runs, workers and ranks, and after a resume (stoker.ops' random ops, and tf.image's "
        "random crops, flips and colour changes where translated, draw from the pipeline's seed)"
    )


def _tf_dtype(tf: Any, name: str) -> Any:
    return tf.string if name == "string" else tf.as_dtype(name)


# ----------------------------------------------------------------------------- seeding
#
# A function traced with a seed (see `trace`) has its random ops drawn from the element's
# seed: while it is traced, `tf.random`'s functions (and `random_ops`', which tf.image's
# random functions call) are replaced by their stateless forms, each given the element's
# seed offset by its place among the function's random ops.


class _Seeding(threading.local):
    """The seed tensor of the function this thread traces (None: not seeded), how many
    random ops took one and which (for ``explain()``), the seeds TensorFlow would have given
    them (an op's ``seed=``, or the global one of ``tf.random.set_seed``), whether the random
    ops of the tf.image functions the translator reads as native ops are seeded too (``all``),
    and whether any was left for the translator (``kept``)."""

    seed: Any = None
    count: int = 0
    drawn: list[str] = []
    given: list[tuple[int, ...]] = []
    all: bool = False
    kept: bool = False
    # a Keras random function drew from a `SeedGenerator` (a variable the calls advance)
    keras: bool = False
    # this thread traces a function handed to stoker: the tf.functions it calls are inlined
    inline: bool = False
    # the function traced, as a number the same in every process (see `_where`)
    where: int = 0


_SEEDING = _Seeding()
# tf.image functions read as one native op that draws from the pipeline's seed (see `_SCOPES`):
# their random ops are left as they are, for the translator to find (at the top level)
_NATIVE_RANDOM = (
    "random_crop",
    "random_flip_left_right",
    "random_flip_up_down",
    "random_brightness",
    "random_contrast",
    "random_saturation",
    "random_hue",
)
# tf.image's random colour functions: the op each adjusts with, and `ops.color_jitter`'s
# argument of the same meaning. TensorFlow gives them no name scope: a seeded trace puts
# each in one of its name (see `_stateless_forms`), for the translator to read.
_COLOR_SCOPES = {
    "random_brightness": ("AddV2", "brightness"),
    "random_contrast": ("AdjustContrastv2", "contrast"),
    "random_saturation": ("AdjustSaturation", "saturation"),
    "random_hue": ("AdjustHue", "hue"),
}


def _loop_counters(tf: Any) -> list[Any] | None:
    """The iteration counters of the ``tf.while_loop`` s (``tf.map_fn``, ``tf.scan``,
    AutoGraph's ``for`` over a tensor) whose body is being traced, innermost first (none
    outside a loop): a body is traced once for all its iterations, so its random ops take the
    element's seed folded with them; so are the indices of the ``tf.vectorized_map`` s whose
    body is being traced in the function's graph. None where no counter is at hand, and the
    random ops keep their state: in a loop's condition, or in any other function the graph
    calls many times (a ``tf.data`` dataset's ``map`` or ``reduce`` inside the function)."""
    graph = tf.compat.v1.get_default_graph()
    counters = []
    # A vectorized_map's (pfor's) body is traced in the graph, under a `loop_body` name scope
    # whose first op is the iteration's index (a PlaceholderWithDefault the vectorizer feeds).
    scopes = graph.get_name_scope().split("/")
    for j in reversed(range(len(scopes))):
        if re.fullmatch(r"loop_body(_\d+)?", scopes[j]):
            try:
                index = graph.get_operation_by_name("/".join(scopes[: j + 1]) + "/PlaceholderWithDefault")
            except KeyError:
                return None
            if index.type != "PlaceholderWithDefault" or index.outputs[0].dtype != tf.int32:
                return None
            counters.append(index.outputs[0])
    own = _SEEDING.seed.graph  # the traced function's graph
    while graph is not own:
        kind = type(graph).__name__
        if kind == "WhileBodyFuncGraph":
            # while_v2 makes the loop's counter the body's first input
            inputs = list(graph.inputs)
            if not inputs or not re.sub(r"_\d+$", "", inputs[0].name.split(":")[0]).endswith("loop_counter"):
                return None
            counters.append(inputs[0])
        elif kind != "CondBranchFuncGraph":  # a branch runs once where it runs
            return None
        graph = getattr(graph, "outer_graph", None)
        if graph is None:
            return None
    return counters


def _given(seed: Any) -> tuple[int, ...] | None:
    """The seeds TensorFlow derives for a random op given ``seed=`` (and the global one of
    ``tf.random.set_seed``); None where neither was given."""
    from tensorflow.python.framework import random_seed

    graph_seed, op_seed = random_seed.get_seed(seed)
    return None if graph_seed is None else (int(graph_seed), int(op_seed or 0))


def _op_seed(tf: Any, given: Callable[[], tuple[int, ...] | None], what: str) -> Any:
    """The seed of the random op ``what`` (``tf.random.uniform``, ...) being traced, or None
    where it keeps its own state: outside a seeded trace (any other thread's TensorFlow, or
    eager code in the trace), where ``_loop_counters`` has none at hand, or in a tf.image
    function that the translator reads as a native op. ``given()`` says the seeds TensorFlow
    would derive for the op (see ``_given_seed``): asked only once the op is seeded, as
    TensorFlow's derivation counts the ops it seeds."""
    if _SEEDING.seed is None or tf.executing_eagerly():  # eager: in a `tf.init_scope()`
        return None
    counters = _loop_counters(tf)
    if counters is None:
        return None
    top = re.sub(r"_\d+$", "", tf.compat.v1.get_default_graph().get_name_scope().split("/")[0])
    if top in _NATIVE_RANDOM and not _SEEDING.all:
        _SEEDING.kept = True
        return None
    seeds = given()
    if seeds is not None:
        _SEEDING.given.append(seeds)
    _SEEDING.count += 1
    _SEEDING.drawn.append(what + (f" in {top}" if top else ""))
    # The k-th random op: the element's seed with k added to its second word. The stateless
    # ops hash the whole seed into their Philox key and counter, so seeds one apart draw
    # unrelated streams; and an addition vectorizes over a batch, where a
    # `stateless_fold_in` would run once per element.
    seed = _SEEDING.seed + tf.constant([0, _SEEDING.count], tf.int64)
    for counter in counters:  # in a loop's body: each iteration its own
        seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(counter, tf.int64))
    return seed


def _shape_of(tf: Any, shape: Any) -> Any:
    """A shape argument (a list, a tensor) as an int32 vector."""
    from tensorflow.python.ops import shape_util

    return tf.cast(shape_util.shape_tensor(shape), tf.int32)


def _stateless_forms(tf: Any, original: dict[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """Replacements of the stateful random functions, by their key in ``_RANDOM_FUNCTIONS``:
    the stateless form where a seed is being given (``_op_seed``), else the ``original``."""

    def uniform(shape: Any, minval: Any = 0, maxval: Any = None, dtype: Any = tf.float32, seed: Any = None,
                name: Any = None) -> Any:  # fmt: skip
        k = _op_seed(tf, lambda: _given(seed), "tf.random.uniform")
        if k is None:
            return original["uniform"](shape, minval, maxval, dtype, seed, name)
        return tf.random.stateless_uniform(shape, k, minval=minval, maxval=maxval, dtype=dtype, name=name)

    def gaussian(kind: str, stateless: Callable[..., Any]) -> Callable[..., Any]:
        """``normal`` or ``truncated_normal`` (the same arguments)."""

        def draw(shape: Any, mean: Any = 0.0, stddev: Any = 1.0, dtype: Any = tf.float32, seed: Any = None,
                 name: Any = None) -> Any:  # fmt: skip
            k = _op_seed(tf, lambda: _given(seed), f"tf.random.{kind}")
            if k is None:
                return original[kind](shape, mean, stddev, dtype, seed, name)
            return stateless(shape, k, mean=mean, stddev=stddev, dtype=dtype, name=name)

        return draw

    normal = gaussian("normal", tf.random.stateless_normal)
    truncated_normal = gaussian("truncated_normal", tf.random.stateless_truncated_normal)

    def categorical(logits: Any, num_samples: Any, dtype: Any = None, seed: Any = None, name: Any = None) -> Any:
        k = _op_seed(tf, lambda: _given(seed), "tf.random.categorical")
        if k is None:
            return original["categorical"](logits, num_samples, dtype, seed, name)
        return tf.random.stateless_categorical(logits, num_samples, k, dtype=dtype, name=name)

    def multinomial(logits: Any, num_samples: Any, seed: Any = None, name: Any = None, output_dtype: Any = None) -> Any:
        k = _op_seed(tf, lambda: _given(seed), "tf.compat.v1.multinomial")
        if k is None:
            return original["multinomial"](logits, num_samples, seed, name, output_dtype)
        return tf.random.stateless_categorical(logits, num_samples, k, dtype=output_dtype or tf.int64, name=name)

    def shuffle(value: Any, seed: Any = None, name: Any = None) -> Any:
        k = _op_seed(tf, lambda: _given(seed), "tf.random.shuffle")
        if k is None:
            return original["shuffle"](value, seed, name)
        # A uniform permutation of the first dimension: the order of uniform draws.
        value = tf.convert_to_tensor(value)
        keys = tf.random.stateless_uniform(tf.shape(value)[:1], k)
        return tf.gather(value, tf.argsort(keys), name=name)

    def gamma(shape: Any, alpha: Any, beta: Any = None, dtype: Any = tf.float32, seed: Any = None,
              name: Any = None) -> Any:  # fmt: skip
        k = _op_seed(tf, lambda: _given(seed), "tf.random.gamma")
        if k is None:
            return original["gamma"](shape, alpha, beta, dtype, seed, name)
        # TensorFlow's samples have the shape `shape` then the parameters' broadcast shape;
        # the stateless form takes the whole
        alpha = tf.convert_to_tensor(alpha, dtype=dtype)
        beta = tf.convert_to_tensor(1 if beta is None else beta, dtype=dtype)
        whole = tf.concat([_shape_of(tf, shape), tf.broadcast_dynamic_shape(tf.shape(alpha), tf.shape(beta))], 0)
        return tf.random.stateless_gamma(whole, k, alpha, beta=beta, dtype=dtype, name=name)

    def poisson(shape: Any, lam: Any, dtype: Any = tf.float32, seed: Any = None, name: Any = None) -> Any:
        k = _op_seed(tf, lambda: _given(seed), "tf.random.poisson")
        if k is None:
            return original["poisson"](shape, lam, dtype, seed, name)
        lam = tf.convert_to_tensor(lam)
        whole = tf.concat([_shape_of(tf, shape), tf.shape(lam)], 0)  # as gamma's
        return tf.random.stateless_poisson(whole, k, lam, dtype=dtype, name=name)

    def box(given: Callable[[], tuple[int, ...] | None], image_size: Any, bounding_boxes: Any, **kw: Any) -> Any:
        """``tf.image.sample_distorted_bounding_box``'s stateless form, or None."""
        k = _op_seed(tf, given, "tf.image.sample_distorted_bounding_box")
        if k is None:
            return None
        return tf.image.stateless_sample_distorted_bounding_box(image_size, bounding_boxes, k, **kw)

    def bounding_box(image_size: Any, bounding_boxes: Any, seed: Any = 0, min_object_covered: Any = 0.1,
                     aspect_ratio_range: Any = None, area_range: Any = None, max_attempts: Any = None,
                     use_image_if_no_bounding_boxes: Any = None, name: Any = None) -> Any:  # fmt: skip
        kw = dict(min_object_covered=min_object_covered, aspect_ratio_range=aspect_ratio_range,
                  area_range=area_range, max_attempts=max_attempts,
                  use_image_if_no_bounding_boxes=use_image_if_no_bounding_boxes, name=name)  # fmt: skip
        # seed=0: unseeded in TensorFlow, whatever the global seed
        drawn = box(lambda: _given(seed) if seed else None, image_size, bounding_boxes, **kw)
        return original["bounding_box"](image_size, bounding_boxes, seed, **kw) if drawn is None else drawn

    def bounding_box_v1(image_size: Any, bounding_boxes: Any, seed: Any = None, seed2: Any = None,
                        min_object_covered: Any = 0.1, aspect_ratio_range: Any = None, area_range: Any = None,
                        max_attempts: Any = None, use_image_if_no_bounding_boxes: Any = None,
                        name: Any = None) -> Any:  # fmt: skip
        kw = dict(min_object_covered=min_object_covered, aspect_ratio_range=aspect_ratio_range,
                  area_range=area_range, max_attempts=max_attempts,
                  use_image_if_no_bounding_boxes=use_image_if_no_bounding_boxes, name=name)  # fmt: skip
        drawn = box(lambda: (int(seed or 0), int(seed2 or 0)) if seed or seed2 else None, image_size, bounding_boxes,
                    **kw)  # fmt: skip
        return original["bounding_box_v1"](image_size, bounding_boxes, seed, seed2, **kw) if drawn is None else drawn

    def scoped(kind: str) -> Callable[..., Any]:
        """A tf.image random colour function in a name scope of its name (see ``_COLOR_SCOPES``)."""

        def call(*args: Any, **kwargs: Any) -> Any:
            with tf.name_scope(kind):
                return original[kind](*args, **kwargs)

        return call

    made = {"uniform": uniform, "normal": normal, "truncated_normal": truncated_normal,
            "categorical": categorical, "multinomial": multinomial, "shuffle": shuffle, "gamma": gamma,
            "poisson": poisson, "bounding_box": bounding_box, "bounding_box_v1": bounding_box_v1,
            **{kind: scoped(kind) for kind in _COLOR_SCOPES}}  # fmt: skip
    return {n: tf.autograph.experimental.do_not_convert(f) for n, f in made.items()}


def _inlined_call(tf: Any, original: Callable[..., Any]) -> Callable[..., Any]:
    """A replacement of ``tf.function``'s call: where this thread traces a function handed to
    stoker, a ``tf.function`` it calls (or the function itself) is traced into its graph, as
    its Python function (converted by AutoGraph where it was made so), not called as a
    function of the graph's library. Its ops are then the graph's own: the translator reads
    them as native ops, and its random ops draw from the element's seed (a nested function's
    trace is cached, made before the seed was there). Results are the same: tf.data's graph
    inlines such calls too. The arguments are bound as ``tf.function`` binds them (NumPy
    values made tensors; an input signature's dtypes checked, its errors raised). Not
    inlined, as they are not in tf.data's either: functions compiled by XLA
    (``jit_compile``) and those with attributes (``experimental_implements``); nor those
    whose trace would see other shapes than the arguments' (``reduce_retracing``, or an
    input signature the arguments' shapes and dtypes do not match exactly). The
    ``tf.function`` s these call are not inlined either: their traces stay the functions'
    own."""
    from tensorflow.python.eager.polymorphic_function import autograph_util, function_type_utils

    def not_inlined(self: Any, args: Any, kwds: Any) -> Any:
        inline, _SEEDING.inline = _SEEDING.inline, False
        try:
            return original(self, *args, **kwds)
        finally:
            _SEEDING.inline = inline

    def call(self: Any, *args: Any, **kwds: Any) -> Any:
        if not _SEEDING.inline or not INLINE:
            return original(self, *args, **kwds)
        if (
            tf.executing_eagerly()  # in a `tf.init_scope()` of the trace
            or getattr(self, "_jit_compile", None)
            or getattr(self, "_attributes", None)
            or getattr(self, "_reduce_retracing", False)
        ):
            return not_inlined(self, args, kwds)
        bound = function_type_utils.canonicalize_function_inputs(
            args, kwds, self._function_type, self._default_values, self._is_pure
        )
        signature = self.input_signature
        if signature is not None and not _as_specified(tf, signature, bound.args):
            return not_inlined(self, args, kwds)
        fn = self.python_function
        if getattr(self, "_autograph", False):
            fn = autograph_util.py_func_from_autograph(fn, getattr(self, "_experimental_autograph_options", None))
        # NumPy values are tensors to a tf.function (of their own dtype)
        args, kwds = tf.nest.map_structure(
            lambda v: tf.convert_to_tensor(v) if isinstance(v, (np.ndarray, np.generic)) else v,
            (bound.args, bound.kwargs),
        )
        return fn(*args, **kwds)

    return call


# tf.functions called by a traced function traced into its graph (off: left as calls, for A/B
# measurements)
INLINE = True


def _as_specified(tf: Any, signature: Any, args: Any) -> bool:
    """Whether ``args`` are tensors of the shapes and dtypes of ``signature`` (an input
    signature's ``TensorSpec`` s), exactly: a trace with it sees those."""

    def dims(shape: Any) -> list[int | None] | None:
        return None if shape.rank is None else shape.as_list()

    def same(spec: Any, v: Any) -> bool:
        return isinstance(spec, tf.TensorSpec) and tf.is_tensor(v) and v.dtype == spec.dtype and (
            dims(v.shape) == dims(spec.shape)
        )

    specs, values = tf.nest.flatten(signature), tf.nest.flatten(tuple(args)[: len(signature)])
    return len(specs) == len(values) and all(same(spec, v) for spec, v in zip(specs, values))


def _generator_draws(tf: Any, prepare: Callable[..., Any], binomial: Callable[..., Any]) -> dict[str, Any]:
    """Replacements of ``tf.random.Generator``'s methods that draw (``prepare``, its
    ``_prepare_key_counter``, which reads and advances its state for ``normal``, ``uniform``,
    ``truncated_normal``, ``uniform_full_int`` and ``make_seeds``; and ``binomial``): where a
    seed is being given (see ``_op_seed``), the key and counter of the element's seed; else
    the originals. The generator's state when the function is traced, with the function's
    code (``_where``), counts as the draw's given seed: one made ``from_seed`` gives the same in
    every run, however often the pipeline is built before (a state saved in one process
    resumes in another), and two functions using one generator differ. The generator's state
    is left as it is. The global generator's draws (``tf.random.get_global_generator()``,
    made from a non-deterministic state) take a drawn seed instead."""
    from tensorflow.python.ops import gen_stateless_random_ops_v2, stateful_random_ops

    def given(generator: Any) -> tuple[int, ...] | None:
        if generator is stateful_random_ops.global_generator:
            return None
        try:
            with tf.init_scope():
                state = tuple(int(v) for v in generator.state.numpy())
        except Exception:  # noqa: BLE001 - a state not readable now is not a seed given
            return None
        return (*state, _SEEDING.where)

    def prepare_key_counter(self: Any, shape: Any) -> Any:
        k = _op_seed(tf, lambda: given(self), "tf.random.Generator")
        if k is None:
            return prepare(self, shape)
        key, counter = gen_stateless_random_ops_v2.stateless_random_get_key_counter(k)
        return self._preprocess_key(key), counter[: stateful_random_ops._get_counter_size(self.algorithm)]

    def draw_binomial(self: Any, shape: Any, counts: Any, probs: Any, dtype: Any = tf.int32, name: Any = None) -> Any:
        k = _op_seed(tf, lambda: given(self), "tf.random.Generator")
        if k is None:
            return binomial(self, shape, counts, probs, dtype, name)
        return tf.random.stateless_binomial(shape, k, counts, probs, output_dtype=dtype, name=name)

    return {
        "_prepare_key_counter": tf.autograph.experimental.do_not_convert(prepare_key_counter),
        "binomial": tf.autograph.experimental.do_not_convert(draw_binomial),
    }


def _keras_draw_seed(tf: Any, original: Callable[..., Any]) -> Callable[..., Any]:
    """A replacement of Keras's ``draw_seed`` (its TensorFlow backend's random functions call
    it; its random preprocessing layers, through them): the element's seed where a seed is
    being given (see ``_op_seed``) for a draw from a ``SeedGenerator`` (a layer's; the seed
    it was made with counts as given) or from Keras's global one, else the ``original``,
    noting that such a draw was traced. A whole number seed stays the constant it is."""

    def draw_seed(seed: Any) -> Any:
        constant = isinstance(seed, (int, np.integer))
        k = None if constant else _op_seed(tf, lambda: _given(getattr(seed, "_initial_seed", None)), "keras.random")
        if k is not None:
            return k
        if not constant:
            _SEEDING.keras = True
        return original(seed)

    return tf.autograph.experimental.do_not_convert(draw_seed)  # type: ignore[no-any-return]


# The stateful random functions replaced, by key: the module of TensorFlow's that defines each
# and its name there. They are replaced wherever TensorFlow's API and modules hold them (see
# `_places`): `tf.random.uniform` and `tf.compat.v1.random_uniform`, and `random_ops`'s, which
# tf.image's random functions call.
_RANDOM_FUNCTIONS = {
    "uniform": ("random_ops", "random_uniform"),
    "normal": ("random_ops", "random_normal"),
    "truncated_normal": ("random_ops", "truncated_normal"),
    "categorical": ("random_ops", "categorical"),
    "multinomial": ("random_ops", "multinomial"),
    "shuffle": ("random_ops", "random_shuffle"),
    "gamma": ("random_ops", "random_gamma"),
    "poisson": ("random_ops", "random_poisson_v2"),
    "bounding_box": ("image_ops_impl", "sample_distorted_bounding_box_v2"),
    "bounding_box_v1": ("image_ops_impl", "sample_distorted_bounding_box"),
    **{kind: ("image_ops_impl", kind) for kind in _COLOR_SCOPES},
}
_PLACES: list[tuple[Any, str, str]] = []  # (module, name, key): where each is held


def _places(tf: Any) -> list[tuple[Any, str, str]]:
    """Where the functions of ``_RANDOM_FUNCTIONS`` are held (found once, by identity)."""
    if not _PLACES:
        import importlib

        keys = {id(getattr(importlib.import_module(f"tensorflow.python.ops.{m}"), n)): k
                for k, (m, n) in _RANDOM_FUNCTIONS.items()}  # fmt: skip
        modules = {m.__name__: m for m in (importlib.import_module(f"tensorflow.python.ops.{m}")
                                           for m, _ in _RANDOM_FUNCTIONS.values())}  # fmt: skip
        api = (tf.random, tf.image, tf.compat.v1, tf.compat.v1.random, tf.compat.v1.image, tf.compat.v2.random,
               tf.compat.v2.image)  # fmt: skip
        for m in (*api, *modules.values()):
            _PLACES.extend((m, n, keys[id(v)]) for n, v in list(vars(m).items()) if id(v) in keys)
    return _PLACES


_PATCH = threading.Lock()
_patched: list[int] = [0]  # traces under way with the replacements in place


@contextlib.contextmanager
def _stateless(tf: Any) -> Iterator[None]:
    """The replacements in place while this trace runs (and any other seeded one); other
    threads' TensorFlow calls still reach the originals (see ``_op_seed``)."""
    with _PATCH:
        if _patched[0] == 0:
            try:
                _install(tf)
            except BaseException:
                _uninstall()
                raise
        _patched[0] += 1
    try:
        yield
    finally:
        with _PATCH:
            _patched[0] -= 1
            if _patched[0] == 0:
                _uninstall()


def _replace(owner: Any, name: str, value: Any) -> None:
    _REPLACED.append((owner, name, getattr(owner, name)))
    setattr(owner, name, value)


def _install(tf: Any) -> None:
    """Puts the replacements in place (see ``_stateless``), noting what each replaced."""
    from tensorflow.python.eager.polymorphic_function import polymorphic_function
    from tensorflow.python.ops import stateful_random_ops

    generator = stateful_random_ops.Generator
    for n, f in _generator_draws(tf, generator._prepare_key_counter, generator.binomial).items():
        _replace(generator, n, f)
    places = _places(tf)
    replaced = _stateless_forms(tf, {k: getattr(m, n) for m, n, k in places})
    for m, n, k in places:
        _replace(m, n, replaced[k])
    keras: Any = sys.modules.get(_KERAS_SEEDS)
    if keras is not None and hasattr(keras, "draw_seed"):
        # Keras's modules import it by name (its random functions', its image ops')
        draw: Callable[..., Any] = keras.draw_seed
        keras_draw = _keras_draw_seed(tf, draw)
        for m in [m for n, m in list(sys.modules.items()) if n.startswith("keras.src.")]:
            if vars(m).get("draw_seed") is draw:
                _replace(m, "draw_seed", keras_draw)
    function = polymorphic_function.Function
    _replace(function, "__call__", _inlined_call(tf, function.__call__))


def _uninstall() -> None:
    """Puts back what ``_install`` replaced, the last first."""
    while _REPLACED:
        owner, name, value = _REPLACED.pop()
        setattr(owner, name, value)


_REPLACED: list[tuple[Any, str, Any]] = []  # (module or class, name, what it held)
# Keras 3's seeds: its TensorFlow backend's random functions and image ops draw them through
# this module's `draw_seed`, imported by name
_KERAS_SEEDS = "keras.src.random.seed_generator"


def _where(fn: Any) -> int:
    """``fn`` as a number the same in every process that has its code, wherever the code
    lies: its file's name (not its directory), line, name and bytecode (two lambdas on one
    line differ)."""
    import hashlib

    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is None:  # a callable object, a partial: its type
        key = f"{type(fn).__module__}.{type(fn).__qualname__}".encode()
    else:
        key = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}:{code.co_name}:".encode() + code.co_code
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")


def _begin_seeding(seed: Any) -> None:
    _SEEDING.seed, _SEEDING.count, _SEEDING.drawn, _SEEDING.given = seed, 0, [], []
    _SEEDING.kept = _SEEDING.keras = False


def _given_seed(given: list[tuple[int, ...]]) -> int | None:
    """The pipeline seed of a function whose random ops were given seeds (``given``, as
    TensorFlow would derive them): one number fixed by them, so that its draws repeat in
    every run as TensorFlow's seeded ops do; None (drawn) where none was."""
    if not given:
        return None
    import hashlib

    return int.from_bytes(hashlib.blake2b(repr(given).encode(), digest_size=8).digest(), "little")


def trace(
    fn: Callable[..., Any],
    template: Template,
    schema: list[tuple[str, str, list[int | None]]],
    seed_field: str | None = None,
    all_random: bool = False,
) -> Traced:
    """Traces ``fn`` as tf.data's ``map`` does: a ``tf.function`` (with AutoGraph) called with
    the element's structure of ``TensorSpec`` s (a tuple element as separate arguments).

    With ``seed_field``, the function takes one more argument, the element's seed (a ``[2]``
    int64 field that ``ops.element_seed`` writes), and its random ops (``tf.random.uniform``,
    ``normal``, ``truncated_normal``, ``categorical``, ``shuffle``, ``gamma``, ``poisson``,
    under their ``tf.compat.v1`` names too, ``tf.image``'s random functions that call them,
    ``tf.image.sample_distorted_bounding_box``, Keras's random functions, and a
    ``tf.random.Generator``'s draws) are traced as their stateless forms drawing from it: values
    fixed by the pipeline's seed, the epoch and the element's position, as stoker's own
    random ops. Their distributions are the same, their values not tf.data's. Where they
    were given seeds (an op's ``seed=``, ``tf.random.set_seed``, a generator's state), the
    seed is fixed by those (``Traced.seed``), as TensorFlow's values are; else the pipeline
    draws one. In a loop's body the seed is folded with the loop's counters (in a
    ``tf.vectorized_map`` 's body, with its index). Left as they are: random ops in a loop's
    condition, in the
    ``tf.function`` s it calls that are not inlined (see ``_inlined_call``), and, unless
    ``all_random``, in the ``tf.image`` random crops, flips and colour changes the translator reads as native
    ops. The ``tf.function`` s it calls (and ``fn``, if one) are traced into its graph."""
    import tensorflow as tf

    by_name = {n: tf.TensorSpec(shape, _tf_dtype(tf, d), name=None) for n, d, shape in schema}
    args = as_args(pack(template, by_name))
    fields = pack(template, {n: n for n, _, _ in schema})
    name = getattr(fn, "__name__", "map_fn")
    begin = tf.autograph.experimental.do_not_convert(_begin_seeding)

    def call(*a: Any) -> Any:
        if seed_field is not None:
            begin(a[-1])
            a = a[:-1]
        result = fn(*a)
        return _lists_packed(tf, tuple(result) if isinstance(result, list) else result)

    wrapped = tf.function(call, autograph=True)
    in_fields = [str(f) for f in tf.nest.flatten(fields)]
    if seed_field is not None:
        in_fields.append(seed_field)
        args = (*args, tf.TensorSpec([2], tf.int64))
    # Traced with the replacements in place either way: unseeded, they call the originals,
    # and note a Keras draw from a generator's state (see `_keras_draw_seed`).
    outer = (_SEEDING.seed, _SEEDING.count, _SEEDING.drawn, _SEEDING.given, _SEEDING.all, _SEEDING.kept,
             _SEEDING.keras, _SEEDING.inline, _SEEDING.where)  # fmt: skip
    _begin_seeding(None)
    _SEEDING.all, _SEEDING.inline, _SEEDING.where = all_random, True, _where(fn)
    try:
        with _stateless(tf):
            concrete = wrapped.get_concrete_function(*args)
        seed, drawn, kept, keras = _given_seed(_SEEDING.given), list(_SEEDING.drawn), _SEEDING.kept, _SEEDING.keras
    finally:
        (_SEEDING.seed, _SEEDING.count, _SEEDING.drawn, _SEEDING.given, _SEEDING.all, _SEEDING.kept,
         _SEEDING.keras, _SEEDING.inline, _SEEDING.where) = outer  # fmt: skip
    out_template, out_values = flatten(concrete.structured_outputs)
    return Traced(
        name=name,
        concrete=concrete,
        in_template=template,
        in_fields=in_fields,
        out_template=out_template,
        out_values=out_values,
        seed_field=seed_field,
        seed=seed,
        drawn=drawn,
        kept_native=kept,
        keras_random=keras,
        fn=fn,
    )


class _Unoptimized(threading.local):
    """This thread's eager call options as they were (``before``), and the same options with
    Grappler's rewrites that change values off (``off``)."""

    before: Any = None
    off: Any = None


_UNOPTIMIZED = _Unoptimized()


@contextlib.contextmanager
def _as_in_tf_data() -> Iterator[None]:
    """Graph calls give the values tf.data's calls of the function give: without Grappler's
    constant folding, which a ``tf.function`` call applies to the graph and tf.data's function
    calls do not, and which changes results in the last bits of a float (a division by a
    constant becomes a multiplication by its inverse). Its other passes stay, as in tf.data:
    the arithmetic optimizer's rewrites (``pow(x, 3)`` as ``x * x * x``, ``log(1 + x)`` as
    ``log1p(x)``, ``!(a <= b)`` as ``a > b``) change values too, and tf.data's calls make
    them. Set for this thread's calls within, then put back."""
    from tensorflow.python.eager import context

    ctx = context.context()
    before = ctx.function_call_options
    if _UNOPTIMIZED.before is not before:
        from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2

        config = config_pb2.ConfigProto.FromString(before.config_proto_serialized)
        rewrites = config.graph_options.rewrite_options
        off = rewriter_config_pb2.RewriterConfig.OFF
        rewrites.constant_folding = off
        _UNOPTIMIZED.before = before
        _UNOPTIMIZED.off = context.FunctionCallOptions(executor_type=before.executor_type, config_proto=config)
    ctx.function_call_options = _UNOPTIMIZED.off
    try:
        yield
    finally:
        ctx.function_call_options = before


def graph_call(traced: Traced, out: Dynamic) -> Callable[[dict[str, Any]], list[tuple[str, Any]]]:
    """The traced graph as a Python map function: one TensorFlow call per element, its
    results checked against the graph's static shapes."""
    concrete = traced.concrete
    shapes = [getattr(t, "shape", None) for _, t in flatten(concrete.structured_outputs)[1]]

    def call(flat: dict[str, Any]) -> list[tuple[str, Any]]:
        with _as_in_tf_data():
            template, pairs = flatten(concrete(*traced.args(flat)))
        out.template = template
        values = [(n, _returned(traced.name, v)) for n, v in pairs]
        for i, ((_, v), shape) in enumerate(zip(values, shapes)):
            _check_shape(traced.name, i, v, shape)
        return values

    call.__name__ = f"{traced.name} (TensorFlow graph)"
    call._stoker_random = traced.random()  # type: ignore[attr-defined]
    return call


def graph_test(traced: Traced) -> Callable[[dict[str, Any]], bool]:
    """A traced predicate as a filter's test: one TensorFlow call per element."""
    concrete = traced.concrete

    def test(flat: dict[str, Any]) -> bool:
        with _as_in_tf_data():
            result = concrete(*traced.args(flat))
        return bool(result.numpy() if hasattr(result, "numpy") else result)

    test.__name__ = f"{traced.name} (TensorFlow graph)"
    test._stoker_random = traced.random()  # type: ignore[attr-defined]
    return test


def scan_call(
    fn: Callable[..., Any],
    initial_state: Any,
    template: Template,
    schema: list[tuple[str, str, list[int | None]]],
    with_output: bool = True,
) -> Callable[..., Any]:
    """``scan``'s function (``reduce``'s, without ``with_output``: it returns the new state
    alone) traced as tf.data traces it: a ``tf.function`` of the state (the signature of
    ``initial_state`` as TensorFlow converts it: a Python int is int32) and the element; where
    the state it returns has other dimensions, traced again with the state's dimensions
    unknown, as tf.data does. Returns the function, called with NumPy values and returning
    them: one TensorFlow call per element, never eager."""
    import tensorflow as tf

    by_name = {n: tf.TensorSpec(shape, _tf_dtype(tf, d)) for n, d, shape in schema}
    element = pack(template, by_name)
    state0 = tf.nest.map_structure(tf.convert_to_tensor, initial_state)

    # As tf.data calls it: the element one argument, a tuple element too.
    def call(state: Any, x: Any) -> Any:
        result = fn(state, x)
        if not with_output:
            return result, ()
        return tuple(result) if isinstance(result, list) else result

    wrapped = tf.function(call, autograph=True)
    for unknown in (False, True):
        signature = tf.nest.map_structure(
            lambda t, unknown=unknown: tf.TensorSpec([None] * t.shape.rank if unknown else t.shape, t.dtype), state0
        )
        concrete = wrapped.get_concrete_function(signature, element)
        out = concrete.structured_outputs
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(f"scan_func must return (new_state, output), got {out!r}")
        tf.nest.assert_same_structure(signature, out[0])
        mismatch = [
            (s, t)
            for s, t in zip(tf.nest.flatten(signature), tf.nest.flatten(out[0]))
            if s.dtype != t.dtype or not s.shape.is_compatible_with(t.shape)
        ]
        if not mismatch:
            break
        if any(s.dtype != t.dtype for s, t in mismatch):
            got = [t.dtype.name for _, t in mismatch]
            raise TypeError(f"scan_func: the new state's dtypes {got} are not the initial state's")

    def step(state: Any, x: Any) -> Any:
        with _as_in_tf_data():
            new_state, output = concrete(state, x)
        if not with_output:
            return tf.nest.map_structure(_numpy, new_state)
        return tf.nest.map_structure(_numpy, new_state), tf.nest.map_structure(_numpy, output)

    step.__name__ = f"{getattr(fn, '__name__', 'scan_fn')} (TensorFlow graph)"
    step._stoker_graph = True  # type: ignore[attr-defined]
    step._stoker_random = unseeded(concrete)  # type: ignore[attr-defined]
    step._stoker_fn = fn  # type: ignore[attr-defined]  # its variables live as long as its graph
    return step


def batch_call(traced: Traced) -> Callable[[dict[str, Any]], list[tuple[str, Any]]] | None:
    """The traced graph as a map function on batches: one TensorFlow call per batch, the
    graph vectorized over its elements (see ``_rest_batched``), handing out what the graph
    hands out for each. Only where every input and output has one shape in every element
    (else None): a batch stacks them."""
    inputs = traced.concrete.inputs[: len(traced.in_fields)]
    outputs = [t for _, t in traced.out_values]
    if not WHOLE_PER_BATCH or not all(_is_tensor(t) and t.shape.is_fully_defined() for t in [*inputs, *outputs]):
        return None
    if not _vectorizable(traced.concrete.graph.get_operations()):
        return None
    concrete = traced.concrete

    def whole(*flat: Any) -> list[Any]:
        return [t for _, t in flatten(concrete(*traced.args(dict(zip(traced.in_fields, flat)))))[1]]

    at: list[tuple[str, str | int]] = [(path, i) for i, (path, _) in enumerate(traced.out_values)]
    return _rest_batched(traced.name, whole, list(traced.in_fields), at, traced, _static_shapes(traced))


def _vectorizable(operations: list[Any]) -> bool:
    """Whether a graph of ``operations`` may run vectorized over a batch as it runs per
    element: none has effects beyond its outputs (a variable's update, a table's insert, a
    ``py_function``, a print), which the vectorizer refuses or repeats, and none is an op
    whose vectorized form computes something else (``_WHOLE_BATCH``), in the graph or in the
    functions it calls (a ``tf.cond`` 's branches, a loop's body). Checks and the stateful
    random ops (drawing for the whole batch at once) may."""
    if not all(not o._is_stateful or o.type == "Assert" or o.type in _STATEFUL_RANDOM for o in operations):
        return False
    if not operations:
        return True
    library = operations[0].graph.as_graph_def().library.function
    called = {n.op for f in library for n in f.node_def}
    return not (_WHOLE_BATCH & ({o.type for o in operations} | called))


# Ops whose vectorized form (pfor's) gives another result than each element's: `tf.strings.format`
# formats the batch as one string; `tf.pad` 's vectorized form pads with 0, not `constant_values`.
_WHOLE_BATCH = frozenset({"StringFormat", "PadV2"})


def element_call(traced: Traced) -> Callable[..., Any]:
    """The traced function as the user's was, called with the element (NumPy values) and
    returning NumPy values: one TensorFlow call per element."""
    import tensorflow as tf

    concrete = traced.concrete

    def call(*args: Any) -> Any:
        with _as_in_tf_data():
            return tf.nest.map_structure(_numpy, concrete(*args))

    call.__name__ = f"{traced.name} (TensorFlow graph)"
    call._stoker_graph = True  # type: ignore[attr-defined]
    call._stoker_random = traced.random()  # type: ignore[attr-defined]
    return call


# ----------------------------------------------------------------------------- datasets made


@dataclass
class _Slot:
    """Where a made dataset's argument is the graph's output ``index``."""

    index: int


class _Made:
    """A dataset that a traced function makes: the constructor it called and the methods it
    called on the result, each with its arguments (tensors among them as :class:`_Slot` s of
    the graph's outputs), to be called for real on each element's values. Only the dataset's
    methods are there: anything else (``element_spec``, a property) ends the trace."""

    def __init__(self, recorder: _Recorder, calls: list[tuple[str, Any, Any]]) -> None:
        self._recorder, self._calls = recorder, calls

    def __getattr__(self, name: str) -> Any:
        method_of_dataset = isinstance(inspect.getattr_static(self._recorder.dataset, name, None), types.FunctionType)
        if name.startswith("_") or not method_of_dataset:
            raise AttributeError(f"{name!r}: not a method of a dataset a traced function makes")

        def method(*args: Any, **kwargs: Any) -> _Made:
            return _Made(self._recorder, [*self._calls, self._recorder.call(name, args, kwargs)])

        return method


# Held while a trace has the dataset's constructors recording: one trace at a time patches them.
_PATCHING = threading.RLock()


class _Recorder:
    """Records the datasets a function makes while it is traced: on the tracing thread the
    constructors of ``dataset`` hand out :class:`_Made` s (other threads, a pipeline already
    running say, get the real ones)."""

    def __init__(self, tf: Any, dataset: type) -> None:
        self.tf, self.dataset = tf, dataset
        self.eager = type(tf.constant(0))
        self.outputs: list[Any] = []
        self.thread = threading.get_ident()
        self.active = False

    def call(self, name: str, args: Any, kwargs: Any) -> tuple[str, Any, Any]:
        return name, self._slots(args), self._slots(kwargs)

    def _symbolic(self, v: Any) -> bool:
        return self.tf.is_tensor(v) and not isinstance(v, self.eager)

    def _holds_symbolic(self, v: Any, depth: int = 0) -> bool:
        """Whether ``v`` holds a tensor of the graph being traced: in a container, or in a
        function's closure or defaults (a function made while tracing, to run later)."""
        if depth > 3:
            return False
        if isinstance(v, _Made):
            return False
        if self._symbolic(v):
            return True
        if isinstance(v, (types.FunctionType, types.MethodType)):
            fn = getattr(v, "__func__", v)
            cells = []
            for c in fn.__closure__ or ():
                with contextlib.suppress(ValueError):  # an empty cell
                    cells.append(c.cell_contents)
            return any(self._holds_symbolic(x, depth + 1) for x in [*cells, *(fn.__defaults__ or ())])
        if isinstance(v, (list, tuple, dict)):
            return any(self._holds_symbolic(x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))
        return False

    def _slots(self, v: Any) -> Any:
        if isinstance(v, _Made):
            return v
        if isinstance(v, self.tf.Tensor):
            self.outputs.append(v)
            return _Slot(len(self.outputs) - 1)
        if self.tf.is_tensor(v):
            raise TypeError(f"a {type(v).__name__} is handed to a dataset (only dense tensors are)")
        if type(v) is list:
            return [self._slots(x) for x in v]
        if type(v) is tuple or is_namedtuple(v):
            return like(v, [self._slots(x) for x in v])
        if type(v) is dict:
            return {k: self._slots(x) for k, x in v.items()}
        if self._holds_symbolic(v):
            # A dict subclass, a function that captured a tensor of the graph:
            # the tensor would be read after the trace, where it has no value.
            raise TypeError(f"a {type(v).__name__} holding a tensor of the traced graph is handed to a dataset")
        return v

    @contextlib.contextmanager
    def constructors(self) -> Iterator[None]:
        """Within: the dataset's constructors (its static and class methods) record."""

        def recording(name: str, original: Any) -> Any:
            def constructor(*args: Any, **kwargs: Any) -> Any:
                if not self.active or threading.get_ident() != self.thread:
                    return original(*args, **kwargs)
                return _Made(self, [self.call(name, args, kwargs)])

            return staticmethod(constructor)

        with _PATCHING:
            patched = {
                n: a
                for n, a in vars(self.dataset).items()
                if not n.startswith("_") and isinstance(a, (staticmethod, classmethod))
            }
            try:
                for n in patched:
                    setattr(self.dataset, n, recording(n, getattr(self.dataset, n)))
                self.active = True
                yield
            finally:
                self.active = False
                for n, a in patched.items():
                    setattr(self.dataset, n, a)


def dataset_call(
    fn: Callable[..., Any], template: Template, schema: list[tuple[str, str, list[int | None]]], dataset: type
) -> Callable[..., Any]:
    """A function that returns a dataset (``flat_map``'s, ``interleave``'s), traced as tf.data
    traces it: its TensorFlow ops become a graph, the datasets it makes from their results are
    recorded. Returns the function, called with the element (NumPy values) as ``fn`` is: one
    TensorFlow call per element, then the recorded dataset made from the values it gave."""
    import tensorflow as tf

    recorder = _Recorder(tf, dataset)
    made: list[_Made] = []

    def record(*a: Any) -> Any:
        recorder.outputs = []  # each trace its own graph's
        result = fn(*a)
        if not isinstance(result, _Made):
            raise TypeError(
                f"the function must return a dataset made by {dataset.__name__}'s constructors, "
                f"got {type(result).__name__}"
            )
        made.append(result)
        return tuple(recorder.outputs)

    by_name = {n: tf.TensorSpec(shape, _tf_dtype(tf, d)) for n, d, shape in schema}
    args = pack(template, by_name)
    wrapped = tf.function(record, autograph=True)
    with recorder.constructors():
        concrete = wrapped.get_concrete_function(*as_args(args))
    recipe = made[-1]

    def fill(v: Any, values: list[Any]) -> Any:
        if isinstance(v, _Slot):
            return values[v.index]
        if isinstance(v, _Made):
            return build(v, values)
        if type(v) is list:
            return [fill(x, values) for x in v]
        if type(v) is tuple or is_namedtuple(v):
            return like(v, [fill(x, values) for x in v])
        if type(v) is dict:
            return {k: fill(x, values) for k, x in v.items()}
        return v

    def build(m: _Made, values: list[Any]) -> Any:
        (name, a, k), *rest = m._calls
        ds = getattr(dataset, name)(*fill(a, values), **fill(k, values))
        for name, a, k in rest:
            ds = getattr(ds, name)(*fill(a, values), **fill(k, values))
        return ds

    def call(*element: Any) -> Any:
        with _as_in_tf_data():
            out = concrete(*element)
        # a scalar as a 0-d array: a tensor, whose dtype a list of them keeps (a NumPy
        # integer scalar converts as a Python int)
        values = [np.asarray(v) if isinstance(v, np.generic) else v for v in (t.numpy() for t in (out or ()))]
        return build(recipe, values)

    name = getattr(fn, "__name__", "dataset_fn")
    call.__name__ = f"{name} (TensorFlow graph)"
    call._stoker_graph = True  # type: ignore[attr-defined]
    call._stoker_random = unseeded(concrete)  # type: ignore[attr-defined]
    call._stoker_fn = fn  # type: ignore[attr-defined]  # its variables live as long as its graph
    (constructor, a, k), *rest = recipe._calls
    if SLICES and constructor == "from_tensor_slices" and not rest and len(a) == 1 and not k and _slicable(
        a[0], concrete.outputs
    ):
        # `from_tensor_slices` of the graph's values, and nothing more: a flat_map of it hands
        # out the rows of those values (see `Dataset._interleave`)
        def slices(*element: Any) -> Any:
            with _as_in_tf_data():
                out = concrete(*element)
            return fill(a[0], [v.numpy() for v in (out or ())])

        slices.__name__ = f"{name} (TensorFlow graph, the tensors it slices)"
        slices._stoker_graph = True  # type: ignore[attr-defined]
        slices._stoker_fn = fn  # type: ignore[attr-defined]
        call._stoker_slices = slices  # type: ignore[attr-defined]
    return call


# A flat_map whose function slices the graph's values runs as a map and an unbatch (off: a
# dataset made per element, for A/B measurements)
SLICES = True


def _slicable(v: Any, outputs: list[Any]) -> bool:
    """Whether ``v`` is one of the graph's ``outputs`` (as a :class:`_Slot`), or tuples and
    dicts of them, whose slices a map and an unbatch hand out as ``from_tensor_slices`` does
    (a list is stacked there, a tuple of components here): each of a dtype stoker holds and
    of rank 1 or more where known, each dict's keys field names. Else the dataset is made per
    element, which raises those errors as ``from_tensor_slices`` does (errors in the code,
    never skipped as bad records)."""
    if isinstance(v, _Slot):
        t = outputs[v.index]
        rank = t.shape.rank
        return (rank is None or rank > 0) and (t.dtype.name in _HELD_DTYPES)
    if type(v) is dict:
        if not all(isinstance(key, str) and key and "/" not in key for key in v):
            return False
        items = list(v.values())
    else:
        items = list(v) if type(v) is tuple or is_namedtuple(v) else []
    return bool(items) and all(_slicable(x, outputs) for x in items)


# The dtypes of TensorFlow's that stoker's fields hold
_HELD_DTYPES = frozenset(
    {"bool", "uint8", "uint16", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "string"}
)


def _lists_packed(tf: Any, value: Any) -> Any:
    """A function's result with the lists inside its tuples and dicts made tensors, as
    tf.data makes them (``return x, [a, b]``: a stacked tensor, not a structure)."""
    if isinstance(value, list):
        return tf.convert_to_tensor(value)
    if isinstance(value, dict):
        return {k: _lists_packed(tf, v) for k, v in value.items()}
    if isinstance(value, tuple):
        return like(value, [_lists_packed(tf, v) for v in value])
    return value


def _python_value(value: Any) -> Any:
    """A constant a function returned, as tf.data makes it a tensor (a Python int is int32; a
    string whole, not as NumPy's fixed-width strings, which drop trailing NULs)."""
    converted = as_tf_converts(value)
    return np.array(converted, dtype=object) if isinstance(converted, (str, bytes)) else np.asarray(converted)


def _check_shape(name: str, component: int, value: Any, shape: Any, batched: bool = False) -> None:
    """``value`` checked against the static ``shape`` the traced graph gives its output (where
    known; after ``set_shape`` too), as tf.data's iterator checks each component: TensorFlow's
    optimizer may drop an op whose output shape it takes as given (a ``Reshape``), and a
    ``py_function`` 's result is what it returns. ``batched``: ``value`` has a batch axis first."""
    dims = getattr(shape, "rank", None) is not None and shape.as_list()
    if dims is False or dims is None:
        return
    got = list(np.shape(value))[1:] if batched else list(np.shape(value))
    if len(got) != len(dims) or any(d is not None and d != g for d, g in zip(dims, got)):
        want = "[" + ",".join("?" if d is None else str(d) for d in dims) + "]"
        raise InvalidArgumentError(
            f"{name}: incompatible shapes at component {component}: expected {want} but got {got} "
            "(the function's static shape, from its ops or set_shape, as tf.data checks it)"
        )


def _returned(name: str, value: Any) -> Any:
    """What a graph call returned, as NumPy values: an error naming the remedy for a sparse
    tensor or a ragged one of rows of other lengths (an element's fields are dense arrays)."""
    kind = type(value).__name__
    if kind == "SparseTensor":
        raise InvalidArgumentError(
            f"{name}: the function returns a tf.SparseTensor (a VarLenFeature's, say); stoker's elements hold "
            "dense arrays: return tf.sparse.to_dense(x), or x.values"
        )
    out = value.numpy() if hasattr(value, "numpy") else _python_value(value)
    if kind == "RaggedTensor" and isinstance(out, np.ndarray) and out.dtype == object and out.size:
        if isinstance(out.flat[0], np.ndarray):
            raise InvalidArgumentError(
                f"{name}: the function returns a tf.RaggedTensor of rows of different lengths; stoker's elements "
                "hold dense arrays: return x.to_tensor() (padded), or x.flat_values with x.row_lengths()"
            )
    return out


# ----------------------------------------------------------------------------- translation


class Untranslatable(Exception):
    """An op of the graph with no native counterpart (the message says which and why)."""


@dataclass
class _Field:
    name: str


@dataclass
class _Lazy:
    """An element-wise expression not computed yet (one ``compute`` for the chain)."""

    expr: Expr
    dtype: str
    # uint8 field x as float32 times or divided by a constant (a `rescale`): (x, op, constant,
    # the tensors of the chain), where the expression is one
    scaled: tuple[str, str, float, list[Any]] | None = None
    # the TensorFlow ops folded into it (for explain())
    steps: list[str] = field(default_factory=list)
    # whether its rescale may overwrite the uint8 field (nothing else reads it)
    in_place: bool = False
    # a bool expression: the precision its comparisons are made in
    within: str | None = None


@dataclass
class _Const:
    value: np.ndarray


@dataclass
class _Centered:
    """``x - mean`` with a per-channel mean: a ``normalize`` once the division comes."""

    field: str
    mean: list[float]


@dataclass
class _Colors:
    """Per-colour matches of an RGB label field, as the one-hot of its colours is written in
    TensorFlow: ``tf.equal(label, rgb)`` (``all`` False: per channel), reduced with
    ``reduce_all(axis=-1)`` (``all`` True), stacked on the last axis (``colors`` several)."""

    field: str
    colors: list[list[int]]
    all: bool


Value = Any  # _Field | _Lazy | _Const | _Centered | _Colors | Bits


@dataclass
class Translation:
    """Native ops equal to a traced function, the structure they hand out, and what became
    what (for ``explain()``)."""

    ops: list[ops.NativeOp | Callable[[dict[str, Any]], list[tuple[str, Any]]]]
    template: Template
    done: list[str] = field(default_factory=list)
    # why the ops after the native ones run in TensorFlow (None: none do)
    rest: str | None = None
    # where a batch follows: the native ops (then the fields the rest reads), and the rest as
    # one TensorFlow call per batch (None: the rest cannot be batched)
    batched: tuple[list[Any], Callable[[dict[str, Any]], list[tuple[str, Any]]]] | None = None
    # the random ops of the part that runs in TensorFlow (see `unseeded`)
    random: list[str] = field(default_factory=list)


_FLOATS = ("float32", "float64")
# dtypes whose values compute() (float32 or float64 arithmetic) holds exactly
_EXACT_IN = {
    "float32": ("bool", "uint8", "int8", "uint16", "int16", "float32"),
    "float64": ("bool", "uint8", "int8", "uint16", "int16", "int32", "uint32", "float32", "float64"),
}

_UNARY: dict[str, Callable[[Any], Any]] = {
    "Neg": lambda x: -x,
    "Abs": abs,
    "Tanh": ops.tanh,  # float32 only (see `_FLOAT32_ONLY`)
    # not exp, log, pow: TensorFlow's (Eigen's) approximations round some values otherwise
    # than stoker's; they stay in TensorFlow
    "Sqrt": ops.sqrt,
    "Square": ops.square,
    "Sign": ops.sign,
    "Floor": ops.floor,
    "Ceil": ops.ceil,
    "Round": round,
    "Relu": lambda x: ops.maximum(x, 0.0),
    "LogicalNot": lambda x: ~x,
}
# float32's tanh is Eigen's rational approximation, as TensorFlow's; float64's is not
_FLOAT32_ONLY = ("Tanh",)
_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "AddV2": lambda a, b: a + b,
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "RealDiv": lambda a, b: a / b,
    "Div": lambda a, b: a / b,
    "Maximum": ops.maximum,
    "Minimum": ops.minimum,
    "Less": lambda a, b: a < b,
    "LessEqual": lambda a, b: a <= b,
    "Greater": lambda a, b: a > b,
    "GreaterEqual": lambda a, b: a >= b,
    "Equal": lambda a, b: a == b,
    "NotEqual": lambda a, b: a != b,
    "LogicalAnd": lambda a, b: a & b,
    "LogicalOr": lambda a, b: a | b,
}
# element-wise ops folded when every input is a constant: those NumPy rounds as TensorFlow
_EXACT_FOLD: dict[str, Callable[..., Any]] = {
    "Neg": np.negative,
    "Abs": np.abs,
    "AddV2": np.add,
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "RealDiv": np.true_divide,
    "Div": np.true_divide,
    "Maximum": np.maximum,
    "Minimum": np.minimum,
    "Sqrt": np.sqrt,
    "Square": np.square,
}
_COMPARISONS = ("Less", "LessEqual", "Greater", "GreaterEqual", "Equal", "NotEqual")
# a comparison's negation, as Grappler's arithmetic optimizer writes a LogicalNot of it
_NEGATED = {"Less": "GreaterEqual", "LessEqual": "Greater", "Greater": "LessEqual", "GreaterEqual": "Less",
            "Equal": "NotEqual", "NotEqual": "Equal"}  # fmt: skip
_PASS = ("Identity", "StopGradient", "Snapshot", "PreventGradient")
# integer arithmetic that unpacks bits from bytes (see Bits), and the ops that move them
_BIT_MATH = ("FloorDiv", "RightShift", "FloorMod", "BitwiseAnd")
_BIT_INDEX = ("Reshape", "StridedSlice", "Slice", "ExpandDims", "Squeeze", "GatherV2", "Transpose")
_BIT_OPS = _BIT_MATH + _BIT_INDEX + ("Cast", "Bitcast", "Mul", "Neg")
# tf.image functions read as one operation: the scope's name, without a `_N` suffix
_SCOPES = (
    "resize",
    "resize_images",
    "resize_image_with_crop_or_pad",
    "random_crop",
    "random_flip_left_right",
    "random_flip_up_down",
    "flip_left_right",
    "flip_up_down",
    *_COLOR_SCOPES,
)


# the field a filter's translated predicate is computed into
KEEP = "_stoker_keep"


class _Translator:
    def __init__(self, traced: Traced, keep_inputs: bool = False) -> None:
        self.traced = traced
        # a predicate (filter): the input fields are kept as they are, beside its result
        self.keep_inputs = keep_inputs
        self.values: dict[Any, Value] = {}
        self.ops: list[ops.NativeOp] = []
        self.done: list[str] = []  # what became what, for explain()
        self.used_names = set(traced.in_fields)
        self.count = 0
        self.pending: set[str] = set()  # the needed ops not translated yet
        self.int32: set[Any] = set()  # int64 features parsed as int32 (read only by casts to it)
        self.returned: set[Any] = set()
        self.constants: dict[str, str] = {}  # outputs that are constants: their fields
        graph = traced.concrete.graph
        self.graph = graph
        for f, t in zip(traced.in_fields, traced.concrete.inputs):
            self.values[t.ref()] = _Field(f)
        # Tensors the function captured: constants where they are (an eager tensor), fed to
        # the TensorFlow part as they are; a variable keeps the whole function in TensorFlow.
        self.captured: dict[Any, Any] = {}
        for t, value in zip(traced.concrete.inputs[len(traced.in_fields) :], traced.concrete.captured_inputs):
            if t.dtype.name == "resource":
                raise Untranslatable(f"it reads a variable ('{t.name}')")
            if not hasattr(value, "numpy"):  # a tensor of another graph (a Keras layer's), no value here
                raise Untranslatable(f"it captures a tensor whose value is not known when it is traced ('{t.name}')")
            self.values[t.ref()] = _Const(np.asarray(value.numpy()))
            self.captured[t.ref()] = value
        self.tf_ops: set[str] = set()  # ops left to TensorFlow
        self.tf_values: set[Any] = set()  # the tensors they compute
        self.why: str | None = None  # why the first of them could not be translated

    # -- values
    def fresh(self) -> str:
        while True:
            self.count += 1
            name = f"_tf{self.count}"
            if name not in self.used_names:
                self.used_names.add(name)
                return name

    def dtype(self, t: Any) -> str:
        return str(t.dtype.name)

    def value(self, t: Any) -> Value:
        v = self.values.get(t.ref())
        if v is None:
            raise Untranslatable(f"'{t.op.name}' ({t.op.type}) is not translated")
        return v

    def materialize(self, t: Any) -> str:
        """The field holding ``t``, computing a pending expression into one."""
        v = self.value(t)
        if isinstance(v, _Field):
            return v.name
        if isinstance(v, _Colors):
            raise Untranslatable(f"'{t.op.name}' ({t.op.type}): colour matches used other than as a float32 one-hot")
        if isinstance(v, Bits):
            name = self.bit_planes(t, v)
            self.values[t.ref()] = _Field(name)
            return name
        if isinstance(v, _Centered):
            name = self.fresh()
            self.emit(ops.normalize(v.field, v.mean, [1.0] * len(v.mean), output=name), "Sub", "normalize")
        elif isinstance(v, _Lazy):
            if v.dtype not in _FLOATS:
                raise Untranslatable(
                    f"'{t.op.name}' ({t.op.type}) gives {v.dtype}; computed natively are float32/float64"
                )
            name = self.fresh()
            steps = ", ".join(v.steps)
            if v.scaled is not None:
                x, how, c, _ = v.scaled
                in_place = v.in_place or (t.ref() not in self.returned and self.free(x))
                out = None if in_place else name
                name = x if in_place else name
                rescale = ops.rescale(x, divisor=c, output=out) if how == "div" else ops.rescale(x, scale=c, output=out)
                self.emit(rescale, steps, "rescale")
            else:
                self.emit(ops.compute(name, v.expr, v.dtype), steps, "compute")
        else:
            raise Untranslatable(
                f"it hands out the constant '{t.op.name}' (a field of the same value in every element)"
            )
        self.values[t.ref()] = _Field(name)
        return name

    def expr(self, t: Any, dtype: str) -> Expr | float:
        """``t`` as an operand of a ``compute`` in ``dtype``."""
        v = self.value(t)
        if isinstance(v, _Const):
            if v.value.ndim != 0:
                raise Untranslatable(f"'{t.op.name}' is a constant array of shape {list(v.value.shape)}")
            if not np.isfinite(v.value):  # a native expression's constants are finite numbers
                raise Untranslatable(f"'{t.op.name}' is the constant {float(v.value)}")
            return float(v.value)
        if isinstance(v, _Lazy):
            if v.dtype != dtype and not (v.dtype == "bool" or dtype == "bool"):
                raise Untranslatable(f"'{t.op.name}' mixes {v.dtype} into {dtype} arithmetic")
            return v.expr
        name = self.materialize(t)
        src = self.dtype(t)
        if src != dtype and src not in _EXACT_IN.get(dtype, ()) and dtype != "bool":
            raise Untranslatable(f"'{t.op.name}' ({src}) read in {dtype} arithmetic")
        return ops.field(name)

    def dest(self, t: Any, op: Any) -> str:
        """Where ``op`` writes its result on ``t``: over ``t``'s field when nothing still to
        run reads that field (fewer fields, and the planner's fusions want ops in place),
        else a new field."""
        name = self.materialize(t)
        return name if self.free(name) else self.fresh()

    def free(self, name: str) -> bool:
        """Whether field ``name`` may be written over: no op still to run (nor the outputs)
        reads a value held in it, or an expression that reads it."""
        for ref, v in self.values.items():
            if isinstance(v, _Field):
                reads = v.name == name
            elif isinstance(v, _Lazy):
                reads = name in _touched(v.expr.node) or (v.scaled is not None and v.scaled[0] == name)
            else:
                reads = isinstance(v, (_Centered, _Colors, Bits)) and v.field == name
            if reads and (ref in self.returned or any(c.name in self.pending for c in ref.deref().consumers())):
                return False
        return True

    def emit(self, op: ops.NativeOp, tf_op: str, native: str) -> None:
        self.ops.append(op)
        self.done.append(f"{tf_op} → {native}")

    # -- the graph
    def run(self) -> Translation:
        outputs = [t for _, t in self.traced.out_values if _is_tensor(t)]
        needed = _needed(outputs)
        self.pending = set(needed)
        self.returned = {t.ref() for t in outputs}
        if self.keep_inputs:
            self.returned |= {t.ref() for t in self.traced.concrete.inputs[: len(self.traced.in_fields)]}
        groups = _groups(self.graph.get_operations())
        done: set[str] = set()
        for op in self.graph.get_operations():
            if op.name not in self.pending or op.name in done or op.type == "Placeholder":
                continue
            scope = groups.get(op.name)
            members = [o for o in self.graph.get_operations() if groups.get(o.name) == scope] if scope else [op]
            names = {o.name for o in members}
            done |= names
            self.pending -= names
            if any(t.ref() in self.tf_values for o in members for t in o.inputs if t.op.name not in names):
                self.to_tensorflow(members, None)
                continue
            try:
                self.scope(scope, members) if scope else self.op(op)
            except Untranslatable as why:
                self.to_tensorflow(members, str(why))
        return self.finish()

    def to_tensorflow(self, members: list[Any], why: str | None) -> None:
        """Leaves ``members`` to TensorFlow: they run in the traced graph after the native ops,
        and so does every op that reads what they compute."""
        for o in members:
            self.tf_ops.add(o.name)
            self.tf_values.update(t.ref() for t in o.outputs)
            self.pending.add(o.name)  # still to read their inputs (see `dest`)
        if why is not None and self.why is None:
            self.why = why

    def op(self, op: Any) -> None:
        t = op.type
        if t == "NoOp":
            return  # it groups checks (their ops are translated, or refused, on their own)
        if not op.outputs:
            raise Untranslatable(f"op '{op.name}' ({t}) has no native counterpart")
        out = op.outputs[0]
        seed = self.traced.seed_field
        if seed is not None and any(getattr(self.values.get(i.ref()), "name", None) == seed for i in op.inputs):
            raise Untranslatable(f"'{op.name}' ({t}) reads the element's seed: random ops run in TensorFlow")
        if t in _PASS:
            self.values[out.ref()] = self.value(op.inputs[0])
        elif t == "Const":
            self.values[out.ref()] = _Const(_const_value(op))
        elif not op._is_stateful and (static := _static(op)) is not None:
            for o, value in zip(op.outputs, static):
                self.values[o.ref()] = _Const(value)  # known when traced (a reshaped default)
        elif t in ("Equal", "All", "Pack") and self.colors(op):
            return
        elif t in _BIT_OPS and self.bits(op):
            return
        elif t == "Cast":
            self.cast(op)
        elif t in _UNARY or t in _BINARY or t in ("Select", "SelectV2"):
            self.elementwise(op)
        else:
            handler = _HANDLERS.get(t)
            if handler is None:
                raise Untranslatable(f"op '{op.name}' ({t}) has no native counterpart")
            handler(self, op)

    def cast(self, op: Any) -> None:
        src, dst = self.dtype(op.inputs[0]), self.dtype(op.outputs[0])
        out = op.outputs[0].ref()
        v = self.value(op.inputs[0])
        if src == dst or (op.inputs[0].ref() in self.int32 and dst == "int32"):
            self.values[out] = v
            return
        if isinstance(v, _Const) and src != "string" and dst != "string":
            self.values[out] = _Const(v.value.astype(dst))
            return
        if isinstance(v, _Colors) and v.all and dst == "float32" and op.inputs[0].shape.rank != 0:
            name = v.field if self.free(v.field) else self.fresh()
            self.emit(
                ops.one_hot_colors(v.field, v.colors, output=name, others="zeros"),
                "Equal, All, Pack per colour, Cast",
                "one_hot_colors",
            )
            self.values[out] = _Field(name)
            return
        if src == "string" or dst in ("string", "bool"):
            raise Untranslatable(f"'{op.name}': Cast from {src} to {dst}")
        if dst in _FLOATS:
            if isinstance(v, _Lazy) and v.dtype == "bool" and v.within not in (None, dst):
                # compared in another precision than the expression it joins: computed first
                self.values[out] = _Lazy(ops.field(self.bool_field(op.inputs[0])), dst, None, [f"Cast(bool→{dst})"])
            elif isinstance(v, _Lazy) and v.dtype == "bool":
                self.values[out] = _Lazy(v.expr, dst, None, v.steps + [f"Cast(bool→{dst})"])
            else:
                # a value compute() reads exactly is read as it is; others are cast natively
                # first, with TensorFlow's rounding
                name = self.materialize(op.inputs[0])
                if src not in _EXACT_IN[dst]:
                    cast = self.fresh()
                    self.ops.append(ops.cast(name, dst, output=cast))
                    name = cast
                scaled = (name, "mul", 1.0, [op.inputs[0]]) if (src, dst) == ("uint8", "float32") else None
                self.values[out] = _Lazy(ops.field(name), dst, scaled, [f"Cast({src}→{dst})"])
            return
        src_field = self.materialize(op.inputs[0])
        name = self.dest(op.inputs[0], op)
        self.emit(ops.cast(src_field, dst, output=name), f"Cast({src}→{dst})", "cast")
        self.values[out] = _Field(name)

    def bits(self, op: Any) -> bool:
        """A step of bit unpacking (see :class:`Bits`): the arithmetic on a uint8 field that
        picks bits, or any step on bits picked; one ``bit_planes`` where they are used."""
        values = [self.values.get(i.ref()) for i in op.inputs]
        at = next((i for i, x in enumerate(values) if isinstance(x, Bits)), None)
        if at is None:
            src = op.inputs[0] if op.inputs else None
            if src is None or not isinstance(values[0], _Field) or src.dtype.name != "uint8":
                return False
            if src.shape.rank in (None, 0):
                return False
            if not (op.type in _BIT_MATH and isinstance(values[1], _Const)) and not (
                op.type in _BIT_INDEX + ("Cast",) and _feeds_bit_math(op.outputs[0], self.returned)
            ):
                return False
            n = _row_bytes(src, src.shape.rank - 1)
            if n is None:  # rows of bytes of a length not known when traced
                return False
            v, at = Bits.of_bytes(values[0].name, src.shape.rank - 1, n), 0
        else:
            found = values[at]
            assert isinstance(found, Bits)
            v = found
        out = op.outputs[0]
        try:
            if op.type in ("Cast", "Bitcast"):
                new = _bits_cast(op, v)
            elif op.type == "Neg":
                if not (v.bit and out.dtype.is_integer and not out.dtype.is_unsigned):
                    raise ValueError("a negation other than of bits as signed integers")
                new = v.negated()
            elif op.type in _BIT_MATH + ("Mul",):
                c = values[1 - at]
                if not isinstance(c, _Const) or (at != 0 and op.type not in ("Mul", "BitwiseAnd")):
                    raise ValueError("by a tensor that is not a constant")
                signed = out.dtype.is_integer and not out.dtype.is_unsigned
                new = v.arithmetic(op.type, c.value, signed)
            else:
                new = v.reindexed(_index_fn(self, op, v.lead), out.shape.rank, op.type)
        except ValueError as why:
            raise Untranslatable(f"'{op.name}' ({op.type}): {why}") from None
        self.values[out.ref()] = new
        return True

    def bit_planes(self, t: Any, v: Bits) -> str:
        """The field holding the bits ``t``: one ``bit_planes`` from the packed bytes."""
        dtype = self.dtype(t)
        if not (t.dtype.is_integer or t.dtype.is_floating):
            raise Untranslatable(f"'{t.op.name}' ({t.op.type}): bits as {dtype}")
        try:
            start, shape, indices, signs = v.planes()
        except ValueError as why:
            raise Untranslatable(f"'{t.op.name}' ({t.op.type}): {why}") from None
        name = self.fresh()
        steps = ", ".join(_unique(v.steps))
        planes = ops.bit_planes(v.field, start, shape, indices, signs, dtype=dtype, output=name, row_bytes=v.n)
        self.emit(planes, steps, "bit_planes")
        if v.pos.ndim == 0:  # one bit per row: bit_planes gives it an axis of 1
            if v.lead > 1 or dtype not in _EXACT_IN["float64"]:
                raise Untranslatable(f"'{t.op.name}' ({t.op.type}): one bit per row as {dtype}")
            one = self.fresh()
            self.ops.append(ops.compute(one, ops.field(name, shape=[-1] * v.lead), dtype))
            name = one
        return name

    def colors(self, op: Any) -> bool:
        """The steps of a per-colour one-hot (see :class:`_Colors`), kept for the cast that
        makes it float32: then one ``one_hot_colors``."""
        t = op.type
        values = [self.values.get(i.ref()) for i in op.inputs]
        out = op.outputs[0].ref()
        if t == "Equal":
            a, b = values
            if isinstance(a, _Const):
                a, b = b, a
            src = op.inputs[0] if isinstance(values[0], _Field) else op.inputs[1]
            rgb = b.value if isinstance(b, _Const) else None
            if (
                isinstance(a, _Field)
                and rgb is not None
                and rgb.shape == (3,)
                and src.dtype.name == "uint8"
                and src.shape.rank is not None
                and src.shape[-1] == 3
            ):
                self.values[out] = _Colors(a.name, [[int(v) for v in rgb]], False)
                return True
        elif t == "All" and isinstance(values[0], _Colors) and not values[0].all:
            axis = (
                [int(v) for v in np.ravel(self.values[op.inputs[1].ref()].value)]
                if isinstance(values[1], _Const)
                else []
            )
            rank = op.inputs[0].shape.rank
            if not _attr(op, "keep_dims", False) and rank is not None and axis in ([-1], [rank - 1]):
                self.values[out] = _Colors(values[0].field, values[0].colors, True)
                return True
        elif t == "Pack":
            matches = [v for v in values if isinstance(v, _Colors) and v.all]
            rank = op.outputs[0].shape.rank
            fields = {v.field for v in matches}
            if matches and len(matches) == len(values) and len(fields) == 1 and rank is not None:
                if int(_attr(op, "axis", 0)) in (-1, rank - 1):
                    self.values[out] = _Colors(fields.pop(), [c for v in matches for c in v.colors], True)
                    return True
        return False

    def consumers(self, op: Any) -> int:
        """The ops that read ``op`` 's output or that of an op Grappler merges with it (the same
        op on the same inputs, constants of one value counting as the same)."""
        from tensorflow.python.framework import tensor_util

        def same(a: Any, b: Any) -> bool:
            if a is b:
                return True
            if a.op.type != "Const" or b.op.type != "Const" or a.dtype != b.dtype:
                return False
            x, y = (tensor_util.MakeNdarray(t.op.get_attr("value")) for t in (a, b))
            return x.shape == y.shape and np.array_equal(x, y)

        twins = [
            o for o in self.graph.get_operations()
            if o.type == op.type and len(o.inputs) == len(op.inputs) and all(map(same, o.inputs, op.inputs))
        ]  # fmt: skip
        return sum(len(o.outputs[0].consumers()) for o in twins)

    def elementwise(self, op: Any) -> None:
        compared = op.inputs[0].op if op.type == "LogicalNot" else None
        if compared is not None and compared.type in _NEGATED and self.consumers(compared) == 1:
            # tf.data's Grappler writes `!(a <= b)` as `a > b` (they differ where a or b is
            # NaN): the comparison that the function's value is
            negated = _NEGATED[compared.type]
            op = types.SimpleNamespace(type=negated, name=op.name, inputs=compared.inputs, outputs=op.outputs)
        t = op.type
        dtype = self.dtype(op.outputs[0])
        operand = dtype
        if t in _COMPARISONS:
            operand = self.dtype(op.inputs[0])
        if t in _COMPARISONS and operand in _EXACT_IN["float64"] and operand not in _FLOATS + ("bool",):
            operand = "float64"  # integers compared exactly
        if operand == "bool":
            # one compute runs in one precision: comparisons made in float32 are computed
            # first where they meet float64 ones
            lazies = [(i, v) for i in op.inputs if isinstance(v := self.values.get(i.ref()), _Lazy)]
            if len({v.within for _, v in lazies if v.within}) > 1:
                for i, v in lazies:
                    if v.within == "float32":
                        self.bool_field(i)
        if operand not in _FLOATS and operand != "bool":
            raise Untranslatable(f"'{op.name}' ({t}) on {operand}: only float arithmetic is translated")
        if t in _FLOAT32_ONLY and operand != "float32":
            raise Untranslatable(f"'{op.name}' ({t}) on {operand}: rounds as TensorFlow in float32 only")
        if t in ("Sub", "RealDiv", "Div") and self.per_channel(op):
            return
        if t in _EXACT_FOLD and all(isinstance(self.values.get(i.ref()), _Const) for i in op.inputs):
            # arithmetic of constants (`(1 - a) / (b - 1)`), in the op's dtype as TensorFlow
            # rounds it (IEEE operations only: NumPy's tanh or exp may differ in the last bit)
            args = [self.values[i.ref()].value.astype(operand) for i in op.inputs]
            with np.errstate(all="ignore"):
                self.values[op.outputs[0].ref()] = _Const(np.asarray(_EXACT_FOLD[t](*args)).astype(dtype))
            return
        e: Any
        if t in _UNARY:
            e = _UNARY[t](self.expr(op.inputs[0], operand))
        elif t in _BINARY:
            e = _BINARY[t](self.expr(op.inputs[0], operand), self.expr(op.inputs[1], operand))
        else:
            c = self.values.get(op.inputs[0].ref())
            if isinstance(c, _Lazy) and c.within not in (None, operand):
                self.bool_field(op.inputs[0])  # compared in another precision: computed first
            cond = self.expr(op.inputs[0], "bool")
            e = ops.where(cond, self.expr(op.inputs[1], operand), self.expr(op.inputs[2], operand))
        if not isinstance(e, Expr):
            raise Untranslatable(f"'{op.name}' ({t}) of constants only")
        steps = [s for i in op.inputs for s in getattr(self.values.get(i.ref()), "steps", [])]
        within = None
        if dtype == "bool":
            inner = [getattr(self.values.get(i.ref()), "within", None) for i in op.inputs]
            within = operand if operand != "bool" else next((w for w in ("float64", "float32") if w in inner), None)
        self.values[op.outputs[0].ref()] = _Lazy(e, dtype, self.scaled(op), _unique(steps + [t]), within=within)

    def scaled(self, op: Any) -> tuple[str, str, float, list[Any]] | None:
        """A cast uint8 field times or divided by a scalar constant: a ``rescale``."""
        if op.type not in ("Mul", "RealDiv", "Div") or len(op.inputs) != 2:
            return None
        a, b = (self.values.get(i.ref()) for i in op.inputs)
        if op.type == "Mul" and isinstance(a, _Const):
            a, b = b, a
        if not (isinstance(a, _Lazy) and a.scaled is not None and a.scaled[1:3] == ("mul", 1.0)):
            return None
        if not (isinstance(b, _Const) and b.value.ndim == 0):
            return None
        x, _, _, chain = a.scaled
        lazy = op.inputs[0] if isinstance(self.values.get(op.inputs[0].ref()), _Lazy) else op.inputs[1]
        return (x, "div" if op.type != "Mul" else "mul", float(b.value), chain + [lazy])

    def per_channel(self, op: Any) -> bool:
        """``x - mean`` and ``(x - mean) / std`` with per-channel constants: ``normalize``."""
        a, b = (self.values.get(i.ref()) for i in op.inputs)
        if not isinstance(b, _Const) or b.value.ndim == 0 or self.dtype(op.outputs[0]) != "float32":
            return False
        if op.inputs[0].shape.rank is not None and b.value.ndim > op.inputs[0].shape.rank:
            return False  # the constant's leading axes are the result's too (Keras's `Normalization`)
        channels = b.value.reshape(-1)
        if b.value.shape[-1] != channels.size or op.inputs[0].shape.rank in (None, 0):
            return False
        if op.inputs[0].shape[-1] != channels.size:
            return False
        out = op.outputs[0].ref()
        if op.type == "Sub" and not isinstance(a, _Centered):
            self.values[out] = _Centered(self.materialize(op.inputs[0]), [float(c) for c in channels])
            return True
        if op.type in ("RealDiv", "Div"):
            src, mean = (
                (a.field, a.mean)
                if isinstance(a, _Centered)
                else (self.materialize(op.inputs[0]), [0.0] * channels.size)
            )
            name = src if self.free(src) else self.fresh()
            self.emit(
                ops.normalize(src, mean, [float(c) for c in channels], output=name),
                "Sub/RealDiv per channel",
                "normalize",
            )
            self.values[out] = _Field(name)
            return True
        return False

    def scope(self, scope: str, members: list[Any]) -> None:
        names = {o.name for o in members}
        inputs = {t.ref(): t for o in members for t in o.inputs if t.op.name not in names and t.op.type != "Const"}
        outputs = [t for o in members for t in o.outputs if _used_outside(t, names, self.traced)]
        if len(inputs) != 1 or len(outputs) != 1:
            raise Untranslatable(f"'{scope}' reads {len(inputs)} tensors and hands out {len(outputs)}")
        src = next(iter(inputs.values()))
        out = outputs[0]
        kind = re.sub(r"_\d+$", "", scope)
        if kind in ("resize", "resize_images"):
            self.resize(scope, members, src, out)
            return
        if src.shape.rank != 3:
            raise Untranslatable(f"'{scope}' on a tensor of rank {src.shape.rank} (natively: one image [H, W, C])")
        if kind.startswith("random_") and not any(o.type in ("RandomUniform", "RandomUniformInt") for o in members):
            # `tf.image.stateless_random_crop` (in a scope of that name), or one seeded for the
            # element: its draws follow the seed it was given, which the native op's do not
            raise Untranslatable(f"'{scope}' draws from the seed it is given (stateless): in TensorFlow")
        color = _color_range(scope, kind, members, src, out) if kind in _COLOR_SCOPES else None
        v = self.value(src)
        if kind == "resize_image_with_crop_or_pad" and isinstance(v, _Lazy) and self.crop_first(v, src, names):
            return
        field_in = self.materialize(src)
        name = self.dest(src, members[0])
        if kind == "resize_image_with_crop_or_pad":
            h, w = out.shape[0], out.shape[1]
            if h is None or w is None:
                raise Untranslatable(f"'{scope}': its size is not a constant")
            self.emit(
                ops.resize_with_crop_or_pad(field_in, h, w, output=name),
                "tf.image.resize_with_crop_or_pad",
                "resize_with_crop_or_pad",
            )
        elif kind == "random_crop":
            h, w, c = (out.shape[i] for i in range(3))
            if h is None or w is None or c is None or c != src.shape[2]:
                raise Untranslatable(f"'{scope}': a crop of the channels, or of a size not constant")
            self.emit(
                ops.random_crop(field_in, (h, w), seed=_seed_of(members), output=name),
                "tf.image.random_crop",
                "random_crop (stoker's draws)",
            )
        elif color is not None:
            what = _COLOR_SCOPES[kind][1]
            jitter = ops.color_jitter(field_in, seed=_seed_of(members), output=name, **{what: color})
            self.emit(jitter, f"tf.image.{kind}", f"color_jitter({what}) (stoker's draws)")
        elif kind.startswith("random_"):
            seed = _seed_of(members)
            flip = ops.random_flip_left_right if kind == "random_flip_left_right" else ops.random_flip_up_down
            self.emit(flip(field_in, seed=seed, output=name), f"tf.image.{kind}", f"{kind} (stoker's draws)")
        else:
            flip = ops.random_flip_left_right if kind == "flip_left_right" else ops.random_flip_up_down
            self.emit(flip(field_in, seed=0, probability=1.0, output=name), f"tf.image.{kind}", "flip")
        self.values[out.ref()] = _Field(name)

    def resize(self, scope: str, members: list[Any], src: Any, out: Any) -> None:
        """``tf.image.resize`` (and ``tf.compat.v1.image.resize``) as one ``resize_bilinear``,
        where its op is ``ResizeBilinear`` (bilinear without antialias) on uint8 or float32."""
        kinds = sorted({o.type for o in members} - {"Const", "ExpandDims", "Squeeze", "Identity"})
        if kinds != ["ResizeBilinear"]:
            raise Untranslatable(
                f"'{scope}': {', '.join(kinds)} (natively: ResizeBilinear, bilinear without antialias)"
            )
        resizes = [o for o in members if o.type == "ResizeBilinear"]
        op = resizes[0]
        squeezed = out.op.type == "Squeeze" and out.op.inputs[0].op is op
        if len(resizes) != 1 or not (out.op is op or squeezed):
            raise Untranslatable(f"'{scope}': a scope of more than one resize")
        if src.dtype.name not in ("uint8", "float32") or src.shape.rank not in (3, 4):
            raise Untranslatable(f"'{scope}': a resize of {src.dtype.name} of rank {src.shape.rank}")
        rank = out.shape.rank
        h, w = (out.shape[rank - 3], out.shape[rank - 2]) if rank in (3, 4) else (None, None)
        if h is None or w is None or out.dtype.name != "float32":
            raise Untranslatable(f"'{scope}': a size not known when traced")
        field_in = self.materialize(src)
        name = self.fresh()
        corners, half = bool(_attr(op, "align_corners", False)), bool(_attr(op, "half_pixel_centers", False))
        self.emit(
            ops.resize_bilinear(field_in, (h, w), align_corners=corners, half_pixel_centers=half, output=name),
            "tf.image.resize",
            "resize_bilinear",
        )
        self.values[out.ref()] = _Field(name)

    def crop_first(self, v: _Lazy, src: Any, scope: set[str]) -> bool:
        """Crops or pads a rescaled uint8 image before its rescale (the same result: padding
        is 0 either way), which the planner then fuses into the decode, where nothing else
        reads the image before the crop."""
        if v.scaled is None or not self.free(v.scaled[0]):
            return False
        x, _, _, chain = v.scaled
        tensors = chain + [src]
        inside = {t.op.name for t in tensors[1:]} | scope
        if any(c.name not in inside for t in tensors for c in t.consumers()):
            return False
        out = next(
            t
            for o in self.graph.get_operations()
            if o.name in scope
            for t in o.outputs
            if _used_outside(t, scope, self.traced)
        )
        h, w = out.shape[0], out.shape[1]
        if h is None or w is None:
            return False
        self.emit(
            ops.resize_with_crop_or_pad(x, h, w),
            "tf.image.resize_with_crop_or_pad",
            "resize_with_crop_or_pad (before the rescale)",
        )
        self.values[out.ref()] = _Lazy(v.expr, v.dtype, v.scaled, v.steps, in_place=True)
        return True

    def finish(self) -> Translation:
        # Constants handed out (a label, `return image, 1`): a field of the same value in
        # every element, as tf.data makes them tensors (a Python int is int32).
        self.constants = {}
        for path, t in self.traced.out_values:
            if not _is_tensor(t):
                value = _python_value(t)
                name = self.constant_field(value)
                if name is None:
                    raise Untranslatable(f"it hands out the constant {t!r}")
                self.constants[path] = name
            elif isinstance(self.values.get(t.ref()), _Const):
                name = self.constant_field(self.values[t.ref()].value.astype(t.dtype.as_numpy_dtype))
                if name is None:
                    self.to_tensorflow([t.op], f"it hands out the constant '{t.op.name}'")
                else:
                    self.values[t.ref()] = _Field(name)
        for _, t in self.traced.out_values:
            if _is_tensor(t) and isinstance(self.values.get(t.ref()), Bits) and t.ref() not in self.tf_values:
                try:
                    self.materialize(t)
                except Untranslatable as why:
                    self.to_tensorflow([t.op], str(why))
        if self.tf_ops:
            return self.finish_in_tensorflow()
        if self.keep_inputs:
            ((path, t),) = self.traced.out_values
            name = self.constants.get(path) or self.bool_field(t)
            self.ops.append(ops.select(_unique([*self.traced.in_fields, name])))
            return Translation(list(self.ops), name, self.done)
        by_path: dict[str, str] = {}
        taken: set[str] = set()
        for path, t in self.traced.out_values:
            name = self.constants.get(path) or self.materialize(t)
            if name in taken:
                raise Untranslatable(f"the function hands out '{t.name}' twice")
            taken.add(name)
            by_path[path] = name
        for path, name in list(by_path.items()):
            if name.startswith("_tf") and path not in by_path.values() and self.free_after(path, name):
                for op in self.ops:
                    op.spec = _renamed(op.spec, {name: path})
                by_path[path] = path
        fields = [by_path[p] for p, _ in self.traced.out_values]
        self.ops.append(ops.select(fields))
        return Translation(list(self.ops), _retemplate(self.traced.out_template, by_path), self.done)

    def finish_in_tensorflow(self) -> Translation:
        """The native ops, then one op that runs the rest of the graph in TensorFlow: from
        the tensors the native ops computed (and the captured ones) to the outputs that
        TensorFlow computes; the outputs computed natively pass through."""
        feeds = self.feeds()
        if not self.ops:
            raise Untranslatable(self.why or "no op of it is translated")
        fed: list[tuple[Any, str | Any]] = []  # (tensor, its field or its captured value)
        for ref, t in feeds.items():
            if ref in self.captured:
                fed.append((t, self.captured[ref]))
            elif isinstance(self.values.get(ref), _Const):
                fed.append((t, self.values[ref].value))
            else:
                fed.append((t, self.materialize(t)))
        outputs: list[tuple[str, str | int]] = []  # (path, native field or index of a fetch)
        fetches: list[Any] = []
        for path, t in self.traced.out_values:
            if self.keep_inputs:
                path = KEEP
            if path in self.constants:
                outputs.append((path, self.constants[path]))
            elif t.ref() in self.tf_values:
                outputs.append((path, len(fetches)))
                fetches.append(t)
            else:
                outputs.append((path, self.bool_field(t) if self.keep_inputs else self.materialize(t)))
        if self.keep_inputs:
            outputs += [(f, f) for f in self.traced.in_fields if f != KEEP]
        checks = [o for o in self.graph.get_operations() if o.name in self.tf_ops and not o.outputs]
        pruned = _prune(self.traced.concrete, self.tf_ops, [t for t, _ in fed], fetches, checks)
        shapes = {} if self.keep_inputs else _static_shapes(self.traced)
        rest = _rest(self.traced.name, pruned, [v for _, v in fed], outputs, shapes, self.traced)
        template = KEEP if self.keep_inputs else self.traced.out_template
        batched = None
        fields = [v for _, v in fed if isinstance(v, str)]
        rest_ops = [o for o in self.graph.get_operations() if o.name in self.tf_ops]
        fixed = all(t.shape.is_fully_defined() for t, v in fed if isinstance(v, str))
        if fields and fixed and not self.keep_inputs and _vectorizable(rest_ops):
            # the rest's inputs have one shape in every element: batched, then the rest runs
            # once per batch (vectorized_map)
            needed = _unique(fields + [v for _, v in outputs if isinstance(v, str)])
            batched = (
                [*self.ops, ops.select(needed)],
                _rest_batched(self.traced.name, pruned, [v for _, v in fed], outputs, self.traced, shapes),
            )
        random = unseeded(self.traced.concrete, self.tf_ops) + self.traced.keras()
        return Translation([*self.ops, rest], template, self.done, self.why, batched, random)

    def bool_field(self, t: Any) -> str:
        """The field holding the truth value ``t`` (a filter's predicate): a comparison is
        computed as 0 or 1 in the precision it compares in."""
        v = self.value(t)
        if isinstance(v, _Lazy) and v.dtype == "bool":
            name = self.fresh()
            self.emit(ops.compute(name, v.expr, v.within or "float32"), ", ".join(v.steps), "compute")
            self.values[t.ref()] = _Field(name)
            return name
        return self.materialize(t)

    def feeds(self) -> dict[Any, Any]:
        """The tensors the TensorFlow part reads from the native part. Bits that no
        ``bit_planes`` gives are not fed: the ops that picked them run in TensorFlow too."""
        while True:
            feeds: dict[Any, Any] = {}
            for o in self.graph.get_operations():
                if o.name not in self.tf_ops:
                    continue
                for t in o.inputs:
                    if t.ref() not in self.tf_values and t.op.type != "Const" and t.ref() not in feeds:
                        feeds[t.ref()] = t
            stuck = []
            for ref, t in feeds.items():
                if isinstance(self.values.get(ref), Bits):
                    try:
                        self.materialize(t)
                    except Untranslatable:
                        stuck.append(t.op)
            if not stuck:
                return feeds
            self.to_tensorflow(stuck, None)

    def constant_field(self, value: np.ndarray) -> str | None:
        """A new field holding the scalar ``value`` in every element, where ``compute`` holds
        it exactly; else None."""
        if value.ndim or value.dtype.kind not in "biuf" or (value.dtype.kind in "iu" and abs(int(value)) > 2**53):
            return None
        name = self.fresh()
        self.emit(ops.compute(name, float(value), value.dtype.name), f"the constant {value.item()!r}", "compute")
        return name

    def free_after(self, path: str, name: str) -> bool:
        """Whether field ``name`` can be called ``path``: no op after the one that writes
        ``name`` reads or writes a field ``path``."""
        writer = max(i for i, op in enumerate(self.ops) if name in _touched(op.spec))
        return all(path not in _touched(op.spec) for op in self.ops[writer + 1 :])


def _touched(spec: Any) -> set[str]:
    """The field names an op spec reads or writes."""
    out: set[str] = set()
    if isinstance(spec, dict):
        for k, v in spec.items():
            if k in ("field", "output", "key", "box_output") and isinstance(v, str):
                out.add(v)
            elif k == "name" and spec.get("e") == "field" or k == "name" and "kind" in spec:
                out.add(str(v))
            elif k == "fields" and isinstance(v, list):
                out.update(str(f) for f in v)
            else:
                out |= _touched(v)
    elif isinstance(spec, list):
        for v in spec:
            out |= _touched(v)
    return out


def _prune(concrete: Any, keep: set[str], feeds: list[Any], fetches: list[Any], checks: list[Any]) -> Any:
    """The ops ``keep`` of ``concrete``'s graph as a function of ``feeds`` (the tensors the
    native ops computed) to ``fetches``, running ``checks`` too. Made from the graph's
    definition: the kept ops, the constants, a placeholder per feed, and the control edges
    between kept ops only (TensorFlow orders a function's stateful ops by control edges, which
    would otherwise reach back to ops that now run natively)."""
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2, node_def_pb2

    whole = concrete.graph.as_graph_def()
    fed = {_tensor_name(t): f"stoker_feed_{i}" for i, t in enumerate(feeds)}
    part = graph_pb2.GraphDef()
    part.versions.CopyFrom(whole.versions)
    part.library.CopyFrom(whole.library)
    for node in whole.node:
        if node.name in keep:
            inputs = [fed.get(_tensor_name(i), i) for i in node.input if not i.startswith("^") or i[1:] in keep]
            del node.input[:]
            node.input.extend(inputs)
            part.node.append(node)
        elif node.op == "Const":
            part.node.append(node)
    for t in feeds:
        ph = node_def_pb2.NodeDef(name=fed[_tensor_name(t)], op="Placeholder")
        ph.attr["dtype"].type = t.dtype.as_datatype_enum
        ph.attr["shape"].shape.CopyFrom(t.shape.as_proto())
        part.node.append(ph)
    names = [t.name for t in fetches] + [o.name for o in checks]

    def body(*args: Any) -> Any:
        found = tf.graph_util.import_graph_def(
            part, input_map={f"{fed[_tensor_name(t)]}:0": a for t, a in zip(feeds, args)}, return_elements=names
        )
        with tf.control_dependencies(found[len(fetches) :]):
            return [tf.identity(t) for t in found[: len(fetches)]] or tf.constant(0)

    return tf.compat.v1.wrap_function(body, [tf.TensorSpec(t.shape, t.dtype) for t in feeds])


def _tensor_name(t: Any) -> str:
    """A tensor's name as a graph definition's inputs spell it (``op`` for ``op:0``)."""
    name = t if isinstance(t, str) else t.name
    return name[:-2] if name.endswith(":0") else name


def _static_shapes(traced: Traced) -> dict[str, Any]:
    """The static shape the traced graph gives each output, by its path."""
    return {path: t.shape for path, t in traced.out_values if _is_tensor(t)}


def _rest(
    name: str,
    pruned: Any,
    fed: list[Any],
    outputs: list[tuple[str, str | int]],
    shapes: dict[str, Any],
    traced: Traced,
) -> Callable[[dict[str, Any]], list[tuple[str, Any]]]:
    """The map function that runs the TensorFlow part of a partly translated function (of
    ``traced``, kept with it: see ``Traced.fn``); ``shapes``: the static shape of each output
    by its path, which every output is checked against (a native one too)."""
    import tensorflow as tf

    constants = {i: tf.constant(v) for i, v in enumerate(fed) if not isinstance(v, str)}

    def call(flat: dict[str, Any]) -> list[tuple[str, Any]]:
        args = [constants[i] if i in constants else tf.convert_to_tensor(flat[v]) for i, v in enumerate(fed)]
        with _as_in_tf_data():
            results = pruned(*args)
        results = results if isinstance(results, (list, tuple)) else [results]
        values = [(p, results[v].numpy() if isinstance(v, int) else flat[v]) for p, v in outputs]
        for c, (p, value) in enumerate(values):
            if p in shapes:
                _check_shape(name, c, value, shapes[p])
        return values

    call.__name__ = f"{name} (TensorFlow graph, rest)"
    call._stoker_traced = traced  # type: ignore[attr-defined]
    return call


def _rest_batched(
    name: str,
    pruned: Any,
    fed: list[Any],
    outputs: list[tuple[str, str | int]],
    traced: Traced,
    shapes: dict[str, Any] | None = None,
) -> Callable[[dict[str, Any]], list[tuple[str, Any]]]:
    """The TensorFlow part of a partly translated function (of ``traced``, kept with it: see
    ``Traced.fn``) as one call per batch: its graph vectorized over the batch
    (``tf.vectorized_map``, a loop in the graph where an op has no vectorized form)."""
    import tensorflow as tf

    constants = {i: tf.constant(v) for i, v in enumerate(fed) if not isinstance(v, str)}
    fields = [v for v in fed if isinstance(v, str)]

    def one(elements: Any) -> Any:
        it = iter(elements)
        results = pruned(*[constants[i] if i in constants else next(it) for i in range(len(fed))])
        return tuple(results) if isinstance(results, (list, tuple)) else (results,)

    run = tf.function(
        lambda *batch: tf.vectorized_map(one, tuple(batch), fallback_to_while_loop=True), reduce_retracing=True
    )

    # The vectorized graph failed on a batch whose every row ran alone (an op whose
    # vectorized form cannot hold a row's values, as `tf.unique`'s of another length in each
    # row): the batches run row by row from then on.
    by_row = threading.Event()

    def call(flat: dict[str, Any]) -> list[tuple[str, Any]]:
        batch = [tf.convert_to_tensor(flat[v]) for v in fields]
        results: Any = None
        if not by_row.is_set():
            try:
                with _as_in_tf_data():
                    results = run(*batch)
            except tf.errors.OpError as error:
                results = _by_row(tf, one, batch, error)
                by_row.set()
        else:
            results = _by_row(tf, one, batch, None)
        values = [(p, _numpy(results[v]) if isinstance(v, int) else flat[v]) for p, v in outputs]
        for c, (p, value) in enumerate(values):
            if shapes and p in shapes:
                _check_shape(name, c, value, shapes[p], batched=True)
        return values

    call.__name__ = f"{name} (TensorFlow graph, rest, per batch)"
    call._stoker_traced = traced  # type: ignore[attr-defined]
    return call


def _by_row(tf: Any, one: Callable[[Any], Any], batch: list[Any], error: Exception | None) -> tuple[Any, ...]:
    """``one`` (the function of one element) run on each row of ``batch``, its results
    stacked, where the per-batch call failed with ``error`` (or no longer runs). A row that
    fails alone raises its own error, noting the row: the vectorized graph's error names a
    node of its loop, not the element."""
    rows = int(batch[0].shape[0]) if batch else 0
    results = []
    for r in range(rows):
        try:
            with _as_in_tf_data():
                results.append(one(tuple(t[r] for t in batch)))
        except tf.errors.OpError as e:
            if hasattr(e, "add_note"):
                alone = "the function runs once per batch, and this is the error of that row run alone"
                e.add_note(f"(stoker: row {r} of the batch of {rows}; {alone})")
            raise e from error
    if not results:
        if error is not None:
            raise error
        return ()
    return tuple(_stacked([_numpy(row[k]) for row in results]) for k in range(len(results[0])))


def _stacked(rows: list[Any]) -> Any:
    """Rows stacked into one array; strings as objects (NumPy's fixed-width strings drop
    trailing NUL bytes)."""
    if rows and isinstance(rows[0], (bytes, str)):
        out = np.empty(len(rows), dtype=object)
        out[:] = rows
        return out
    return np.stack(rows)


def _numpy(v: Any) -> Any:
    """A value a graph call returned as NumPy's (a Python constant as tf.data makes it)."""
    return v.numpy() if hasattr(v, "numpy") else _python_value(v)


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _retemplate(template: Template, by_path: dict[str, str]) -> Template:
    if isinstance(template, str):
        return by_path[template]
    if isinstance(template, dict):
        return {k: _retemplate(v, by_path) for k, v in template.items()}
    return like(template, [_retemplate(v, by_path) for v in template])


def _renamed(spec: Any, renames: dict[str, str]) -> Any:
    if isinstance(spec, dict):
        return {k: _renamed(v, renames) for k, v in spec.items()}
    if isinstance(spec, list):
        return [_renamed(v, renames) for v in spec]
    if isinstance(spec, str):
        return renames.get(spec, spec)
    return spec


def _is_tensor(v: Any) -> bool:
    return hasattr(v, "op") and hasattr(v, "ref")


def _needed(outputs: list[Any]) -> set[str]:
    """The ops the outputs depend on, through data and control inputs."""
    seen: set[str] = set()
    stack = [t.op for t in outputs]
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return seen


def _groups(operations: list[Any]) -> dict[str, str]:
    """Op name → the tf.image scope it belongs to, for the scopes read as one operation."""
    out = {}
    for op in operations:
        top = op.name.split("/")[0]
        if re.sub(r"_\d+$", "", top) in _SCOPES:
            out[op.name] = top
    return out


def _used_outside(t: Any, names: set[str], traced: Traced) -> bool:
    if any(c.name not in names for c in t.consumers()):
        return True
    return any(_is_tensor(v) and v.ref() == t.ref() for _, v in traced.out_values)


def _const_value(op: Any) -> np.ndarray:
    from tensorflow.python.framework import tensor_util

    return np.asarray(tensor_util.MakeNdarray(op.get_attr("value")))


def _static(op: Any) -> list[np.ndarray] | None:
    """The outputs' values where TensorFlow knows them from the graph alone."""
    import tensorflow as tf

    values = [tf.get_static_value(o) for o in op.outputs]
    return None if any(v is None for v in values) else [np.asarray(v) for v in values]


def _color_range(scope: str, kind: str, members: list[Any], src: Any, out: Any) -> tuple[float, float]:
    """The range a tf.image random colour function (``kind``, in ``scope``) draws its factor
    from: its ``random_uniform`` 's constant bounds. Only where it is that draw of a scalar
    and the adjustment of a float32 image (else another input, a conversion of the image's
    dtype, or a hue or saturation of other than RGB: ``Untranslatable``)."""
    adjust = _COLOR_SCOPES[kind][0]
    kinds = {o.type for o in members}
    consts = [o for o in members if o.type == "Const" and "/random_uniform" in o.name]
    bounds = {o.name.split("/")[-1]: _const_value(o) for o in consts}
    draws = [o for o in members if o.type == "RandomUniform"]
    rgb = kind in ("random_saturation", "random_hue")
    if (
        not kinds <= {"Const", "RandomUniform", "Sub", "Mul", "AddV2", "Identity", adjust}
        or len(draws) != 1
        or not {"shape", "min", "max"} <= set(bounds)
        or bounds["shape"].size != 0
        or (src.dtype.name, out.dtype.name, draws[0].get_attr("dtype").name) != ("float32",) * 3
        or (rgb and src.shape[2] != 3)
    ):
        raise Untranslatable(
            f"'{scope}' of {src.dtype.name} images with {src.shape[2]} channels, by {', '.join(sorted(kinds))} "
            "(natively: a float32 image's, its factor's bounds constants, RGB for hue and saturation)"
        )
    return float(bounds["min"]), float(bounds["max"])


def _seed_of(members: list[Any]) -> int | None:
    """The op seed a tf.image random function was given (``None``: none, so the pipeline
    draws one)."""
    for o in members:
        if o.type in ("RandomUniform", "RandomUniformInt"):
            seed, seed2 = int(o.get_attr("seed")), int(o.get_attr("seed2"))
            return None if seed == 0 and seed2 == 0 else seed2
    return None


# ----------------------------------------------------------------------------- op handlers


def _attr(op: Any, name: str, default: Any = None) -> Any:
    try:
        return op.get_attr(name)
    except ValueError:
        return default


def _dims(shape: Any) -> list[int | None] | None:
    import tensorflow as tf

    s = tf.TensorShape(shape)
    return None if s.rank is None else s.as_list()


def _const_input(tr: _Translator, op: Any, i: int, what: str) -> np.ndarray:
    v = tr.values.get(op.inputs[i].ref())
    if not isinstance(v, _Const):
        raise Untranslatable(f"'{op.name}' ({op.type}): its {what} is not a constant")
    return v.value


def _parse_example(tr: _Translator, op: Any) -> None:
    if int(_attr(op, "num_sparse", 0)) or list(_attr(op, "ragged_value_types", []) or []):
        raise Untranslatable(f"'{op.name}': sparse or ragged features (VarLenFeature) are parsed by TensorFlow")
    serialized = op.inputs[0]
    if len(serialized.consumers()) != 1:
        raise Untranslatable(f"'{op.name}': the serialized example is also used elsewhere")
    keys = [k.decode() if isinstance(k, bytes) else str(k) for k in _const_input(tr, op, 3, "dense keys").ravel()]
    shapes = _attr(op, "dense_shapes")
    features: dict[str, ops.Feature] = {}
    for i, key in enumerate(keys):
        shape = _dims(shapes[i])
        if shape is None or any(d is None or d < 0 for d in shape):
            raise Untranslatable(f"'{op.name}': feature '{key}' has no fixed shape (FixedLenSequenceFeature)")
        default = _const_input(tr, op, 5 + i, f"default of '{key}'")
        dtype = op.outputs[i].dtype.name
        if dtype == "int64" and _only_cast_to_int32(tr, op.outputs[i]):
            # parsed straight to int32 (the cast's truncation), without an int64 copy
            dtype = "int32"
            tr.int32.add(op.outputs[i].ref())
        features[key] = ops.FixedLenFeature([int(d or 0) for d in shape], dtype, None if default.size == 0 else default)
        if key in tr.used_names and key not in (tr.materialize(serialized),):
            raise Untranslatable(f"'{op.name}': feature '{key}' has the name of another field")
    source = tr.materialize(serialized)
    casts = [k for i, k in enumerate(keys) if op.outputs[i].ref() in tr.int32]
    what = f"ParseExampleV2 (with the Casts to int32 of {', '.join(casts)})" if casts else "ParseExampleV2"
    tr.emit(ops.parse_example(features, key=source), what, "parse_example")
    tr.used_names.update(keys)
    for i, key in enumerate(keys):
        tr.values[op.outputs[i].ref()] = _Field(key)


def _only_cast_to_int32(tr: _Translator, t: Any) -> bool:
    """Whether every reader of ``t`` casts it to int32 (and the function does not hand it out)."""
    readers = t.consumers()
    return (
        bool(readers)
        and t.ref() not in tr.returned
        and all(c.type == "Cast" and c.outputs[0].dtype.name == "int32" for c in readers)
    )


def _decode(tr: _Translator, op: Any) -> None:
    t = op.type
    if t == "DecodeJpeg" and (
        int(_attr(op, "ratio", 1)) != 1
        or not _attr(op, "fancy_upscaling", True)
        or _attr(op, "try_recover_truncated", False)
        or float(_attr(op, "acceptable_fraction", 1.0)) != 1.0
    ):
        raise Untranslatable(f"'{op.name}': decode_jpeg with ratio, fancy_upscaling or recovery settings")
    if t == "DecodeImage" and _attr(op, "expand_animations", True):
        raise Untranslatable(
            f"'{op.name}': decode_image with expand_animations=True (a GIF's frames); pass expand_animations=False"
        )
    dtype = op.outputs[0].dtype.name
    if dtype not in ("uint8", "uint16"):
        raise Untranslatable(f"'{op.name}': decoding to {dtype}")
    dct = _attr(op, "dct_method", b"")
    dct = dct.decode() if isinstance(dct, bytes) else str(dct or "")
    src = tr.materialize(op.inputs[0])
    name = tr.dest(op.inputs[0], op)
    tr.emit(
        ops.decode_image(src, int(_attr(op, "channels", 0)), output=name, dtype=dtype, dct_method=dct),
        t,
        "decode_image",
    )
    tr.values[op.outputs[0].ref()] = _Field(name)


def _decode_raw(tr: _Translator, op: Any) -> None:
    src = tr.materialize(op.inputs[0])
    name = tr.dest(op.inputs[0], op)
    dtype = op.outputs[0].dtype.name
    little = bool(_attr(op, "little_endian", True))
    tr.emit(ops.decode_raw(src, dtype, little, output=name), "DecodeRaw", "decode_raw")
    tr.values[op.outputs[0].ref()] = _Field(name)


def _read_file(tr: _Translator, op: Any) -> None:
    src = tr.materialize(op.inputs[0])
    name = tr.dest(op.inputs[0], op)
    tr.emit(ops.read_file(src, output=name), "ReadFile", "read_file")
    tr.values[op.outputs[0].ref()] = _Field(name)


def _ensure_shape(tr: _Translator, op: Any) -> None:
    dims = _dims(_attr(op, "shape"))
    name = tr.materialize(op.inputs[0])
    if dims is not None:
        tr.emit(ops.ensure_shape(name, dims), "EnsureShape", "ensure_shape")
    tr.values[op.outputs[0].ref()] = _Field(name)


def _reshape(tr: _Translator, op: Any) -> None:
    dtype = op.outputs[0].dtype.name
    shape = [int(d) for d in _const_input(tr, op, 1, "shape").ravel()]
    src = op.inputs[0]
    const = tr.values.get(src.ref())
    if isinstance(const, _Const):
        tr.values[op.outputs[0].ref()] = _Const(const.value.reshape(shape))
        return
    if src.shape.rank == 1 and -1 not in shape:
        # (of a length known only at run time too: unflatten refuses another, as Reshape does)
        name = tr.fresh()
        tr.emit(ops.unflatten(tr.materialize(src), shape, axis=0, output=name), "Reshape", "unflatten")
        tr.values[op.outputs[0].ref()] = _Field(name)
        return
    precision = "float32" if dtype in _EXACT_IN["float32"] else "float64"
    if dtype not in _EXACT_IN[precision]:
        raise Untranslatable(f"'{op.name}': Reshape of {dtype} (natively: a 1-D tensor of known length)")
    name = tr.fresh()
    tr.emit(ops.compute(name, ops.field(tr.materialize(src), shape=shape), dtype), "Reshape", "compute")
    tr.values[op.outputs[0].ref()] = _Field(name)


def _slices(tr: _Translator, op: Any, bounds: list[tuple[int, int]], cut: bool = False) -> None:
    """``op`` as a native slice per axis of ``bounds``; with ``cut``, bounds past the end of
    an axis whose length is known only at run time are cut to it then (a strided slice's)."""
    src = op.inputs[0]
    rank = src.shape.rank
    current = tr.materialize(src)
    name = None
    for axis, (b, e) in enumerate(bounds):
        dim = src.shape[axis]
        if b == 0 and dim is not None and e == dim:
            continue
        out = name or tr.fresh()
        tr.ops.append(ops.slice(current, b, e, axis=axis - rank, output=out, clamp=cut and dim is None))
        current = name = out
    tr.done.append(f"{op.type} → slice")
    tr.values[op.outputs[0].ref()] = _Field(current)


def _slice(tr: _Translator, op: Any) -> None:
    src = op.inputs[0]
    if src.shape.rank is None:
        raise Untranslatable(f"'{op.name}': Slice of a tensor of unknown rank")
    begin = [int(v) for v in _const_input(tr, op, 1, "begin")]
    size = [int(v) for v in _const_input(tr, op, 2, "size")]
    bounds = []
    for axis, (b, s) in enumerate(zip(begin, size)):
        dim = src.shape[axis]
        if s == -1:
            if dim is None:
                raise Untranslatable(f"'{op.name}': Slice to the end of an axis of unknown length")
            s = dim - b
        bounds.append((b, b + s))
    _slices(tr, op, bounds)


def _strided_slice(tr: _Translator, op: Any) -> None:
    src = op.inputs[0]
    const = tr.values.get(src.ref())
    if isinstance(const, _Const) and not any(int(_attr(op, m, 0)) for m in ("ellipsis_mask", "new_axis_mask")):
        tr.values[op.outputs[0].ref()] = _Const(_sliced(op, tr, const.value))  # `rgb[i]` of a constant table
        return
    if _channels_reversed(tr, op, src):
        _channels(tr, op, list(range(int(src.shape[-1]) - 1, -1, -1)), "StridedSlice [..., ::-1]")
        return
    if any(int(_attr(op, m, 0)) for m in ("ellipsis_mask", "new_axis_mask", "shrink_axis_mask")):
        raise Untranslatable(f"'{op.name}': StridedSlice with ..., newaxis or an index (natively: ranges)")
    if src.shape.rank is None:
        raise Untranslatable(f"'{op.name}': StridedSlice of a tensor of unknown rank")
    begin, end, strides = (
        list(int(v) for v in _const_input(tr, op, i, w)) for i, w in ((1, "begin"), (2, "end"), (3, "strides"))
    )
    if any(s != 1 for s in strides):
        raise Untranslatable(f"'{op.name}': StridedSlice with a step other than 1")
    bm, em = int(_attr(op, "begin_mask", 0)), int(_attr(op, "end_mask", 0))
    bounds = []
    for axis in range(len(begin)):
        dim = src.shape[axis]
        b = 0 if bm >> axis & 1 else begin[axis]
        e = dim if em >> axis & 1 else end[axis]
        if (b < 0 or e is None or e < 0) and dim is None:
            raise Untranslatable(f"'{op.name}': negative or open bounds on an axis of unknown length")
        if dim is not None:
            # as Python's slices and TensorFlow's: cut to the axis, empty where they cross
            b = min(max(b + dim if b < 0 else b, 0), dim)
            e = max(min(max(e + dim if e < 0 else e, 0), dim), b)
        bounds.append((b, e))
    _slices(tr, op, bounds, cut=True)


def _channels_reversed(tr: _Translator, op: Any, src: Any) -> bool:
    """Whether a StridedSlice is ``x[..., ::-1]`` (or ``x[:, :, ::-1]``): every axis whole,
    the last one reversed."""
    rank = src.shape.rank
    if rank is None or rank == 0 or src.shape[-1] is None:
        return False
    if int(_attr(op, "new_axis_mask", 0)) or int(_attr(op, "shrink_axis_mask", 0)):
        return False
    stride = tr.values.get(op.inputs[3].ref())
    if not isinstance(stride, _Const):
        return False
    strides = [int(v) for v in stride.value.ravel()]
    bm, em, ellipsis = (int(_attr(op, m, 0)) for m in ("begin_mask", "end_mask", "ellipsis_mask"))
    n = len(strides)
    whole = all(bm >> a & 1 and em >> a & 1 and strides[a] == 1 for a in range(n - 1) if not ellipsis >> a & 1)
    if ellipsis and ellipsis != 1:
        return False
    if not ellipsis and n != rank:
        return False
    return whole and strides[-1] == -1 and bool(bm >> (n - 1) & 1) and bool(em >> (n - 1) & 1)


def _sliced(op: Any, tr: _Translator, value: np.ndarray) -> np.ndarray:
    """A ``StridedSlice`` (ranges and indices) of a constant, in NumPy."""
    begin, end, strides = (
        [int(v) for v in _const_input(tr, op, i, w)] for i, w in ((1, "begin"), (2, "end"), (3, "strides"))
    )
    bm, em, shrink = (int(_attr(op, m, 0)) for m in ("begin_mask", "end_mask", "shrink_axis_mask"))
    index: list[Any] = []
    for axis, (b, e, step) in enumerate(zip(begin, end, strides)):
        if shrink >> axis & 1:
            index.append(b)
        else:
            index.append(slice(None if bm >> axis & 1 else b, None if em >> axis & 1 else e, step))
    return np.asarray(value[tuple(index)])


def _transpose(tr: _Translator, op: Any) -> None:
    perm = [int(v) for v in _const_input(tr, op, 1, "perm")]
    name = tr.fresh()
    src = tr.materialize(op.inputs[0])
    if perm == [2, 0, 1]:
        tr.emit(ops.hwc_to_chw(src, output=name), "Transpose", "hwc_to_chw")
    elif perm == [1, 2, 0]:
        tr.emit(ops.chw_to_hwc(src, output=name), "Transpose", "chw_to_hwc")
    elif perm == list(range(len(perm))):
        tr.values[op.outputs[0].ref()] = _Field(src)
        return
    else:
        raise Untranslatable(f"'{op.name}': Transpose {perm} (natively: HWC↔CHW)")
    tr.values[op.outputs[0].ref()] = _Field(name)


def _channels(tr: _Translator, op: Any, indices: list[int], what: str) -> None:
    """The last axis of the op's input, picked by ``indices``: one ``gather_channels``."""
    src = op.inputs[0]
    dtype = src.dtype.name
    if dtype in ("int64", "uint64", "string", "bool") or src.shape.rank in (None, 0):
        raise Untranslatable(f"'{op.name}' ({op.type}) of {dtype} (natively: channels of numbers float64 holds)")
    field_in = tr.materialize(src)
    name = tr.fresh()
    tr.emit(ops.gather_channels(field_in, indices, dtype=dtype, output=name), what, "gather_channels")
    tr.values[op.outputs[0].ref()] = _Field(name)


def _gather(tr: _Translator, op: Any) -> None:
    """``tf.gather(x, indices, axis=-1)``: channels picked (``[2, 1, 0]``: RGB to BGR)."""
    indices = np.asarray(_const_input(tr, op, 1, "indices"))
    axis = int(_const_input(tr, op, 2, "axis"))
    src = op.inputs[0]
    rank, last = src.shape.rank, src.shape[-1] if src.shape.rank else None
    if int(_attr(op, "batch_dims", 0)) or indices.ndim != 1 or rank is None or axis not in (-1, rank - 1):
        raise Untranslatable(f"'{op.name}': a gather other than of channels (the last axis, 1-D indices)")
    if last is None or (indices < 0).any() or (indices >= last).any():
        raise Untranslatable(f"'{op.name}': indices outside the {last} channels")
    _channels(tr, op, [int(i) for i in indices], "GatherV2")


def _reverse(tr: _Translator, op: Any) -> None:
    axes = [int(v) for v in _const_input(tr, op, 1, "axis").ravel()]
    rank = op.inputs[0].shape.rank
    last = op.inputs[0].shape[-1] if rank else None
    if rank and len(axes) == 1 and axes[0] in (-1, rank - 1) and last is not None:
        _channels(tr, op, list(range(last - 1, -1, -1)), "ReverseV2 (channels)")
        return
    if op.inputs[0].shape.rank != 3 or len(axes) != 1 or axes[0] % 3 not in (0, 1):
        raise Untranslatable(f"'{op.name}': ReverseV2 on axes {axes} (natively: an image's rows or columns)")
    src = tr.materialize(op.inputs[0])
    name = tr.dest(op.inputs[0], op)
    flip = ops.random_flip_left_right if axes[0] % 3 == 1 else ops.random_flip_up_down
    tr.emit(flip(src, seed=0, probability=1.0, output=name), "ReverseV2", "flip")
    tr.values[op.outputs[0].ref()] = _Field(name)


def _feeds_bit_math(t: Any, returned: set[Any], depth: int = 0) -> bool:
    """Whether every reader of ``t`` unpacks bits from it, maybe after index ops and casts
    (so ``t``, bytes, need not be computed)."""
    readers = t.consumers()
    if not readers or t.ref() in returned or depth > 8:
        return False
    return all(
        c.type in _BIT_MATH
        or (
            c.type in _BIT_INDEX + ("Cast",)
            and c.inputs[0].ref() == t.ref()
            and _feeds_bit_math(c.outputs[0], returned, depth + 1)
        )
        for c in readers
    )


def _row_bytes(t: Any, lead: int) -> int | None:
    """The length of the rows of bytes ``t`` (after ``lead`` batch axes): its static one, or
    (``decode_raw`` gives rows of no static length) the one a reshape of the bits unpacked
    from it implies: the reshape's rows hold a known number of values, and its input's rows
    one axis of unknown length, the bytes' (followed through the ops that leave that axis
    whole: casts, new axes, the bit arithmetic)."""
    if t.shape[-1] is not None:
        return int(t.shape[-1])

    def unknown(x: Any) -> int:
        return -1 if x.shape.rank is None else x.shape.as_list().count(None)

    stack, seen = [t], set()
    while stack:
        for c in stack.pop().consumers():
            if c.name in seen:
                continue
            seen.add(c.name)
            if c.type == "Reshape" and c.inputs[0].shape.rank is not None and c.outputs[0].shape.rank is not None:
                rows_in, rows_out = c.inputs[0].shape.as_list()[lead:], c.outputs[0].shape.as_list()[lead:]
                if None not in rows_out and rows_in.count(None) == 1:
                    known = int(np.prod([d for d in rows_in if d is not None]))
                    total = int(np.prod(rows_out))
                    if known and total % known == 0:
                        return total // known
            elif c.type in _BIT_MATH + ("Cast", "ExpandDims") or (c.type == "StridedSlice" and _only_new_axes(c)):
                if unknown(c.outputs[0]) == unknown(c.inputs[0]) >= 1:
                    stack.extend(c.outputs)
    return None


def _whole_lead(begin: list[int], strides: list[int], masks: list[int], lead: int, rank: int | None) -> bool:
    """Whether a StridedSlice leaves the first ``lead`` axes whole: the entries for them
    (before an ellipsis) are full ranges, and those after an ellipsis reach no further back
    than the axes after them."""
    bm, em, ellipsis, new, shrink = masks
    if rank is None:
        return False
    for i in range(len(strides)):
        if ellipsis >> i & 1:
            after = sum(1 for k in range(i + 1, len(strides)) if not new >> k & 1)
            return after <= rank - lead
        if i >= lead:
            return True
        if new >> i & 1 or shrink >> i & 1 or strides[i] != 1 or not em >> i & 1:
            return False
        if not bm >> i & 1 and begin[i] != 0:
            return False
    return True


def _only_new_axes(op: Any) -> bool:
    """Whether a StridedSlice only adds axes (``x[..., None]``, ``x[:, :, None]``): every
    other entry a whole range."""
    try:
        strides = [int(v) for v in _tf_static(op.inputs[3]).ravel()]
    except (TypeError, ValueError):
        return False
    bm, em, ellipsis, new, shrink = (
        int(_attr(op, m, 0)) for m in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")
    )
    return all(
        ellipsis >> i & 1 or new >> i & 1 or (strides[i] == 1 and bm >> i & 1 and em >> i & 1 and not shrink >> i & 1)
        for i in range(len(strides))
    )


def _tf_static(t: Any) -> np.ndarray:
    """``t``'s value where the graph alone gives it (a constant), else TypeError."""
    import tensorflow as tf

    value = tf.get_static_value(t)
    if value is None:
        raise TypeError(f"'{t.name}' is not known when traced")
    return np.asarray(value)


def _bits_cast(op: Any, v: Bits) -> Bits:
    src, dst = op.inputs[0].dtype, op.outputs[0].dtype
    if not (dst.is_integer or dst.is_floating):
        raise ValueError(f"to {dst.name}")
    if op.type == "Bitcast" and (src.size != dst.size or not v.bit or not (src.is_integer and dst.is_integer)):
        raise ValueError("a bitcast other than of bits (0 or 1) to an integer type of the same size")
    if not v.bit and not (dst.is_integer and dst.max >= 255):
        raise ValueError(f"bytes as {dst.name} (natively: bits of them)")
    if dst.is_unsigned and (v.sign < 0).any():
        raise ValueError(f"negated bits as {dst.name}")
    return Bits(v.field, v.lead, v.n, v.pos, v.shift, v.sign, v.bit, v.steps + [f"{op.type}({src.name}→{dst.name})"])


def _index_fn(tr: _Translator, op: Any, lead: int) -> Callable[[np.ndarray], np.ndarray]:
    """What the index op ``op`` does, on a NumPy array of its input's shape (the first
    ``lead`` axes, the batch's, of any length)."""
    t = op.type
    if t == "Reshape":
        out = op.outputs[0].shape
        rows = out.as_list()[lead:] if out.rank is not None and out.rank >= lead else [None]
        if None in rows:
            raise ValueError("a reshape of the rows to a shape not known when traced")
        return lambda a: a.reshape(a.shape[:lead] + tuple(rows))
    if t == "ExpandDims":
        axis = int(_const_input(tr, op, 1, "axis"))
        return lambda a: np.expand_dims(a, axis)
    if t == "Squeeze":
        axes = tuple(int(d) for d in _attr(op, "squeeze_dims", []) or [])
        if not axes:
            raise ValueError("a squeeze of every axis of length 1")
        return lambda a: np.squeeze(a, axis=axes)
    if t == "Transpose":
        perm = [int(v) for v in _const_input(tr, op, 1, "perm")]
        if perm[:lead] != list(range(lead)):
            raise ValueError("it moves the batch axis")
        return lambda a: np.transpose(a, perm)
    if t == "GatherV2":
        indices = np.asarray(_const_input(tr, op, 1, "indices")).astype(np.int64)
        axis = int(_const_input(tr, op, 2, "axis"))
        rank = op.inputs[0].shape.rank
        if int(_attr(op, "batch_dims", 0)) or (indices < 0).any() or rank is None or axis % rank < lead:
            raise ValueError("a gather with batch_dims, negative indices or on the batch axis")
        return lambda a: np.take(a, indices, axis=axis)
    if t == "Slice":
        begin = [int(v) for v in _const_input(tr, op, 1, "begin")]
        size = [int(v) for v in _const_input(tr, op, 2, "size")]
        if any(begin[a] != 0 or size[a] != -1 for a in range(lead)):
            raise ValueError("it slices the batch axis")
        return lambda a: a[tuple(slice(b, None if n == -1 else b + n) for b, n in zip(begin, size))]
    begin, end, strides = (
        [int(v) for v in _const_input(tr, op, i, w)] for i, w in ((1, "begin"), (2, "end"), (3, "strides"))
    )
    masks = [
        int(_attr(op, m, 0)) for m in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")
    ]
    if not _whole_lead(begin, strides, masks, lead, op.inputs[0].shape.rank):
        raise ValueError("it slices or indexes the batch axis")
    index: list[Any] = []
    for i, (b, e, step) in enumerate(zip(begin, end, strides)):
        bm, em, ellipsis, new, shrink = (m >> i & 1 for m in masks)
        if ellipsis:
            index.append(Ellipsis)
        elif new:
            index.append(None)
        elif shrink:
            index.append(b)
        else:
            index.append(slice(None if bm else b, None if em else e, step))
    return lambda a: a[tuple(index)]


def _one_hot(tr: _Translator, op: Any) -> None:
    depth = int(_const_input(tr, op, 1, "depth"))
    on, off = float(_const_input(tr, op, 2, "on_value")), float(_const_input(tr, op, 3, "off_value"))
    if (on, off) != (1.0, 0.0) or int(_attr(op, "axis", -1)) != -1 or op.outputs[0].dtype.name != "float32":
        raise Untranslatable(f"'{op.name}': one_hot with on/off values, an axis or a dtype other than float32")
    if depth < 1:
        raise Untranslatable(f"'{op.name}': one_hot of depth {depth} (natively: at least 1)")
    src = tr.materialize(op.inputs[0])
    name = tr.dest(op.inputs[0], op)
    tr.emit(ops.one_hot(src, depth, output=name), "OneHot", "one_hot")
    tr.values[op.outputs[0].ref()] = _Field(name)


_HANDLERS: dict[str, Callable[[_Translator, Any], None]] = {
    "ParseExampleV2": _parse_example,
    "DecodeJpeg": _decode,
    "DecodePng": _decode,
    "DecodeImage": _decode,
    "DecodeRaw": _decode_raw,
    "ReadFile": _read_file,
    "Reshape": _reshape,
    "EnsureShape": _ensure_shape,
    "Slice": _slice,
    "StridedSlice": _strided_slice,
    "Transpose": _transpose,
    "ReverseV2": _reverse,
    "OneHot": _one_hot,
    "GatherV2": _gather,
}


def translate(traced: Traced, keep_inputs: bool = False) -> Translation:
    """Native ops equal to the traced function, or :class:`Untranslatable` naming the op.
    ``keep_inputs`` (a filter's predicate): the element's fields are kept as they are, and
    the result is one more field, the template's name."""
    return _Translator(traced, keep_inputs).run()
