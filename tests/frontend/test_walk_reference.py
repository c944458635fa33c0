"""The seed chapter's Walk (iron.designs.Walk is the seed's class verbatim) on the reference path:
its walk equals a plain numpy walk."""
import copy
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import iron
from iron.designs import Walk, numpy_walk


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 40), steps=st.integers(1, 12), seed=st.integers(0, 2**32 - 1))
def test_reference_walk_matches_numpy_on_random_permutations(n, steps, seed):
    rng = np.random.default_rng(seed)
    successor = rng.permutation(n).astype(np.int32)
    start = int(rng.integers(n))
    walk = Walk(successor, steps + 1)
    node, count = start, 0
    for _ in range(steps + 1):
        nxt = walk.reference(node=node, steps=count)
        node, count = int(nxt["node"]), int(nxt["steps"])
    np.testing.assert_array_equal(walk.read(walk.trail), numpy_walk(successor, start, steps + 1))
    assert count == steps + 1
    assert node == numpy_walk(successor, start, steps + 1)[-1]


def test_a_call_returns_a_carry_mapping_that_feeds_the_next_call():
    walk = Walk(np.array([2, 0, 1], dtype=np.int32), 3)
    nxt = walk.reference(node=0, steps=0)
    assert isinstance(nxt, iron.Carry)
    assert dict(nxt) == {"node": 2, "steps": 1}
    assert int(nxt["node"]) == 2
    again = walk.reference(**nxt)
    assert dict(again) == {"node": 1, "steps": 2}
    with pytest.raises(TypeError) as e:
        nxt["node"] = 5
    assert str(e.value) == "a Carry is immutable: build a new one with iron.carry(...) or dict(carry)"
    assert copy.deepcopy(nxt) == nxt and pickle.loads(pickle.dumps(nxt)) == nxt
    np.testing.assert_array_equal(walk.read("trail"), [2, 1, 0])


def test_out_of_range_index_names_the_view_and_leaves_states_unchanged():
    walk = Walk(np.array([1, 2, 0], dtype=np.int32), 2)
    walk.reference(node=0, steps=0)
    walk.reference(node=1, steps=1)
    before = walk.read("trail")
    with pytest.raises(iron.errors.IndexOutOfRange) as e:
        walk.reference(node=2, steps=2)
    assert str(e.value) == (
        "trail[steps] with steps = 2 is out of range: steps must be in 0..1; "
        "nothing was written. Keep steps in range, or make 'trail' larger."
    )
    np.testing.assert_array_equal(walk.read("trail"), before)
    with pytest.raises(iron.errors.IndexOutOfRange) as e:
        walk.reference(node=3, steps=0)
    assert str(e.value).startswith("successor[node] with node = 3 is out of range: node must be in 0..2;")
    np.testing.assert_array_equal(walk.read("trail"), before)


def test_reset_and_write_set_the_host_copy():
    walk = Walk(np.array([1, 0], dtype=np.int32), 2)
    walk.write("trail", np.array([7, 9], dtype=np.int32))
    np.testing.assert_array_equal(walk.read(walk.trail), [7, 9])
    walk.reset()
    np.testing.assert_array_equal(walk.read("trail"), [0, 0])
