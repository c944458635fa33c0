"""hazards.py: a state written in many disjoint blocks is accepted (a sweep along the first axis
finds no pair of blocks apart), and of several hazards the one refused is the first by the later
call, its write, then the earlier call, a write before a read."""
import numpy as np
import pytest

import iron
from iron.errors import WriteHazard
from iron.kernels import Copy


class Blocks(iron.Graph):
    """Copies of `a` into `rows` blocks of a state, at the rows `starts` gives (unordered)."""

    def __init__(self, starts, rows: int = 2):
        self.st = iron.state((2 * len(starts) + 4, 4), np.int32, name="st")
        self.starts, self.rows = starts, rows

    def body(self, a):
        for start in self.starts:
            Copy.step(a, out=self.st[start:start + self.rows])


def test_many_disjoint_blocks_are_accepted_and_all_land():
    a = np.arange(8, dtype=np.int32).reshape(2, 4)
    g = Blocks(list(range(0, 400, 2))[::-1])   # written bottom up: the sweep sorts them
    g.reference(a)
    np.testing.assert_array_equal(g.read("st")[:400], np.tile(a, (200, 1)))


@pytest.mark.parametrize("starts, first, later", [
    ([0, 4, 8, 1], 0, 3),   # the last block meets the first
    ([0, 4, 5, 1], 1, 2),   # Copy#2 meets Copy#1 before the last call meets Copy#0
    ([6, 0, 1, 7], 1, 2),   # the same, the blocks out of order
    ([2, 0, 1], 0, 2),      # Copy#2 meets both earlier calls: the first of them
])
def test_the_first_hazard_is_refused(starts, first, later):
    with pytest.raises(WriteHazard) as e:
        Blocks(starts).reference(np.zeros((2, 4), np.int32))
    assert str(e.value).startswith(f"Copy#{first} and Copy#{later} in Blocks.body both write state 'st'")
