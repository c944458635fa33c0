"""The Plan: everything a compiled design is, as typed data (enums and small frozen dataclasses),
one-to-one with the MLIR and C++ printed from it. The emulator runs it, the printers print it,
the XRT backend runs what was built from it; none of them reads the traced Program. Host
offsets, DMA sizes and strides count 32-bit words; object offsets count bytes. How a design
runs (cores looping forever, a launch running the sequence) is docs/platform.md section 6."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Union

import numpy as np

from iron.ir import SCALAR_BINARY, Term
from iron.plan.fifos import FifoId, FifoRole
from iron.plan.rules import Decision, Fill, Rule


class TileKind(Term):
    SHIM, MEM, COMPUTE = "shim", "mem", "compute"


class Direction(Term):
    """A DMA's direction: MM2S reads memory into a stream, S2MM writes a stream to memory."""

    MM2S, S2MM = "mm2s", "s2mm"


class Port(Term):
    """The end of a FIFO a core acquires: the producer's or a consumer's."""

    PRODUCE, CONSUME = "Produce", "Consume"


class HostRole(Term):
    """What a runtime-sequence argument holds."""

    CONSTS = "consts"      # weights and params, written when the design is loaded
    STATES = "states"      # persist across calls
    INPUTS = "inputs"      # per-call tensors
    OUTPUTS = "outputs"    # outputs and carried elements
    WORDS = "words"        # the per-call scratchpad
    FEEDBACK = "feedback"  # where the Emit writes the next scratchpad


class PlacementKind(Term):
    WEIGHT, PARAM, STATE, INPUT, OUTPUT, CARRY = "weight", "param", "state", "input", "output", "carry"
    CUT = "cut"          # a value crossing a cut between segments: the compiler's DDR buffer for it


class WordKind(Term):
    CARRIED = "carried"        # given per call, carried from call to call
    SCRATCHPAD = "scratchpad"  # given per call
    DMA = "dma"                # an offset patched into DMA ops
    CORE = "core"              # an operand a core reads
    NEXT = "next"              # a carried value's next value, an expression of this call's values

    @property
    def given(self) -> bool:
        return self in (WordKind.CARRIED, WordKind.SCRATCHPAD)


@dataclass(frozen=True)
class Tile:
    col: int
    row: int
    kind: TileKind

    @property
    def name(self) -> str:
        prefix = "tile" if self.kind is TileKind.COMPUTE else self.kind.value
        return f"{prefix}_{self.col}_{self.row}"


@dataclass(frozen=True)
class HostBuffer:
    """A runtime-sequence argument (in argument order in Plan.host_buffers)."""

    name: str
    role: HostRole
    nwords: int


@dataclass(frozen=True)
class Placement:
    """Where one host-visible tensor lives: `buffer` at word `offset`, C-contiguous; `padded`:
    the larger shape it lies in when `pad_to_block` pads it (the user's region its first rows
    and columns, the rest zeros the device reads and the host never sees), or `pad_rows_to_words`
    (`word_rows`: each row to whole words); `lead`: where the user's region starts, when
    `pad_lead_to_words` moves it off its first word."""

    name: str             # user's name: weight/param/state name, input name, "out0", "carry.node"
    kind: PlacementKind
    buffer: str
    offset: int           # in words
    shape: tuple[int, ...]
    dtype: np.dtype
    shown: str | None = None   # what texts call it, when not `name`: what a segment's output stands for
    padded: tuple[int, ...] | None = None
    fill: Fill = Fill.ZEROS         # what its padding holds, as its readers may rely on it
    word_rows: bool = False         # padded by `pad_rows_to_words`: its rows' padding holds nothing anyone reads
    lead: int = 0                   # elements of padding before the user's region (`pad_lead_to_words`)

    @property
    def stored(self) -> tuple[int, ...]:
        """The shape it lies in: `padded`, or its own."""
        return self.padded or self.shape

    @property
    def nwords(self) -> int:
        return -(-(self.lead + math.prod(self.stored)) * self.dtype.itemsize // 4)   # math.prod: called per DMA planned


@dataclass(frozen=True)
class Fifo:
    """An object FIFO: `producer` tile to `consumers`, objects of `nbytes`, `depth` at each end;
    `name` is its identity, which the Plan's other values name it by (the printers print its symbol)."""

    name: FifoId
    producer: Tile
    consumers: tuple[Tile, ...]
    depth: int
    nbytes: int
    dtype: np.dtype = np.dtype(np.int32)   # the objects' element type (nbytes // itemsize elements)
    shared_memory: bool = False            # neighbouring tiles: no DMA channel used

    @property
    def role(self) -> FifoRole:
        return self.name.role


@dataclass(frozen=True)
class Link:
    """A mem-tile link: `sources` -> `destinations` with byte offsets (split or join)."""

    tile: Tile
    sources: tuple[FifoId, ...]
    destinations: tuple[FifoId, ...]
    source_offsets: tuple[int, ...] = ()       # join: where each source lands in the destination
    destination_offsets: tuple[int, ...] = ()  # split: where each destination starts in the source


@dataclass(frozen=True)
class Buffer:
    """A tile-local buffer (aie.buffer): a fused group's intermediate, kept across launches."""

    name: str
    tile: Tile
    nbytes: int
    dtype: np.dtype = np.dtype(np.int32)


@dataclass(frozen=True)
class Ptr:
    """A pointer argument: `source` (an acquired FIFO's object or a Buffer by its name) + `offset` bytes,
    plus `block_stride` bytes per iteration of the enclosing Loop."""

    source: FifoId | str
    offset: int = 0
    block_stride: int = 0


@dataclass(frozen=True)
class Load:
    """An i32 value read from `source` at byte `offset`: a per-call word, or a carried element a
    core computed (where the Emit finds it in a FIFO's object)."""

    source: FifoId | str
    offset: int = 0


@dataclass(frozen=True)
class WordRef:
    """A word operand: scratchpad word `index` of this call."""

    index: int

    def __str__(self) -> str:
        return f"w{self.index}"


@dataclass(frozen=True)
class Const:
    """A word operand: a constant int32 value."""

    value: int

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class Output:
    """Where the host reads a carried element: the output placement `placement`."""

    placement: str


Operand = Union[WordRef, Const]


class WordOp(Term):
    """What a derived word or a ScalarStep computes from a and b, wrapping to i32 (`copy`: a)."""

    ADD, SUB, MUL, FLOORDIV, MOD, MIN, MAX, COPY = "add", "sub", "mul", "floordiv", "mod", "min", "max", "copy"

    def fn(self, a: int, b: int) -> int:
        return SCALAR_BINARY[self.value](a, b) if self is not WordOp.COPY else a


class CType(Term):
    """A scalar argument's C type (a kernel's `c_attrs` name theirs by value)."""

    I32, F32 = "i32", "f32"


@dataclass(frozen=True)
class Imm:
    """An immediate of C type `ctype`."""

    value: Any
    ctype: CType = CType.I32

    @classmethod
    def of(cls, value, ctype: str) -> Imm:
        """`value` as passed to C as `ctype` ("i32" | "f32", a kernel attribute's)."""
        ctype = CType(ctype)
        return cls(float(value) if ctype is CType.F32 else int(value), ctype)


@dataclass(frozen=True)
class KernelStep:
    """Call a kernel class (held itself, never looked up by name; its C symbol spelled from it and
    the dtypes) on inputs of `dtype` giving `out`, with pointer and scalar arguments."""

    kernel: type
    dtype: np.dtype
    out: np.dtype
    args: tuple            # of Ptr | Load | Imm
    ins: tuple = ()        # each input's dtype when they differ (`Kernel.mixed`: uint8 x int8), else ()

    @classmethod
    def of(cls, kernel: type, dtype, args, out=None) -> KernelStep:
        """The step calling `kernel` on `dtype` inputs giving `out` (default: its default output);
        `dtype` a tuple names each input's dtype (a mixed call's differ)."""
        ins = tuple(map(np.dtype, dtype)) if isinstance(dtype, tuple) else (np.dtype(dtype),)
        ins = ins if len(set(ins)) > 1 else ()
        first = np.dtype(dtype[0] if isinstance(dtype, tuple) else dtype)
        default = kernel.mixed[ins] if ins else kernel.out_dtype(first)
        return cls(kernel, first, np.dtype(default if out is None else out), tuple(args), ins)

    @property
    def in_dtypes(self) -> tuple[np.dtype, ...]:   # each input pointer's
        return self.ins or (self.dtype,) * self.kernel.arity

    @property
    def symbol(self) -> str:
        return self.kernel.symbol(self.dtype, self.out, self.ins)

    @property
    def pointers(self) -> tuple:   # one per input, then the output
        return self.args[:self.kernel.arity + 1]

    @property
    def sizes(self) -> tuple:      # the i32 sizes after the pointers (one or more)
        return self.args[self.kernel.arity + 1: len(self.args) - len(self.kernel.c_attrs)]

    @property
    def attrs(self) -> tuple:      # the attributes' values, in `kernel.c_attrs` order
        return self.args[len(self.args) - len(self.kernel.c_attrs):]


@dataclass(frozen=True)
class ScalarStep:
    """dest (i32 at `Ptr`) = op(a, b) with i32 wrap-around."""

    dest: Ptr
    op: WordOp
    a: Any                 # Load | Imm
    b: Any = None

    @property
    def args(self) -> tuple:   # its operands, as a KernelStep's
        return (self.dest, self.a, self.b)


@dataclass(frozen=True)
class Function:
    """A C++ function a core invokes: its parameters (object / buffer names, in order) and steps.
    The sources printer writes it as `extern "C" void name(uint8_t* p0, ..., int32_t block)`."""

    name: str
    params: tuple[FifoId | str, ...]
    steps: tuple           # of KernelStep | ScalarStep
    blocked: bool = False  # takes the enclosing Loop's iteration index


@dataclass(frozen=True)
class Acquire:
    fifo: FifoId
    port: Port
    count: int = 1


@dataclass(frozen=True)
class Release:
    fifo: FifoId
    port: Port
    count: int = 1


@dataclass(frozen=True)
class Invoke:
    function: str
    objects: tuple[FifoId | str, ...]   # FIFOs (acquired) and Buffer names bound to the function's params


@dataclass(frozen=True)
class Loop:
    """Repeat `body` `count` times within one launch (e.g. one matrix block per iteration)."""

    count: int
    body: tuple


def launch_steps(program: tuple, times: int = 1):
    """(step, how many times one launch runs it) of each step of a core program, a Loop before the
    steps of its body."""
    for step in program:
        yield step, times
        if isinstance(step, Loop):
            yield from launch_steps(step.body, times * step.count)


@dataclass(frozen=True)
class Core:
    """A compute tile's program: `program` is one launch's work; the core repeats it forever."""

    tile: Tile
    group: str                 # the fused group (or "emit") it runs
    program: tuple             # of Acquire | Release | Invoke | Loop
    stack_bytes: int = 1024
    also: tuple[str, ...] = ()   # groups of a looped iteration it runs after `group`, in order (repeat.py)

    @property
    def groups(self) -> tuple[str, ...]:
        return (self.group, *self.also)


@dataclass(frozen=True)
class Dma:
    """A shim DMA op moving words between host `buffer` and `fifo` (MM2S: host -> FIFO) at offset +
    patch + sum(i_d * strides[d]) for i_d < sizes[d], outermost first, in words; `patch_word`
    names a scratchpad word whose value is added to `offset` at launch."""

    direction: Direction
    fifo: FifoId
    buffer: str
    offset: int
    sizes: tuple[int, int, int, int]
    strides: tuple[int, int, int, int]
    bd_id: int
    shim: Tile
    patch_word: int | None = None
    issue_token: bool = False

    @property
    def nwords(self) -> int:
        return math.prod(self.sizes)


@dataclass(frozen=True)
class Wait:
    """Wait for the completion tokens of `fifo`'s DMA ops issued so far."""

    fifo: FifoId


class Moved(NamedTuple):
    """Consecutive Dmas in one direction on one FifoId object (a move's, cut within the shim's
    limits): the words they move."""

    fifo: FifoId
    direction: Direction
    nwords: int


def dma_runs(sequence: tuple) -> list[Moved | Wait]:
    """The sequence as what it moves, a Moved per run of Dmas: what estimates and checks count,
    per move rather than per Dma (a looped sequence has tens of thousands)."""
    runs: list[Moved | Wait] = []
    first, words = None, 0   # the current run's first Dma and its words so far
    for op in (*sequence, None):
        if isinstance(op, Dma) and first is not None and op.fifo is first.fifo and op.direction is first.direction:
            words += op.nwords
            continue
        if first is not None:
            runs.append(Moved(first.fifo, first.direction, words))
        first, words = (op, op.nwords) if isinstance(op, Dma) else (None, 0)
        if isinstance(op, Wait):
            runs.append(op)
    return runs


@dataclass(frozen=True)
class WordDef:
    """One scratchpad word (Plan.carry points at a "next" word). Derived words are op(a, b)
    over earlier words and constants."""

    index: int
    name: str
    kind: WordKind
    op: WordOp | None = None
    a: Operand | None = None
    b: Operand | None = None
    bound: tuple[int, int] | None = None   # value must lie in [lo, hi) (a per-call index)
    what: str = ""                          # the user's text of the index, for the range error
    tensor: str = ""                        # the tensor an index picks from ("" for a bounded attribute)
    sink: int | None = None                 # a state write's patch word: the value sending it to the sink


FLAG_WORDS = 2   # after a fed version's words: the Emit's flag and scratch word


@dataclass(frozen=True)
class Emit:
    """The device-loop step (full ELF only): the core on `tile` computing into the `feedback`
    FIFO's object the next call's words, laid out as `target_words` (the version this one feeds):
    each carried name's next value from `next_values` (a word of this call, a constant, or a Load
    of an element a core computed), the derived words, each bounded one clamped, then the `flag`
    word counting the words that were not, and the `scratch` word the clamping computes in
    (docs/architecture.md, "Device-side bounds")."""

    tile: Tile
    next_values: tuple[tuple[str, Union[WordRef, Const, Load]], ...]
    target_words: tuple[WordDef, ...]

    @property
    def flag(self) -> int:
        return len(self.target_words)

    @property
    def scratch(self) -> int:
        return len(self.target_words) + 1

    @property
    def nwords(self) -> int:   # the target's words, the flag and the scratch word
        return len(self.target_words) + FLAG_WORDS


@dataclass(frozen=True)
class Cut:
    """Where one segment ends and the next begins: before group `before`, with `values` (call
    labels) crossing through their DDR buffers, `nbytes` in all."""

    before: str
    nbytes: int
    values: tuple[str, ...]


@dataclass(frozen=True)
class Choice:
    """A choice by estimated time (cost.py): the `rule` choosing `what` (a grid's blocks, a stream's
    block, a segment's cut), the one chosen and the best rejected (None: no other), each's estimate."""

    rule: Rule
    what: str
    chosen: str
    chosen_ns: float
    rejected: str | None = None
    rejected_ns: float | None = None


@dataclass(frozen=True)
class Repeat:
    """The rule `repeat_over_time` (repeat.py): ONE iteration of a block traced `count` times
    placed (`groups`, iteration 0's), its cores looping `count` times and the sequence moving each
    iteration's `operands` (the host tensors its moves read and write, in iteration 0's order);
    `shared`: the groups of the iteration one core runs in turn (`share_core_in_iteration`);
    `inner`: a block within iteration 0 itself run over time inside each iteration."""

    groups: tuple[str, ...]
    count: int
    operands: tuple[tuple[str, ...], ...]
    shared: tuple[tuple[str, ...], ...] = ()
    inner: Repeat | None = None


@dataclass(frozen=True)
class Plan:
    device: Any                              # aie_utils.Device
    name: str
    full_elf: bool
    image: str                               # "elf" | "xclbin"
    tiles: tuple[Tile, ...]
    host_buffers: tuple[HostBuffer, ...]
    placements: tuple[Placement, ...]
    fifos: tuple[Fifo, ...]
    links: tuple[Link, ...]
    buffers: tuple[Buffer, ...]
    functions: tuple[Function, ...]
    cores: tuple[Core, ...]
    sequence: tuple                          # of Dma | Wait
    words: tuple[WordDef, ...]
    emit: Emit | None
    carry: tuple[tuple[str, Union[WordRef, Output]], ...] = ()  # carried name -> a word of this call, or an element's output
    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()   # group name -> kernel calls fused in it (for describe())
    rules: tuple[Decision, ...] = ()                # (rule, what it decided), for describe()
    holds: dict[FifoId | str, str] = field(default_factory=dict, compare=False)      # FIFO or Buffer -> what it holds
    closed_by: dict[str, Rule | None] = field(default_factory=dict, compare=False)  # group -> the rule closing it, None: the body's end
    segments: tuple[Plan, ...] = ()   # a design bigger than the array: its configurations in run order (segment.py)
    cuts: tuple[Cut, ...] = ()        # between consecutive segments
    choices: tuple[tuple[str, Choice], ...] = ()   # group name -> a choice the cost model made for it
    repeat: Repeat | None = None      # a block run over time: one placed iteration, its cores looping

    def __post_init__(self):
        stray = [rule for rule, _ in self.rules if not isinstance(rule, Rule)]
        if stray:   # a rule named by a string: every rule is a member of iron.plan.rules.Rule
            raise TypeError(f"plan.rules names {stray!r}: name each rule by its Rule member")

    @property
    def configurations(self) -> tuple[Plan, ...]:
        """The Plans loaded one after another in a call: the segments, or the Plan itself."""
        return self.segments or (self,)

    def fifo(self, name: FifoId) -> Fifo:
        return next(f for f in self.fifos if f.name == name)

    def placement(self, name: str) -> Placement:
        return next(p for p in self.placements if p.name == name)

    def host_buffer(self, role: HostRole) -> HostBuffer:
        return next(b for b in self.host_buffers if b.role == role)

    def function(self, name: str) -> Function:
        return next(f for f in self.functions if f.name == name)

