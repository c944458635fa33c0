"""A tile lock (docs/platform.md section 2): a semaphore that a core or a BD acquires
(AcquireGreaterEqual n: wait for a value of at least n, take n) and releases (add n).
"""
from __future__ import annotations

from iron.runtime.emulator.scheduler import Board, Signal


class Lock(Signal):
    """`value` is the semaphore; tasks that could not acquire it park on the lock itself."""

    __slots__ = ("name", "value")

    def __init__(self, name: str, value: int, board: Board):
        super().__init__(board)
        self.name, self.value = name, value

    def acquire(self, n: int) -> bool:
        """AcquireGreaterEqual n: take n if the value is at least n (else take nothing)."""
        if self.value < n:
            return False
        self.value -= n
        return True

    def release(self, n: int):
        self.value += n
        if self.waiters:
            self.fire()
