"""A compiled graph's hold on a backend, the emulator or XRT: `open_session` loads the design once,
writes its weights and params and binds the graph's state memory (`DeviceStates`, shared by
every version compiled from the graph); a session reads and writes placements, makes host-driven
calls and holds runs for CarriedLoop, moving bytes whose meaning the Plan decides.
"""
from __future__ import annotations

import math
import os

import numpy as np

from iron import debug
from iron.errors import PlanError
from iron.plan.cost import generation
from iron.plan.plan import HostRole, PlacementKind
from iron.runtime.timeline import HOST, SpanKind, traced


def open_session(compiled):
    from iron.runtime.backend import select_backend

    if select_backend() == "xrt":
        return XrtSession(compiled)
    return EmulatorSession(compiled)


def placement_view(words: np.ndarray, p) -> np.ndarray:
    """The typed, shaped view of placement `p` inside a uint32 host buffer: the user's region of
    a padded one (its padding stays as made, zeros), after its lead."""
    nbytes = int(np.prod(p.stored, dtype=np.int64)) * p.dtype.itemsize
    start = p.offset * 4 + p.lead * p.dtype.itemsize
    whole = words.view(np.uint8)[start:start + nbytes].view(p.dtype).reshape(p.stored)
    return whole if p.padded is None else whole[tuple(slice(0, n) for n in p.shape)]


class DeviceStates:
    """The device memory of a graph's states on one device, shared by every version compiled from
    it (a first version and the body it feeds write the same trail), and the device loops with
    runs in flight on it. A host call, read or write waits those runs out first (`settle`), so no
    run started before it lands after it."""

    def __init__(self, layout: tuple, nwords: int):
        self.layout = layout
        self.words = np.zeros(nwords, np.uint32)
        self.loops: set = set()   # CarriedLoops with runs in flight

    def settle(self):
        while self.loops:   # a loop leaves the set when its last run in flight completes
            next(iter(self.loops)).settle()


def shared_states(compiled) -> DeviceStates:
    """The DeviceStates of the compiled graph's graph on its device (made on first use)."""
    plan = compiled.plan
    layout = tuple((p.name, p.offset, p.stored, p.dtype.str) for p in plan.placements if p.kind is PlacementKind.STATE)
    memory = compiled.versions.states
    key = plan.device.name
    if key not in memory:
        memory[key] = DeviceStates(layout, plan.host_buffer(HostRole.STATES).nwords)
    if memory[key].layout != layout:
        raise PlanError(states_differ(plan.name, memory[key].layout, layout))
    return memory[key]


def states_differ(name: str, kept: tuple, mine: tuple) -> str:
    """Why a version's states cannot share the memory of the versions before it: a state one
    of them lays out padded (`pad_written_by_producer` pads a state for the version whose padded
    call reads it), or another layout altogether."""
    theirs = {entry[0]: entry[2] for entry in kept}
    state, stored = next(((n, s) for n, _, s, _ in mine if theirs.get(n, s) != s), (None, None))
    if state is None:
        return f"two versions of {name} place its states differently; compile them from the same graph."
    padded = max(theirs[state], stored, key=math.prod)
    return (f"two versions of {name} lay state '{state}' out differently: in {theirs[state]} in one and {stored} "
            "in the other (pad_to_block pads a state for a version whose padded call reads it, "
            f"pad_written_by_producer), and the versions share its memory: declare it as {padded} and use its "
            "first rows and columns, or read it alike in every version.")


class EmulatorSession:
    """A design loaded on the emulator (iron.runtime.emulator)."""

    def __init__(self, compiled):
        self.compiled = compiled
        self.plan = compiled.plan
        self.full_elf = self.plan.full_elf
        self.device_states = shared_states(compiled)
        self.states = self.device_states.words
        self.resets = 0   # how many times a failed or interrupted run gave it a fresh device
        self._load(timed=traced())

    def _load(self, timed: bool):
        """The design loaded on a fresh emulated device, its weights and params written; the
        states stay where they are (host memory, as DDR)."""
        from iron.runtime.emulator import load

        plan = self.plan
        self.emulator = load(plan, kernels=os.environ.get("IRON_EMULATOR_KERNELS", "numpy"))
        self.buffers = {b.name: self.emulator.buffer(b.name) for b in plan.host_buffers}
        self.buffers[plan.host_buffer(HostRole.STATES).name] = self.states
        self._views: dict = {}
        _write_constants(self, self.compiled)
        self._held = None
        if timed:
            self.timed()

    def reset(self):
        """After a run failed or was interrupted mid-launch: load the design again, as a new
        hardware context would, so the next call runs (runs held before belong to the old one)."""
        self.resets += 1
        self._load(timed=self.emulator.timeline is not None)

    def timed(self):
        """Run on the cost model's clock from now on (iron/runtime/timeline.py); the Timeline."""
        from iron.runtime.timeline import TIMELINE

        self.emulator.timed(TIMELINE)
        return TIMELINE

    def _view(self, p) -> np.ndarray:
        view = self._views.get(p)
        if view is None:
            view = self._views[p] = placement_view(self.buffers[p.buffer], p)
        return view

    def read(self, p) -> np.ndarray:
        self.device_states.settle()
        return self._view(p)

    def write(self, p, array):
        self.device_states.settle()
        self._view(p)[...] = array

    def words_buffer(self) -> np.ndarray:
        return np.zeros(self.plan.host_buffer(HostRole.WORDS).nwords, np.uint32)

    def make_run(self, words=None, feedback=None):
        bindings = {self.plan.host_buffer(HostRole.STATES).name: self.states}
        if self.full_elf:
            bindings[self.plan.host_buffer(HostRole.WORDS).name] = words if words is not None else self.words_buffer()
            if feedback is not None:
                bindings[self.plan.host_buffer(HostRole.FEEDBACK).name] = feedback
        return self.emulator.run(**bindings)

    def call(self, words: np.ndarray):
        self.device_states.settle()
        try:
            self._call(words)
        except BaseException:   # a kernel that raised, or Ctrl-C: it propagates, the next call runs
            self.reset()
            raise

    def _call(self, words: np.ndarray):
        run = self._run()
        target = self.words_of(run) if self.full_elf else self.buffers[self.plan.host_buffer(HostRole.WORDS).name]
        target[: len(words)] = words.view(np.uint32)
        if debug.enabled():
            debug.say(f"emulator: call {self.plan.name} with words {words.tolist()}")
        timeline = self.emulator.timeline
        if timeline is None:
            self.emulator.start(run)
            self.emulator.wait(run)
            return
        # a host-driven call's launch costs, half before the run and half after (docs/platform.md section 11)
        began, half = timeline.host, generation(self.plan.device).host_call_ns / 2
        timeline.host_work("submit", half)
        self.emulator.start(run, began)
        self.emulator.wait(run)
        timeline.host_work("complete", half)
        timeline.span(HOST, f"call {self.plan.name}", began, timeline.host - began, SpanKind.HOST)

    def _run(self):
        if self._held is None:
            self._held = self.make_run(feedback=self._scrap_feedback())
        return self._held

    def _scrap_feedback(self):
        """A host-driven call on a full-ELF device still runs its Emit; its words go here."""
        if not self.full_elf or self.plan.emit is None:
            return None
        return np.zeros(self.plan.host_buffer(HostRole.FEEDBACK).nwords, np.uint32)

    def words_of(self, run) -> np.ndarray:
        """The scratchpad a held run starts from (what the previous run's Emit wrote)."""
        return run.buffers[self.plan.host_buffer(HostRole.WORDS).name]

    def make_ring(self, depth: int) -> list:
        """`depth` held runs, each with its own scratchpad; run k's Emit writes run k+1's."""
        scratch = [self.words_buffer() for _ in range(depth)]
        return [self.make_run(words=scratch[k], feedback=scratch[(k + 1) % depth]) for k in range(depth)]

    def feeding_run(self, target, run):
        """A held run of this version whose Emit writes the scratchpad of `run` of `target`."""
        return self.make_run(feedback=target.words_of(run))

    def start(self, run, words=None):
        if words is not None:
            self.words_of(run)[: len(words)] = words.view(np.uint32)
        if debug.enabled():
            debug.say(f"emulator: start {self.plan.name} (launch {self.emulator.launches + 1} or later)")
        timeline = self.emulator.timeline
        if timeline is None:
            self.emulator.start(run)
            return
        began = timeline.host
        timeline.host_work(f"restart {self.plan.name}", generation(self.plan.device).host_restart_ns)
        self.emulator.start(run, began)

    def wait(self, run):
        self.emulator.wait(run)


class XrtSession:
    """A built design on an NPU through XRT (iron.runtime.xrt). A segmented xclbin design (npu1)
    is one XrtDesign per segment, sharing the first one's host buffers, run in order per call."""

    def __init__(self, compiled):
        self.compiled = compiled
        self.resets = 0   # how many times a failed or interrupted run gave it a new hardware context
        self._open()

    def reset(self):
        """After a run failed (a DeviceTimeout leaves the context unusable) or was interrupted:
        open the design on a new hardware context, sharing the states BO as before."""
        self.resets += 1
        self._open()

    def _open(self):
        from iron.runtime.xrt import HostBuffer, XrtDesign

        compiled = self.compiled
        plan = self.plan = compiled.plan
        self.full_elf = plan.full_elf
        with compiled.loading() as artifacts:   # held while XRT reads them: no eviction meanwhile
            built = artifacts if isinstance(artifacts, tuple) else (artifacts,)
            states = _index(plan, HostRole.STATES)
            owners = compiled.versions.xrt_owners
            owner = owners.get(plan.device.name)
            shared = {states: owner.bo(states)} if owner is not None else {}
            host = [HostBuffer(b.name, b.nwords * 4) for b in plan.host_buffers]
            self.design = XrtDesign(plan.name, built[0], host, shared=shared)
            every = {**{i: self.design.bo(i) for i in range(len(host))}, **shared}
            self.designs = [self.design, *(XrtDesign(plan.name, a, host, shared=every) for a in built[1:])]
            self.buffers = {b.name: np.zeros(b.nwords, np.uint32) for b in plan.host_buffers}
            self.device_states = shared_states(compiled)
            self.states = self.buffers[plan.host_buffer(HostRole.STATES).name] = self.device_states.words
            self.patches = [_patch_table(p, a) for p, a in zip(plan.configurations, built)]
        _write_constants(self, compiled)
        if owner is None:
            owners[plan.device.name] = self.design
            self.design.write(plan.host_buffer(HostRole.STATES).name, self.states)
        self._held = None

    def read(self, p) -> np.ndarray:
        self.device_states.settle()
        self.buffers[p.buffer][...] = self.design.read(p.buffer, np.uint32, self.buffers[p.buffer].shape)
        return placement_view(self.buffers[p.buffer], p)

    def write(self, p, array):
        self.device_states.settle()
        placement_view(self.buffers[p.buffer], p)[...] = array
        self.design.write(p.buffer, self.buffers[p.buffer])

    def call(self, words: np.ndarray):
        self.device_states.settle()
        try:
            self._call(words)
        except BaseException:   # a timeout or Ctrl-C: it propagates, the next call runs on a new context
            self.reset()
            raise

    def _call(self, words: np.ndarray):
        if self._held is None:
            self._held = [design.make_run() for design in self.designs]
        if self.full_elf:
            self.design.start(self._held[0], words=words)
            self.design.wait(self._held[0])
            return
        name = self.plan.host_buffer(HostRole.WORDS).name
        self.buffers[name][: len(words)] = words.view(np.uint32)
        self.design.write(name, self.buffers[name])
        for design, run, patches in zip(self.designs, self._held, self.patches):   # segments in order
            design.start(run, words=words, patches=patches)
            design.wait(run)

    def make_ring(self, depth: int) -> list:
        return self.design.make_ring(depth, _index(self.plan, HostRole.FEEDBACK))

    def feeding_run(self, target, run):
        return self.design.make_run(feedback=(_index(self.plan, HostRole.FEEDBACK), target.design.scratchpad_bo(run)))

    def words_of(self, run) -> np.ndarray:
        return self.design.read_words(run, self.plan.host_buffer(HostRole.WORDS).nwords)

    def start(self, run, words=None):
        self.design.start(run, words=words)

    def wait(self, run):
        self.design.wait(run)


def _index(plan, role) -> int:
    return [b.role for b in plan.host_buffers].index(role)


def _write_constants(session, compiled):
    """Weights and params, and a padded cut buffer's zeros: its producer writes only the user's
    region (`pad_written_by_producer`), and XRT promises nothing of a new BO's bytes."""
    arrays = compiled.graph._arrays()
    for p in compiled.plan.placements:
        if p.kind in (PlacementKind.WEIGHT, PlacementKind.PARAM):
            session.write(p, arrays[p.name])
        elif p.kind is PlacementKind.CUT and p.padded is not None:
            session.write(p, np.zeros(p.shape, p.dtype))


def _patch_table(plan, artifacts):
    """Where each patched DMA's offset sits in the built instruction stream: the DDR address-patch
    ops appear in sequence order, one per dma_memcpy_nd."""
    from iron.runtime.xrt import AddressPatch

    if plan.image != "xclbin":
        return ()
    insts = np.fromfile(artifacts.insts, dtype=np.uint32)
    sites = [i + 4 for i in range(len(insts) - 5) if insts[i] == 0x81 and insts[i + 1] == 24]
    dmas = [op for op in plan.sequence if hasattr(op, "patch_word")]
    if len(sites) != len(dmas):
        raise PlanError(
            f"the instruction stream of {plan.name} has {len(sites)} address patches for {len(dmas)} DMA ops: "
            "rebuild the design with the installed mlir-aie."
        )
    return tuple(AddressPatch(site, op.patch_word, 4) for site, op in zip(sites, dmas) if op.patch_word is not None)
