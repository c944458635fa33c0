"""No aliasing surprises: a weight or param is a read-only snapshot of the caller's array taken
at declaration, changed only by Graph.update (the reference and every compiled version at
once), and one graph's declarations are never read, written or updated through another."""
import numpy as np
import pytest

import iron
from iron import Scratchpad
from iron.errors import ArgumentError
from iron.kernels import Copy, MatVec
from tests.quotes import quoted


class Lookup(iron.Graph):
    """A row of a weight table and a param matrix times x; the call also records x in a state."""

    def __init__(self, table, matrix):
        self.table = iron.weight(table)
        self.matrix = iron.param(matrix)
        self.trail = iron.state((4,), np.float32, name="trail")

    def body(self, x, *, row: Scratchpad[np.int32]):
        Copy.step(x, out=self.trail)
        return Copy.step(self.table[row]), MatVec.step(self.matrix, x)


TABLE = np.arange(8, dtype=np.int32).reshape(2, 4)
MATRIX = np.eye(4, dtype=np.float32)
X = np.arange(4, dtype=np.float32)


def both(g, compiled, **values):
    """The reference's and the compiled version's results of one call."""
    return g.reference(X, **values), compiled(X, **values)


def assert_results(results, row, product):
    for got_row, got_product in results:
        np.testing.assert_array_equal(got_row, row)
        np.testing.assert_array_equal(got_product, product)


def test_changing_the_callers_array_after_declaring_changes_nothing():
    table, matrix = TABLE.copy(), MATRIX.copy()
    g = Lookup(table, matrix)
    compiled = g.compile(((4,), np.float32))
    table[1], matrix[0, 0] = 99, 5
    assert_results(both(g, compiled, row=1), [4, 5, 6, 7], X)
    assert not g.table.array.flags.writeable and not g.matrix.array.flags.writeable


def test_update_changes_the_reference_and_every_compiled_version_alike():
    g = Lookup(TABLE, MATRIX)
    before = g.compile(((4,), np.float32))
    assert_results(both(g, before, row=0), [0, 1, 2, 3], X)     # opened before the update
    g.update(g.table, TABLE * 10)
    g.update(g.matrix, MATRIX * 2)
    after = g.compile(((4,), np.float32), device="npu1")          # compiled after the update
    assert_results([*both(g, before, row=1), after(X, row=1)], [40, 50, 60, 70], 2 * X)


def test_an_update_of_another_shape_or_dtype_is_refused_and_changes_nothing(unchanged):
    g = Lookup(TABLE, MATRIX)
    compiled = g.compile(((4,), np.float32))
    compiled(X, row=0)
    for value, text in [
        (np.zeros((3, 4), np.int32), "weight 'table' is (2, 4); the value written is (3, 4): give the same shape."),
        (TABLE.astype(np.int16), "weight 'table' is int32; the value written is int16: convert it with .astype(np.int32)."),
    ]:
        with unchanged(g, compiled=[compiled]), pytest.raises(ArgumentError) as raised:
            g.update(g.table, value)
        assert str(raised.value) == text
    assert_results(both(g, compiled, row=1), [4, 5, 6, 7], X)


def test_a_compiled_versions_update_is_the_graphs(unchanged):
    # CompiledGraph.update once took a placement's name: given the Param, as read and write take a
    # State, it silently changed nothing; given a name it wrote any shape or dtype unchecked
    g = Lookup(TABLE, MATRIX)
    compiled, other = g.compile(((4,), np.float32)), g.compile(((4,), np.float32), device="npu1")
    compiled.update(g.matrix, MATRIX * 2)
    assert_results([*both(g, compiled, row=1), other(X, row=1)], [4, 5, 6, 7], 2 * X)
    for memory, value, text in [
        (g.matrix, np.zeros((4, 3), np.float32), "param 'matrix' is (4, 4); the value written is (4, 3): give the same shape."),
        ("table", TABLE, "update() takes a weight or param of Lookup, not str: change a state with write()."),
    ]:
        with unchanged(g, compiled=[compiled]), pytest.raises(ArgumentError) as raised:
            compiled.update(memory, value)
        assert str(raised.value) == text


def test_update_takes_weights_and_params_only(unchanged):
    g = Lookup(TABLE, MATRIX)
    with unchanged(g), pytest.raises(ArgumentError) as raised:
        g.update(g.trail, np.ones(4, np.float32))
    quoted(raised.value, "update()", "Lookup", "not State", "write()")


class Other(iron.Graph):
    def __init__(self):
        self.trail = iron.state((4,), np.float32, name="trail")
        self.table = iron.weight(TABLE)

    def body(self, x):
        return Copy.step(x, out=self.trail)


def traced_pair():
    """Two graphs with a state named `trail`, both traced and run, their trails different."""
    mine, other = Lookup(TABLE, MATRIX), Other()
    compiled = mine.compile(((4,), np.float32))
    compiled(X, row=0)
    mine.reference(X, row=0)
    other.reference(X + 100)
    other(X + 100)
    return mine, other, compiled


def test_reading_or_writing_another_graphs_state_names_both_graphs(unchanged):
    mine, other, compiled = traced_pair()
    names = ("<iron.state trail: (4,) float32>", "belongs to Other, not to Lookup")
    attempts = [lambda: compiled.read(other.trail), lambda: compiled.write(other.trail, np.zeros(4, np.float32)),
                lambda: mine.read(other.trail), lambda: mine.write(other.trail, np.zeros(4, np.float32))]
    for attempt in attempts:
        with unchanged(mine, other, compiled=[compiled]), pytest.raises(ArgumentError) as raised:
            attempt()
        quoted(raised.value, *names)
    np.testing.assert_array_equal(compiled.read(mine.trail), X)
    np.testing.assert_array_equal(other.read(other.trail), X + 100)


def test_a_state_of_another_instance_of_the_same_class_is_named_as_such(unchanged):
    mine = Other()
    compiled = mine.compile(((4,), np.float32))
    theirs = Other()
    theirs(X + 100)
    with unchanged(mine, theirs, compiled=[compiled]), pytest.raises(ArgumentError) as raised:
        compiled.read(theirs.trail)
    quoted(raised.value, "<iron.state trail: (4,) float32>", "another Other graph")


def test_reading_writing_or_updating_another_graphs_weight_names_both_graphs(unchanged):
    mine, other, compiled = traced_pair()
    attempts = [lambda: mine.update(other.table, TABLE), lambda: compiled.read(other.table),
                lambda: mine.write(other.table, TABLE)]
    for attempt in attempts:
        with unchanged(mine, other, compiled=[compiled]), pytest.raises(ArgumentError) as raised:
            attempt()
        quoted(raised.value, "<iron.weight table: (2, 4) int32>", "belongs to Other, not to Lookup")


def test_reading_this_graphs_own_weight_says_what_read_takes(unchanged):
    mine, other, compiled = traced_pair()
    with unchanged(mine, compiled=[compiled]), pytest.raises(ArgumentError) as raised:
        compiled.read(mine.table)
    quoted(raised.value, "read/write", "State", "not Weight")


def test_a_state_no_graph_declares_is_named_as_such(unchanged):
    mine, other, compiled = traced_pair()
    loose = iron.state((4,), np.float32, name="trail")
    with unchanged(mine, compiled=[compiled]), pytest.raises(ArgumentError) as raised:
        compiled.read(loose)
    quoted(raised.value, "<iron.state trail: (4,) float32>", "not declared in Lookup")
