"""``assert_cardinality``, checked against TensorFlow's ``experimental.assert_cardinality``: the
same elements, the stated cardinality, and a failure at the same element when the statement
is wrong (one past the count, or the end of a short input)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest
import stoker as sk


def _run(make: Callable[[], Any], errors: tuple[type[BaseException], ...]) -> tuple[list[int], str | None]:
    """The elements a pass hands out before it ends or fails, and the failure's message."""
    got: list[int] = []
    try:
        for e in make():
            got.append(int(np.asarray(e)))
    except errors as err:
        return got, str(err)
    return got, None


@pytest.mark.parametrize("stated", [5, 4, 7, 0])
def test_matches_tensorflow(stated: int) -> None:
    # Imported here, not at collection: TensorFlow loaded before torch makes torch's import
    # abort in the same process (the suite's other tests import torch).
    tf = pytest.importorskip("tensorflow")
    ours = sk.Dataset.range(10).filter(lambda x: x % 2 == 0).assert_cardinality(stated)
    theirs = (
        tf.data.Dataset.range(10).filter(lambda x: x % 2 == 0).apply(tf.data.experimental.assert_cardinality(stated))
    )
    assert ours.cardinality() == int(theirs.cardinality()) == stated
    got, err = _run(lambda: ours, (sk.errors.StokerError,))
    want, tf_err = _run(lambda: theirs.as_numpy_iterator(), (tf.errors.OpError,))
    assert got == want
    assert (err is None) == (tf_err is None), (err, tf_err)
    if err is not None:
        assert "assert_cardinality" in err
        # Both say what was expected and what came ("at least n" past the count, "only n" short).
        for word in ("at least", "only"):
            assert (word in err) == (word in tf_err), (err, tf_err)


def test_a_count_the_plan_knows_to_differ_is_refused_when_built() -> None:
    with pytest.raises(sk.SchemaError, match="assert_cardinality"):
        sk.Dataset.range(6).assert_cardinality(5)
    with pytest.raises(sk.SchemaError, match="endless"):
        sk.Dataset.range(6).repeat().assert_cardinality(5)


def test_a_rank_share_gets_its_length_from_it() -> None:
    """A rank's share needs the count of its input: stated, it is known."""
    ds = sk.Dataset.range(12).filter(lambda x: x % 3 != 0).assert_cardinality(8)
    assert ds.shard(2, 1).cardinality() == 4
    assert [int(x) for x in ds.shard(2, 1)] == [2, 5, 8, 11]
