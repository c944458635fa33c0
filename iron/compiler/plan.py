"""The Plan: everything a compiled design is, one-to-one with the MLIR and kernel sources printed
from it, and nothing else decides behaviour.

The emulator executes a Plan, the MLIR printer prints it, the sources printer writes its C++
glue, the XRT backend runs what was built from it. None of them reads the traced Program. This
module only defines the data; `lower` (iron/compiler/lower.py) makes Plans.

How a design runs (npu-platform.md sections 2-3):
- Cores start once and loop forever. Each iteration of a core's `program` is one launch's work:
  it acquires objects from FIFOs, invokes a C++ function on them, releases them.
- A launch runs only the runtime `sequence`: DMA ops moving words between host buffers and the
  FIFOs that touch a shim tile, and waits.
- A FIFO carries objects of `nbytes` bytes (a multiple of 4). Seen from a shim DMA it is a
  stream of 32-bit words: an MM2S op appends words, the consumer gets them `nbytes` at a time; an
  S2MM op drains words into host memory. At most `depth` objects are held at each end.
- A Link on a mem tile forwards (1 -> 1), splits (1 -> n: consumer i gets bytes
  [offsets[i], offsets[i] + its nbytes) of every source object) or joins (n -> 1: source i fills
  bytes [offsets[i], ...) of every destination object) objects.
- Per-call values travel as 32-bit `words` (the scratchpad). Words 0..n-1 are the per-call values
  in body()'s parameter order; the rest are derived (`WordDef`): DMA offsets,
  patched into DMA ops (`Dma.patch_word`), and core operands, delivered to cores by DMA from
  the `words` host buffer into their input objects. The host computes them for a host-driven
  call; on a full-ELF device the `emit` core computes the next call's words and writes them
  through `feedback`, the next run's scratchpad.

Units: host-buffer offsets, DMA sizes and strides are in 32-bit words; object offsets in bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Tile:
    col: int
    row: int
    kind: str  # "shim" | "mem" | "compute"

    @property
    def name(self) -> str:
        prefix = {"shim": "shim", "mem": "mem", "compute": "tile"}[self.kind]
        return f"{prefix}_{self.col}_{self.row}"


@dataclass(frozen=True)
class HostBuffer:
    """A runtime-sequence argument (in argument order in Plan.host_buffers).

    role: "consts" (weights and params, written when the design is loaded), "states" (persist
    across calls), "inputs" (per-call tensors), "outputs" (outputs and carried elements),
    "words" (the per-call scratchpad), "feedback" (where the Emit writes the next scratchpad)."""

    name: str
    role: str
    nwords: int


@dataclass(frozen=True)
class Placement:
    """Where one host-visible tensor lives: `buffer` at word `offset`, C-contiguous."""

    name: str             # user's name: weight/param/state name, input name, "out0", "carry.node"
    kind: str             # "weight" | "param" | "state" | "input" | "output" | "carry"
    buffer: str
    offset: int           # in words
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nwords(self) -> int:
        return -(-int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize // 4)


@dataclass(frozen=True)
class Fifo:
    """An object FIFO: `producer` tile to `consumers`, objects of `nbytes`, `depth` at each end."""

    name: str
    producer: Tile
    consumers: tuple[Tile, ...]
    depth: int
    nbytes: int
    dtype: np.dtype = np.dtype(np.int32)   # element type printed in the memref (nbytes // itemsize elements)
    shared_memory: bool = False            # neighbouring tiles: no DMA channel used

    @property
    def elements(self) -> int:
        return self.nbytes // self.dtype.itemsize


@dataclass(frozen=True)
class Link:
    """A mem-tile link: `sources` -> `destinations` with byte offsets (split or join)."""

    tile: Tile
    sources: tuple[str, ...]
    destinations: tuple[str, ...]
    source_offsets: tuple[int, ...] = ()       # join: where each source lands in the destination
    destination_offsets: tuple[int, ...] = ()  # split: where each destination starts in the source


@dataclass(frozen=True)
class Buffer:
    """A tile-local buffer (aie.buffer): a fused group's intermediate, kept across launches."""

    name: str
    tile: Tile
    nbytes: int
    dtype: np.dtype = np.dtype(np.int32)


# ---- what runs on a core -----------------------------------------------------------------------

@dataclass(frozen=True)
class Ptr:
    """A pointer argument: `source` (an acquired FIFO object or a Buffer, by name) + `offset` bytes,
    plus `block_stride` bytes per iteration of the enclosing Loop."""

    source: str
    offset: int = 0
    block_stride: int = 0


@dataclass(frozen=True)
class Load:
    """An i32 value read from `source` at byte `offset` (a per-call word, a carried element)."""

    source: str
    offset: int = 0


@dataclass(frozen=True)
class Imm:
    """An immediate: value and C type "i32" | "f32"."""

    value: Any
    ctype: str = "i32"


@dataclass(frozen=True)
class KernelStep:
    """Call a library or user kernel symbol with pointer and scalar arguments."""

    symbol: str
    args: tuple            # of Ptr | Load | Imm


@dataclass(frozen=True)
class ScalarStep:
    """dest (i32 at `Ptr`) = op(a, b) with i32 wrap-around; op in WordDef.OPS."""

    dest: Ptr
    op: str
    a: Any                 # Load | Imm
    b: Any = None


@dataclass(frozen=True)
class Function:
    """A C++ function a core invokes: its parameters (object / buffer names, in order) and steps.
    The sources printer writes it as `extern "C" void name(uint8_t* p0, ..., int32_t block)`."""

    name: str
    params: tuple[str, ...]
    steps: tuple           # of KernelStep | ScalarStep
    blocked: bool = False  # takes the enclosing Loop's iteration index


@dataclass(frozen=True)
class Acquire:
    fifo: str
    port: str              # "Produce" | "Consume"
    count: int = 1


@dataclass(frozen=True)
class Release:
    fifo: str
    port: str
    count: int = 1


@dataclass(frozen=True)
class Invoke:
    function: str
    objects: tuple[str, ...]   # FIFO (acquired) and Buffer names bound to the function's params


@dataclass(frozen=True)
class Loop:
    """Repeat `body` `count` times within one launch (e.g. one matrix block per iteration)."""

    count: int
    body: tuple


@dataclass(frozen=True)
class Core:
    """A compute tile's program: `program` is one launch's work; the core repeats it forever."""

    tile: Tile
    group: str                 # the fused group (or "emit") it runs
    program: tuple             # of Acquire | Release | Invoke | Loop
    stack_bytes: int = 1024


# ---- the runtime sequence ----------------------------------------------------------------------

@dataclass(frozen=True)
class Dma:
    """aiex.npu.dma_memcpy_nd: move words between host `buffer` and `fifo`.

    direction "mm2s" (host -> FIFO) or "s2mm" (FIFO -> host). The access pattern is
    offset + patch + sum(i_d * strides[d]) for i_d < sizes[d], outermost first, in words;
    `patch_word` names a scratchpad word whose value is added to `offset` at launch."""

    direction: str
    fifo: str
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
        return int(np.prod(self.sizes, dtype=np.int64))


@dataclass(frozen=True)
class Wait:
    """aiex.npu.dma_wait: wait for the completion tokens of `fifo`'s DMA ops issued so far."""

    fifo: str


# ---- per-call words ----------------------------------------------------------------------------

@dataclass(frozen=True)
class WordDef:
    """One scratchpad word. kind: "carried" | "scratchpad" (given per call), "dma" (an offset
    patched into DMA ops), "core" (an operand a core reads), "next" (a carried value's next value
    when it is an expression of this call's values; Plan.carry points at it). Derived words are
    op(a, b) over earlier words ("word", i) and constants ("const", v)."""

    OPS = ("add", "sub", "mul", "floordiv", "mod", "min", "max", "copy")

    index: int
    name: str
    kind: str
    op: str | None = None
    a: tuple | None = None
    b: tuple | None = None
    bound: tuple[int, int] | None = None   # value must lie in [lo, hi) (a per-call index)
    what: str = ""                          # the user's text of the index, for the range error


@dataclass(frozen=True)
class Emit:
    """The device-loop step (full ELF only): the core that computes the next call's words.

    `next_values` says, per carried name, where its next value comes from: ("word", i) of this
    call, ("const", v), or ("elem", fifo, byte offset) a carried element a core computed. The
    emit core's Function computes them and the derived words of `target` into its `feedback`
    object. `target_words` is the scratchpad layout of the version this one feeds."""

    tile: Tile
    next_values: tuple[tuple[str, tuple], ...]
    target_words: tuple[WordDef, ...]
    feedback_fifo: str


@dataclass(frozen=True)
class KernelDecl:
    """A `func.func private` declaration of a Function the cores invoke: its symbol, MLIR argument
    types ("memref<256xi32>", ..., "i32" for a Loop index) and the object file it links with
    (`<function>.o`, compiled from a glue source that includes the kernel sources it calls)."""

    symbol: str
    arg_types: tuple[str, ...]
    link_with: str


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
    kernels: tuple[KernelDecl, ...]          # one declaration per Function
    cores: tuple[Core, ...]
    sequence: tuple                          # of Dma | Wait
    words: tuple[WordDef, ...]
    emit: Emit | None
    carry: tuple[tuple[str, tuple], ...] = ()  # carried name -> ("word", i) a derived "next" word of
                                               # this call, or ("output", placement name) an element
    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()   # group name -> kernel calls fused in it (for describe())
    rules: tuple[tuple[str, str], ...] = ()                # (rule name, what it decided), for describe()
    notes: dict = field(default_factory=dict, compare=False)

    # lookups used by every consumer of a Plan
    def fifo(self, name: str) -> Fifo:
        return next(f for f in self.fifos if f.name == name)

    def placement(self, name: str) -> Placement:
        return next(p for p in self.placements if p.name == name)

    def host_buffer(self, role: str) -> HostBuffer:
        return next(b for b in self.host_buffers if b.role == role)

    def function(self, name: str) -> Function:
        return next(f for f in self.functions if f.name == name)

    @property
    def parameters(self) -> tuple[WordDef, ...]:
        """The per-call scratchpad words."""
        return self.words

