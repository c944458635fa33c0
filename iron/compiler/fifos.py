"""FIFO identities: which FIFO a name stands for, as a small frozen record (the group it belongs
to, what it carries, which one of several), built where the FIFO is decided and never parsed
back. The compiler's records of FIFOs (routes, relays, moves) hold the FifoId; `FifoId.name` is
the MLIR symbol printed from it (`g1_p0_host`, `g0_a1_mem`, `g2_part0_1_r1`), by which the Plan,
one-to-one with the MLIR, and its printers and the emulator know a FIFO."""
from __future__ import annotations

from dataclasses import dataclass

from iron.ir import Term

EMIT = "emit"   # the Emit core's group: its FIFOs, its core and its function are named after it


class Stem(Term):
    """What a FIFO carries, the stem of its name."""

    IN = "in"                    # host tensors and per-call words into a group's cores (the Emit's words)
    HOST = "host"                # outputs, state writes and carried elements back to the host
    OUT = "out"                  # results other groups or the Emit read
    W = "w"                      # a streamed matrix's blocks; a stream's rows every row shares
    PART = "part"                # one core's part of a result, into a mem-tile join
    A = "a"                      # a grid's blocks of A
    B = "b"                      # a grid's blocks of B
    X = "x"                      # a stream's blocks of one input
    FEEDBACK = "feedback"        # the Emit's next words back to the host
    SHARED_IN = "shared_in"      # several groups' inputs through one shim channel
    SHARED_HOST = "shared_host"  # several groups' host results through one shim channel


@dataclass(frozen=True)
class FifoId:
    """A FIFO: `group`'s (None: no one group's), carrying `stem`, the one `at` (a part, a
    column, (row, column), (input, row, column)); `core`: a split group's core it leaves;
    `mem`: the leg from the host into the mem tile that splits it; `result`: which result of a
    stream it carries (`stream_every_result`: k > 0 for a returned earlier call's)."""

    group: str | None
    stem: Stem
    at: tuple[int, ...] = ()
    core: int | None = None
    mem: bool = False
    result: int = 0

    @property
    def name(self) -> str:
        head = "" if self.group is None else f"{self.group}_"
        core = "" if self.core is None else f"p{self.core}_"
        tail = "_mem" * self.mem + (f"_r{self.result}" if self.result else "")
        return f"{head}{core}{self.stem.value}{'_'.join(map(str, self.at))}{tail}"

    def __str__(self) -> str:
        return self.name


def fifo_id(group: str | None, stem: Stem, *at: int, core: int | None = None, mem: bool = False,
            result: int = 0) -> FifoId:
    """The FIFO these identify."""
    return FifoId(group, stem, at, core, mem, result)


def fifo(group: str | None, stem: Stem, *at: int, core: int | None = None, mem: bool = False,
         result: int = 0) -> str:
    """The name of the FIFO these identify, as the Plan's values print it (FifoId.name)."""
    return fifo_id(group, stem, *at, core=core, mem=mem, result=result).name


EMIT_IN = fifo(EMIT, Stem.IN)          # this call's words into the Emit core
FEEDBACK = fifo(None, Stem.FEEDBACK)   # the next call's words from it
