"""Launch replay: what a launch moves and computes, and in which order, is decided by the
machine's state when it starts (locks, BD and stream positions, where each core is, which task
waits on what), never by data, so once a launch ends in a state a recorded launch started from,
later launches replay that cycle's traces of data actions (Copy, Fill, Drain, a core's call) on
their own host windows instead of resuming the tasks; a mem-tile buffer that only relays host
words within a launch is skipped (its reads become Fills), and a core's buffer whose words are
only ever kernel inputs filled from the host in the same launch is not filled, the kernels reading
those host words in place (`forwarded`): no host buffer can observe either.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from iron.runtime.emulator.acts import Copy, Drain, Fill, Invoked, in_order

RECORDED = 64  # launches recorded while looking for a cycle; after that, none
RECORDED_ACTIONS = 1 << 18  # data actions kept in recorded traces; beyond that, none are recorded


@dataclass(frozen=True, eq=False)
class Forwarded:
    """An Invoked whose kernel inputs `reads` ((step, pointer) -> the Fill that put its words in
    the tile buffer) read those host words in place instead; a piece of a window that is not
    one view of the pointer's shape is copied first, into an array of its own (the tile buffer
    is never written: nothing reads it)."""

    invoked: Invoked
    reads: dict

    @property
    def ops(self) -> set[int]:
        return {fill.op for fill in self.reads.values()}

    def bind(self, windows: list):
        pointers = [list(step.pointers) for step in self.invoked.steps]
        before = []
        for (k, j), fill in self.reads.items():
            pointers[k][j] = host_operand(fill, windows, pointers[k][j], self.invoked.steps[k].call.strided_inputs, before)
        runs = [step.call.bind(ptrs, step.sizes, step.attrs) if any(k == i for k, _ in self.reads) else step.run
                for i, (step, ptrs) in enumerate(zip(self.invoked.steps, pointers))]
        return in_order([*before, *runs])


def host_operand(fill: Fill, windows: list, pointer: np.ndarray, strided: bool, before: list) -> np.ndarray:
    """The host words `fill` would put where `pointer` views, as an array like it: in place, or
    an array of its own that a copy appended to `before` fills."""
    view = in_place(windows[fill.op].piece(fill.moved, fill.count), pointer, strided)
    if view is None:
        view = np.empty(pointer.shape, pointer.dtype)
        before.append(fill.bind(windows, view.reshape(-1).view(np.uint32)))
    return view


def in_place(piece, pointer: np.ndarray, strided: bool) -> np.ndarray | None:
    """The host words `piece` as an array of `pointer`'s dtype and shape without a copy, its rows
    contiguous as in the tile buffer (and the whole contiguous unless the call takes `strided`
    arrays), else None."""
    if piece is None:
        return None
    try:
        view = np.reshape(piece.view(pointer.dtype), pointer.shape, copy=False)
    except ValueError:
        return None
    rows = view.ndim == 0 or view.strides[-1] == view.itemsize
    return view if rows and (strided or view.flags.c_contiguous) else None


def _fixed(act):
    """The act as a callable when it reads no window (a Copy, a core's call, a Batch of those);
    else the act, bound to the windows when a launch runs."""
    if type(act) is Copy:
        return act.compile()
    if type(act) is Invoked:
        return act.run
    return act if getattr(act, "ops", True) else act.bind([])


class Compiled:
    """One launch of the cycle as callables, in order: a Copy's and a core's call fixed, a Fill's,
    a Drain's and a Forwarded call's bound to the windows of its ops in the launch replayed last,
    and bound again when the next launch changes one (host buffer, patched offset)."""

    def __init__(self, trace: list):
        self.acts = [_fixed(act) for act in trace]
        self.moves: dict[int, list] = {}   # op -> [(position, Fill, Drain, Forwarded or Batch)]
        for position, act in enumerate(trace):
            for op in (act.op,) if type(act) in (Fill, Drain) else getattr(act, "ops", ()):
                self.moves.setdefault(op, []).append((position, act))
        self.bound: dict[int, object] = dict.fromkeys(self.moves)   # op -> its window bound

    def run(self, windows: list):
        acts, bound = self.acts, self.bound
        stale = {}   # position -> act, each bound once though it reads the windows of several ops
        for op, moves in self.moves.items():
            window = windows[op]
            if bound[op] is not window:
                bound[op] = window
                stale.update(moves)
        for position, move in stale.items():
            acts[position] = move.bind(windows)
        for act in acts:
            act()


class Replay:
    """The launches recorded so far, then, once found, the cycle of compiled traces they repeat.
    `relays` are the buffers the shortcut may skip (mem-tile ones), `hosts` each op's host buffer;
    `arrange` orders the cycle's traces' acts (batch.batched runs their kernel calls in batches)."""

    def __init__(self, start: tuple | None, board, relays: set, hosts: list[str], arrange=list):
        self.board, self.relays, self.hosts, self.arrange = board, relays, hosts, arrange
        self.recorded: list | None = []  # (state at start, trace) of launches so far
        self.start = start                # the state the next launch starts from
        self.cycle: list | None = None    # the compiled traces the launches repeat, once found
        self.turn = 0                     # the one the next launch replays
        self.touched: set = set()         # the tile buffers the cycle's actions read or write (but
        # those only read in place: forwarded)
        self.replayed = 0

    @property
    def recording(self) -> bool:
        return self.recorded is not None

    def learn(self, trace: list, end: tuple | None):
        """Keep the launch just run with the state it started from; find the cycle once the
        machine is back in a recorded start state with every state since known."""
        recorded = self.recorded
        recorded.append((self.start, trace))
        self.start = end
        first = next((k for k, (state, _) in enumerate(recorded) if state is not None and state == end), None)
        if first is not None and all(state is not None for state, _ in recorded[first:]):
            cycle = forwarded(relayed([trace for _, trace in recorded[first:]], self.relays, self.hosts), self.hosts)
            self.cycle = [Compiled(trace) for trace in self.arrange(cycle)]
            forwarded_only = {f.into for trace in cycle for act in trace if type(act) is Forwarded for f in act.reads.values()}
            self.touched = {b for trace in cycle for act in trace for b in tile_buffers(act)} - forwarded_only
        kept = sum(len(trace) for _, trace in recorded)
        if first is not None or len(recorded) == RECORDED or kept > RECORDED_ACTIONS:
            self.recorded = self.start = None

    def replay(self):
        """Run the data actions of the launch the cycle is at (on this launch's windows)."""
        launch = self.cycle[self.turn]
        self.turn = (self.turn + 1) % len(self.cycle)
        launch.run(self.board.windows)
        self.replayed += 1


def relayed(cycle: list[list], relays: set, hosts: list[str]) -> list[list]:
    """The cycle's traces with every relay buffer that only relays host words skipped (module
    docstring): its Fills dropped, each Copy out of it a Fill of the host words it holds."""
    skipped = {b for b in relays if not any(
        (type(act) is Copy and act.into is b) or (type(act) is Drain and act.source is b) for t in cycle for act in t)}
    while skipped:
        traces = [_skip(trace, skipped, hosts) for trace in cycle]
        failed = {b for t in traces if isinstance(t, set) for b in t}
        if not failed:
            return traces
        skipped -= failed
    return cycle


def _skip(trace: list, skipped: set, hosts: list[str]) -> list | set:
    """The trace without the Fills into `skipped` buffers, or the buffers a Copy read without a
    Fill of this launch holding its words."""
    held: dict = {b: [] for b in skipped}  # per buffer, the Fills whose words it holds
    out, failed = [], set()
    for act in trace:
        kind = type(act)
        if kind is Fill and act.into in held:
            end = act.start + act.count
            held[act.into] = [f for f in held[act.into] if f.start + f.count <= act.start or end <= f.start] + [act]
        elif kind is Copy and act.source in held:
            fill = next((f for f in held[act.source]
                         if f.start <= act.at and act.at + act.count <= f.start + f.count), None)
            if fill is None:
                failed.add(act.source)
                continue
            out.append(Fill(fill.op, fill.moved + act.at - fill.start, act.count, act.into, act.start))
        else:
            if kind is Drain:  # the host words Fills read may change from here on
                for b, fills in held.items():
                    held[b] = [f for f in fills if hosts[f.op] != hosts[act.op]]
            out.append(act)
    return failed or out


def tile_buffers(act) -> tuple:
    """The tile buffers a data action reads or writes."""
    kind = type(act)
    if kind is Fill:
        return (act.into,)
    if kind is Copy:
        return act.into, act.source
    if kind is Drain:
        return (act.source,)
    return act.invoked.buffers if kind is Forwarded else act.buffers


def forwarded(cycle: list[list], hosts: list[str]) -> list[list]:
    """The cycle's traces with every core buffer whose words are only ever read as kernel inputs
    filled from the host in the same launch no longer filled: its Fills dropped, each of those
    reads a Forwarded one of the Fill's host words (module docstring)."""
    filled = {act.into for trace in cycle for act in trace if type(act) is Fill}
    reads = [_reads(trace, filled, hosts) for trace in cycle]
    kept = filled - {b for _, failed in reads for b in failed}
    if not kept:
        return cycle
    out = []
    for trace, (found, _) in zip(cycle, reads):
        acts = []
        for position, act in enumerate(trace):
            if type(act) is Fill and act.into in kept:
                continue
            mine = {key: fill for key, fill in found.get(position, {}).items() if fill.into in kept}
            acts.append(Forwarded(act, mine) if mine else act)
        out.append(acts)
    return out


def _reads(trace: list, filled: set, hosts: list[str]) -> tuple[dict, set]:
    """Per Invoked (by position), its kernel inputs in `filled` buffers that read exactly the words
    a Fill of this launch put there ((step, pointer) -> Fill); and the buffers read any other way."""
    held: dict = {b: [] for b in filled}   # per buffer, the Fills whose words it holds
    found, failed = {}, set()

    def written(buffer, start: int, end: int):
        if buffer in held:
            held[buffer] = [f for f in held[buffer] if f.start + f.count <= start or end <= f.start]

    for position, act in enumerate(trace):
        kind = type(act)
        if kind is Fill and act.into in held:
            written(act.into, act.start, act.start + act.count)
            held[act.into].append(act)
        elif kind is Copy:
            failed.add(act.source)
            written(act.into, act.start, act.start + act.count)
        elif kind is Drain:
            failed.add(act.source)
            for b, fills in held.items():   # the host words Fills read may change from here on
                held[b] = [f for f in fills if hosts[f.op] != hosts[act.op]]
        elif kind is Invoked:
            found[position] = _invoked_reads(act, held, failed, written)
    return found, failed


def _invoked_reads(act: Invoked, held: dict, failed: set, written) -> dict:
    """(step, pointer) -> Fill for the call's inputs read from held Fills; every other buffer the
    call may read is failed, and what it writes no longer holds the Fills' words."""
    reads = {}
    for k, step in enumerate(act.steps):
        places = [where(pointer, act.buffers) for pointer in step.pointers]
        if step.call is None or None in places:   # a scalar step, a kernel of per-call sizes: any
            failed.update(act.buffers)
            for b in act.buffers:
                written(b, 0, b.words.size)
            continue
        *inputs, (out, start, nbytes) = places
        for j, (buffer, start_in, nbytes_in) in enumerate(inputs):
            fill = next((f for f in held.get(buffer, ()) if (4 * f.start, 4 * f.count) == (start_in, nbytes_in)), None)
            if fill is None:
                failed.add(buffer)
            else:
                reads[(k, j)] = fill
        if step.reads_out:
            failed.add(out)
        written(out, start // 4, -(-(start + nbytes) // 4))
    return reads


def where(pointer: np.ndarray, buffers: tuple) -> tuple | None:
    """(tile buffer, byte offset, bytes) of what `pointer` views, or None when no buffer of the
    call holds it."""
    address = pointer.__array_interface__["data"][0]
    for buffer in buffers:
        base = buffer.data.__array_interface__["data"][0]
        if base <= address and address + pointer.nbytes <= base + buffer.data.nbytes:
            return buffer, address - base, pointer.nbytes
    return None
