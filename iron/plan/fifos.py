"""FIFO identities: which FIFO a name stands for, as a small frozen record (the group it belongs
to, what it carries, which one of several), built where the FIFO is decided and never parsed
back. The compiler's records of FIFOs (routes, relays, moves) and the Plan hold the FifoId (its
role derived from it); `FifoId.name` is the MLIR symbol the printers print from it (`g1_p0_host`,
`g0_a1_mem`, `g2_part0_1_r1`)."""
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


class FifoRole(Term):
    """What a FIFO carries for its group, as the shim channels and relays treat it: its stem's kind."""

    INPUT = "in"              # host tensors and per-call words into a group's cores (one packed object)
    WEIGHTS = "w"             # blocks of a streamed or tiled matrix, a stream's blocks (stems w, a, b, x)
    OUTPUT = "out"            # results other groups or the Emit read
    HOST = "host"             # outputs, state writes and carried elements back to the host
    PART = "part"             # a split group's part of the result, into the mem-tile join
    SHARED_IN = "shared_in"   # several groups' inputs through one shim channel (a mem-tile split)
    SHARED_HOST = "shared_host"  # several groups' host results through one shim channel (a join)
    EMIT_IN = "emit_in"       # this call's words into the Emit core
    FEEDBACK = "feedback"     # the next call's words from the Emit core


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

    def __repr__(self) -> str:   # messages quote a FIFO by its symbol, as they quote a Buffer's name
        return repr(self.name)

    @property
    def role(self) -> FifoRole:
        if self.stem in (Stem.W, Stem.A, Stem.B, Stem.X):
            return FifoRole.WEIGHTS
        return FifoRole.EMIT_IN if self.stem is Stem.IN and self.group == EMIT else FifoRole(self.stem.value)


def fifo_id(group: str | None, stem: Stem, *at: int, core: int | None = None, mem: bool = False,
            result: int = 0) -> FifoId:
    """The FIFO these identify."""
    return FifoId(group, stem, at, core, mem, result)


EMIT_IN = fifo_id(EMIT, Stem.IN)          # this call's words into the Emit core
FEEDBACK = fifo_id(None, Stem.FEEDBACK)   # the next call's words from it
