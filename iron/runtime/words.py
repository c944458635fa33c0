"""The host's copy of the per-call scratchpad: `WordProgram` computes a call's int32 words from its
per-call values as the Plan's word definitions say (the device's Emit computes the same),
checking every bounded word first, so a call with an index out of range is refused before
anything is launched or written.
"""
from __future__ import annotations

import numpy as np

from iron.errors import ArgumentError, IndexOutOfRange
from iron.ir import wrap_i32
from iron.plan.plan import Const, WordOp, WordRef


class WordProgram:
    def __init__(self, words, flagged: bool = False):
        """`flagged`: the plan has an Emit, whose flag word follows the words; a call's words end
        with it cleared, so a run the host starts is never taken for one after a flagged run."""
        self.count = len(words)
        self.flag = [0] if flagged else []
        self.values = [(w.index, w.name) for w in words if w.op is None]
        self.steps = [self._step(w) for w in words if w.op is not None]
        self.checks = [(w.index, w.bound, w.what, w.name, w.tensor) for w in words if w.bound is not None]

    @staticmethod
    def _step(w):
        fn, out = w.op.fn, w.index
        a, b = _operand(w.a), _operand(w.b if w.b is not None else Const(0))
        ka, kb = isinstance(w.a, WordRef), isinstance(w.b, WordRef)
        if w.op in (WordOp.FLOORDIV, WordOp.MOD):
            def step(words, a=a, b=b):
                x, y = (words[a] if ka else a), (words[b] if kb else b)
                if x is None or y is None:
                    words[out] = None
                    return
                if y == 0:
                    raise ArgumentError(f"per-call value {w.name} divides by zero: give values that make the divisor non-zero.")
                words[out] = wrap_i32(fn(x, y))
            return step

        def step(words, a=a, b=b):
            x, y = (words[a] if ka else a), (words[b] if kb else b)
            words[out] = None if x is None or y is None else wrap_i32(fn(x, y))
        return step

    def __call__(self, values: dict[str, int]) -> np.ndarray:
        words = self._computed(values)
        wrong = self._violation(words)
        if wrong is not None:
            raise IndexOutOfRange.at(*wrong)
        return np.array(words + self.flag, dtype=np.int64).astype(np.int32)

    def violation(self, values: dict[str, int]) -> tuple | None:
        """The first bounded word out of its range as (what, name, value, lo, hi, tensor), or None."""
        return self._violation(self._computed(values))

    def known(self, values: dict[str, int], carry) -> tuple[tuple | None, dict[str, int]]:
        """For a call of which only some values are known (a device loop's step, whose carried
        values an earlier run's kernels computed are not): the first bounded word computed from
        known values alone that is out of range (as `violation`), and the next carried values
        known from them (`carry`: the Plan's (name, source) pairs)."""
        words = self._computed(values, partial=True)
        known = {name: words[s.index] for name, s in carry if isinstance(s, WordRef) and words[s.index] is not None}
        return self._violation(words), known

    def _computed(self, values: dict[str, int], partial: bool = False) -> list[int | None]:
        """The words; with `partial`, None for each a value missing from `values` decides."""
        words: list[int | None] = [0] * self.count
        for index, name in self.values:
            words[index] = values.get(name) if partial else values[name]
        for step in self.steps:
            step(words)
        return words

    def _violation(self, words: list[int | None]) -> tuple | None:
        for index, (lo, hi), what, name, tensor in self.checks:
            if words[index] is not None and not lo <= words[index] < hi:
                return what, name, words[index], lo, hi, tensor
        return None


def _operand(operand) -> int:
    """A word operand's index (a WordRef) or value (a Const)."""
    return operand.index if isinstance(operand, WordRef) else operand.value
