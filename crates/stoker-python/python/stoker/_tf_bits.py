"""Packed bits in TensorFlow functions, read as one ``bit_planes``.

Code that unpacks bit-packed records (W1's chess boards) writes it with integer arithmetic on
the bytes ``decode_raw`` gives: ``(x[..., None] // [128, 64, .., 1]) % 2`` or
``(x[..., None] >> [7, .., 0]) & 1``, then reshapes, slices, gathers and transposes the bits
and multiplies some by -1. Every one of those steps only says which bit lands where, with
which sign, so :class:`Bits` follows them as index arrays over one row of bytes, without
computing anything, and the result is one native ``bit_planes`` from the packed bytes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np


@dataclass
class Bits:
    """Bytes of a uint8 field ``[..., n]``, or bits of them, as index ops picked them: element
    ``[i]`` of each row is byte ``pos[i]`` of the field's row shifted right by ``shift[i]``
    and, once ``bit``, masked to its lowest bit and multiplied by ``sign[i]``. The first
    ``lead`` axes (a batch) are the field's own, left alone by every op read."""

    field: str
    lead: int
    n: int
    pos: np.ndarray
    shift: np.ndarray
    sign: np.ndarray
    bit: bool = False
    steps: list[str] = dataclasses.field(default_factory=list)

    @classmethod
    def of_bytes(cls, name: str, lead: int, n: int) -> Bits:
        return cls(name, lead, n, np.arange(n), np.zeros(n, np.int64), np.ones(n, np.int64))

    def reindexed(self, fn: Callable[[np.ndarray], Any], out_rank: int | None, step: str) -> Bits:
        """The value after an index op ``fn``, which is applied to an array of the tensor's
        shape, its lead axes of size 2, holding each element's position: the op must keep
        the lead axes where they are, and each row's elements then say where they came from."""
        size = self.pos.size
        lead_code = np.arange(2**self.lead).reshape((2,) * self.lead + (1,) * self.pos.ndim)
        codes = lead_code * size + np.arange(size).reshape(self.pos.shape)
        try:
            got = np.asarray(fn(codes))
        except (ValueError, IndexError, TypeError) as e:
            raise ValueError(f"on packed bits: {e}") from None
        if got.ndim < self.lead or got.shape[: self.lead] != (2,) * self.lead:
            raise ValueError("it moves or indexes the batch axis")
        rows = lead_code.reshape(lead_code.shape[: self.lead] + (1,) * (got.ndim - self.lead))
        if not np.array_equal(got // size, np.broadcast_to(rows, got.shape)):
            raise ValueError("it mixes rows of the batch")
        if out_rank is not None and got.ndim != out_rank:
            raise ValueError(f"rank {got.ndim} where TensorFlow gives {out_rank}")
        take = got[(0,) * self.lead]
        return replace(
            self,
            pos=self.pos.ravel()[take],
            shift=self.shift.ravel()[take],
            sign=self.sign.ravel()[take],
            steps=self.steps + [step],
        )

    def arithmetic(self, kind: str, c: np.ndarray, signed: bool) -> Bits:
        """The value after ``kind`` (FloorDiv, RightShift, FloorMod, BitwiseAnd, Mul) by the
        constant ``c``, broadcast as TensorFlow does; ``signed``: the result's dtype holds -1."""
        c = np.asarray(c)
        extra = c.ndim - self.pos.ndim
        if c.ndim > self.lead + self.pos.ndim:
            raise ValueError(f"a constant of rank {c.ndim} that adds axes before the batch's")
        if extra > 0:
            if any(d != 1 for d in c.shape[:extra]):
                raise ValueError(f"a constant of shape {list(c.shape)} broadcast over the batch")
            c = c.reshape(c.shape[extra:])
        try:
            pos, shift, sign, c = np.broadcast_arrays(self.pos, self.shift, self.sign, c)
        except ValueError:
            raise ValueError(
                f"a constant of shape {list(c.shape)} against bits of shape {list(self.pos.shape)}"
            ) from None
        shift, sign, bit = shift.copy(), sign.copy(), self.bit
        if c.dtype.kind not in "iu" and not np.array_equal(c, np.round(c)):
            raise ValueError("by a constant that is not whole")
        c = c.astype(np.int64)
        if kind == "FloorDiv":
            if bit or (c <= 0).any() or (c & (c - 1)).any():
                raise ValueError("a division other than of bytes by powers of two")
            shift += np.log2(c).astype(np.int64)
        elif kind == "RightShift":
            if bit or (c < 0).any():
                raise ValueError("a shift other than of bytes, right")
            shift += c
        elif kind in ("FloorMod", "BitwiseAnd") and (c == (2 if kind == "FloorMod" else 1)).all():
            # the lowest bit, of a negated bit too (-1 % 2 and -1 & 1 are 1)
            bit, sign = True, np.ones_like(sign)
        elif kind == "Mul" and bit and np.isin(c, (1, -1)).all() and (signed or (c == 1).all()):
            sign *= c
        else:
            raise ValueError(f"{kind} by {np.unique(c).tolist()[:4]} (natively: the bits' selection and signs)")
        if (shift > 7).any():
            raise ValueError("a shift past a byte's bits")
        return replace(self, pos=pos.copy(), shift=shift, sign=sign, bit=bit, steps=self.steps + [kind])

    def negated(self) -> Bits:
        return replace(self, sign=-self.sign, steps=self.steps + ["Neg"])

    def planes(self) -> tuple[int, list[int], list[int] | None, list[int] | None]:
        """``bit_planes``'s start, shape, indices and signs for these bits (the shape ``[1]``
        for one bit per row), or ValueError where no ``bit_planes`` picks them."""
        if not self.bit:
            raise ValueError("bytes picked by index ops (natively: bits of them)")
        index = self.pos * 8 + 7 - self.shift
        per_row = list(self.pos.shape)
        m = per_row[-1] if per_row else 1
        rows = index.reshape(-1, m)
        signs = self.sign.reshape(-1, m)
        if m == 0 or rows.size == 0:
            raise ValueError("no bits")
        if not (signs == signs[0]).all():
            raise ValueError("signs that differ between rows of bits")
        start = int(rows[0].min())
        channels = rows[0] - start
        width = int(rows[1, 0] - rows[0, 0]) if len(rows) > 1 else int(channels.max()) + 1
        if width <= int(channels.max()) or not np.array_equal(rows, rows[0] + width * np.arange(len(rows))[:, None]):
            raise ValueError("bits not in rows of equal channels")
        if start + width * len(rows) > self.n * 8:
            raise ValueError("bits past the row's bytes")
        shape = (per_row[:-1] or []) + [width]
        identity = width == m and np.array_equal(channels, np.arange(m))
        negated = None if (signs[0] == 1).all() else [int(s) for s in signs[0]]
        indices = None if identity and negated is None else [int(c) for c in channels]
        return start, shape, indices, negated
