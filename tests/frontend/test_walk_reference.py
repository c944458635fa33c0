"""The seed chapter's Walk (iron.models.designs.Walk is the seed's class verbatim) on the reference path:
its walk equals a plain numpy walk."""
import copy
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import iron
from iron import Carried
from iron.kernels import Add, Copy
from iron.models.designs import Walk, numpy_walk
from tests.quotes import quoted


@settings(max_examples=25)
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
    quoted(e.value, "Carry is immutable", "iron.carry(...)", "dict(carry)")
    assert copy.deepcopy(nxt) == nxt and pickle.loads(pickle.dumps(nxt)) == nxt
    np.testing.assert_array_equal(walk.read("trail"), [2, 1, 0])


def test_out_of_range_index_names_the_view_and_leaves_states_unchanged():
    walk = Walk(np.array([1, 2, 0], dtype=np.int32), 2)
    walk.reference(node=0, steps=0)
    walk.reference(node=1, steps=1)
    before = walk.read("trail")
    with pytest.raises(iron.errors.IndexOutOfRange) as e:
        walk.reference(node=2, steps=2)
    quoted(e.value, "trail[steps]", "steps = 2", "0..1", "nothing was written", "'trail'")
    np.testing.assert_array_equal(walk.read("trail"), before)
    with pytest.raises(iron.errors.IndexOutOfRange) as e:
        walk.reference(node=3, steps=0)
    quoted(e.value, "successor[node]", "node = 3", "0..2")
    np.testing.assert_array_equal(walk.read("trail"), before)


def test_reset_and_write_set_the_host_copy():
    walk = Walk(np.array([1, 0], dtype=np.int32), 2)
    walk.write("trail", np.array([7, 9], dtype=np.int32))
    np.testing.assert_array_equal(walk.read(walk.trail), [7, 9])
    walk.reset()
    np.testing.assert_array_equal(walk.read("trail"), [0, 0])


def test_values_after_the_first_call_are_converted_or_refused_with_the_same_words():
    walk = Walk(np.array([1, 2, 0], dtype=np.int32), 3)
    assert dict(walk.reference(node=0, steps=0)) == {"node": 1, "steps": 1}
    nxt = walk.reference(node=np.int64(1), steps=np.array(1, np.int32))
    assert dict(nxt) == {"node": 2, "steps": 2}
    assert type(nxt["node"]) is int and type(nxt["steps"]) is int
    refused = [
        ({"node": 1.5, "steps": 0}, "per-call value 'node' of Walk.body must be an int, got float 1.5."),
        ({"node": True, "steps": 0}, "per-call value 'node' of Walk.body must be an int, got bool True."),
        ({"node": 0, "steps": 2**31},
         "per-call value 'steps' of Walk.body is 2147483648, outside int32: give a 32-bit integer."),
        ({"node": 0}, "Walk.body is missing per-call value(s) steps: pass steps=<int> (Carried)."),
        ({"node": 0, "steps": 0, "pos": 1},
         "Walk.body got an unexpected value 'pos': its tensors are none and its per-call values are node, steps."),
    ]
    for values, text in refused:
        with pytest.raises(iron.errors.ArgumentError) as e:
            walk.reference(**values)
        assert str(e.value) == text
    np.testing.assert_array_equal(walk.read("trail"), [1, 2, 0])


class Pick(iron.Graph):
    """One element read that is the call's output, and one that only feeds the carry."""

    def __init__(self):
        self.table = iron.weight(np.array([[5, 0], [7, 1]], dtype=np.int32))

    def body(self, *, row: Carried[np.int32]):
        out = Copy.step(self.table[row, 0], dtype=np.int32)
        nxt = Copy.step(self.table[1 - row, 1], dtype=np.int32)
        return out, iron.carry(row=nxt)


def test_an_element_read_returned_as_an_output_is_an_array_of_its_own():
    g = Pick()
    out, nxt = g.reference(row=0)
    assert type(out) is np.ndarray and out.shape == () and out.dtype == np.int32 and int(out) == 5
    assert dict(nxt) == {"row": 1} and type(nxt["row"]) is int
    out[...] = 0
    np.testing.assert_array_equal(g.table.array, [[5, 0], [7, 1]])
    out, nxt = g.reference(row=1)
    assert int(out) == 7 and dict(nxt) == {"row": 0}


class Twice(iron.Graph):
    """An element read that a kernel computes with, so it must stay an int32."""

    def __init__(self):
        self.table = iron.weight(np.array([2**30, 1], dtype=np.int32))

    def body(self, *, i: Carried[np.int32]):
        x = Copy.step(self.table[i], dtype=np.int32)
        return Add.step(x, x), iron.carry(i=x)


def test_an_element_read_that_a_kernel_uses_computes_in_its_dtype():
    out, nxt = Twice().reference(i=0)
    assert out.dtype == np.int32 and int(out) == -(2**31)
    assert dict(nxt) == {"i": 2**30} and type(nxt["i"]) is int


def test_a_copied_graph_keeps_the_host_states_and_runs_on_its_own():
    walk = Walk(np.array([1, 2, 0], dtype=np.int32), 3)
    walk.reference(node=0, steps=0)
    twin = copy.deepcopy(walk)
    np.testing.assert_array_equal(twin.read("trail"), [1, 0, 0])
    assert dict(twin.reference(node=1, steps=1)) == {"node": 2, "steps": 2}
    np.testing.assert_array_equal(twin.read("trail"), [1, 2, 0])
    np.testing.assert_array_equal(walk.read("trail"), [1, 0, 0])
    thawed = pickle.loads(pickle.dumps(twin))
    thawed.reference(node=0, steps=2)
    np.testing.assert_array_equal(thawed.read("trail"), [1, 2, 1])
    np.testing.assert_array_equal(twin.read("trail"), [1, 2, 0])
