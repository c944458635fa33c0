"""`CompiledGraph`: a graph compiled for one device and set of tensor shapes, and calling it.
This is the runtime's entry for the front end (`compile_graph`, `compile_for_call`,
`update_versions`), registered with it on import (`register_runtime`): it traces, compiles to a
Plan once per graph, shapes, device and `feeds`, keeps what the runtime holds for a graph in its
`Versions`, and runs host-driven calls: the call's words (an index out of range is refused before
anything runs), the inputs written, a launch, the outputs and carry read back.
"""
from __future__ import annotations

import threading
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import aie_utils
from iron import debug
from iron.errors import ArgumentError, BackendUnavailable, LoopError, UnknownDevice
from iron.frontend.arguments import (
    bind_call,
    check_tensor,
    checked_state_value,
    require_values,
    shape_result,
    state_name,
)
from iron.frontend.graph import Runtime, register_runtime
from iron.plan.plan import PlacementKind, WordRef
from iron.runtime.timeline import Estimate, estimate, writable
from iron.runtime.timeline import write as write_trace
from iron.runtime.words import WordProgram


@dataclass
class Versions:
    """What the runtime holds for one graph: its compiled versions, and per device the memory of
    its states that every version shares (a first version and the body it feeds write one trail)."""

    compiled: dict[tuple, CompiledGraph] = field(default_factory=dict)  # (program, device, feeds)
    states: dict[str, Any] = field(default_factory=dict)        # device name -> its DeviceStates
    xrt_owners: dict[str, Any] = field(default_factory=dict)    # device name -> the design holding the states BO
    # held around every call, read and write of the graph's device memory and every step of its
    # loops: one call's inputs, launch and outputs are never another thread's
    lock: threading.RLock = field(default_factory=threading.RLock)


_MAKING = threading.Lock()   # two threads compiling one graph make one Versions, one version, one session


def versions(graph) -> Versions:
    """The runtime's record of `graph`, kept in its GraphState and dropped by copies and pickles."""
    state = graph._iron
    with _MAKING:
        if state.runtime is None:
            state.runtime = Versions()
    return state.runtime


def graph_name(graph) -> str:
    """A graph as a message names it: its class (or function) and which instance."""
    return f"{graph._where.removesuffix('.body')} graph at {id(graph):#x}"


def update_versions(graph, name: str, array: np.ndarray):
    """Write a weight's or param's new values (Graph.update) into every compiled version of `graph`."""
    for compiled in versions(graph).compiled.values():
        compiled._load(name, array)


def _device(device):
    if device is None:
        return aie_utils.get_current_device()
    if isinstance(device, str):
        try:
            return aie_utils.from_name(device)
        except aie_utils.UnknownDevice as e:
            raise UnknownDevice(str(e)) from None
    if isinstance(device, aie_utils.Device):
        return device
    raise UnknownDevice(f"compile(device=...) takes a Device or a device name, not {type(device).__name__}.")


def compile_graph(graph, specs, named_specs, *, device=None, feeds=None) -> "CompiledGraph":
    from iron.compiler.compile import compile_program

    device = _device(device)
    if feeds is not None and not isinstance(feeds, CompiledGraph):
        raise LoopError(f"compile(feeds=...) takes the CompiledGraph this version starts, not {type(feeds).__name__}.")
    if feeds is not None and feeds.graph is not graph:
        raise LoopError(
            f"compile(feeds=...) of {graph_name(graph)} was given a version of {graph_name(feeds.graph)}: a first "
            "version writes its own graph's states, so it feeds only a body of the same graph. Compile the body "
            "from this graph: body = g.compile(...), first = g.compile(..., feeds=body)."
        )
    runtime = versions(graph)
    with runtime.lock:
        program = graph.trace(*specs, **named_specs)
        key = (id(program), device.name, id(feeds) if feeds is not None else None)
        if key not in runtime.compiled:
            plan = compile_program(program, device, feeds=feeds.plan if feeds is not None else None)
            runtime.compiled[key] = CompiledGraph(graph, program, plan, feeds)
            if debug.enabled():
                debug.say(f"compiled {plan.name} for {device.name}:\n{runtime.compiled[key].describe()}")
        return runtime.compiled[key]


def compile_for_call(graph, tensors, values) -> "CompiledGraph":
    arrays, _ = bind_call(graph.signature(), tensors, values)
    spec = {n: None if a is None else (a.shape, a.dtype) for n, a in arrays.items()}
    return compile_graph(graph, (), spec)


class CompiledGraph:
    """One compiled version of a graph: `.plan`, `.mlir`, `.sources`, `.parameters`,
    `.artifacts`, `describe()`, `build()`, and calls `c(*tensors, **values)`."""

    def __init__(self, graph, program, plan, feeds=None):
        self.graph, self.program, self.plan, self.feeds = graph, program, plan, feeds
        self.versions = versions(graph)
        self.artifacts = None
        self._mlir = self._sources = self._session = None
        self._words = WordProgram(plan.words, plan.emit is not None)
        self._inputs = [(n.arg.name, plan.placement(n.arg.name)) for n in program.inputs]
        self._input_names = {name for name, _ in self._inputs}
        self._outputs = [p for p in plan.placements if p.kind is PlacementKind.OUTPUT]

    # ---- what the compiler made ----------------------------------------------------------------
    @property
    def device(self):
        return self.plan.device

    @property
    def parameters(self):
        """The per-call scratchpad words (name, kind, how each is computed)."""
        return self.plan.words

    @property
    def mlir(self) -> str:
        if self._mlir is None:
            from iron.plan.mlir import print_mlir

            self._mlir = print_mlir(self.plan)
        return self._mlir

    @property
    def sources(self) -> dict[str, str]:
        if self._sources is None:
            from iron.plan.sources import kernel_sources

            self._sources = kernel_sources(self.plan)
        return self._sources

    def describe(self) -> str:
        from iron.plan.describe import describe

        return describe(self.plan)

    def svg(self, path=None) -> str:
        """An SVG picture of where the design landed on the device (iron/plan/picture.py), one
        panel per segment; also written to `path` when one is given."""
        from iron.plan.picture import picture

        text = picture(self.segments)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return text

    @property
    def segments(self) -> tuple:
        """The Plans this design runs, one per configuration of the array, in order."""
        return self.plan.configurations

    def build(self, progress=None):
        """Build with aiecc and Peano into the cache (ToolchainMissing when they are absent). A
        segmented xclbin design (npu1) builds one xclbin per segment: a tuple of Artifacts."""
        with self.loading(progress) as artifacts:
            return artifacts

    @contextmanager
    def loading(self, progress=None):
        """The built design, as `build` gives it, each of its cache entries held until the block
        ends, so no other process evicts what a session is loading (IRON_CACHE_MAX_BYTES)."""
        from iron.plan.mlir import print_mlir
        from iron.plan.sources import kernel_sources
        from iron.toolchain.build import serving

        with ExitStack() as held:
            def hold(mlir, sources, image):
                return held.enter_context(serving(mlir, sources, self.device, image, progress=progress))

            if self.plan.segments and not self.plan.full_elf:
                self.artifacts = tuple(hold(print_mlir(s), kernel_sources(s), s.image) for s in self.plan.segments)
            else:
                self.artifacts = hold(self.mlir, self.sources, self.plan.image)
            yield self.artifacts

    def __repr__(self):
        return f"<CompiledGraph {self.plan.name} on {self.device.name} ({self.plan.image})>"

    # ---- device memory ------------------------------------------------------------------------
    @property
    def session(self):
        with self.versions.lock:
            if self._session is None:
                from iron.runtime.session import open_session

                self._session = open_session(self)
            return self._session

    def read(self, state) -> np.ndarray:
        """A copy of `state` as the device holds it (shared by every version of this graph), after
        the runs in flight of any CarriedLoop of the graph complete."""
        p = self.plan.placement(state_name(self.graph, state))
        with self.versions.lock:
            return self.session.read(p).copy()

    def write(self, state, value):
        """Set `state` on the device, after the runs in flight of any CarriedLoop of the graph
        complete (none lands after the write)."""
        p = self.plan.placement(state_name(self.graph, state))
        value = checked_state_value(p.name, np.zeros(p.shape, p.dtype), value)
        with self.versions.lock:
            self.session.write(p, value)

    def update(self, memory, value):
        """`graph.update(memory, value)`: a weight's or param's new values (same shape and dtype), in
        the reference and every compiled version of the graph, this one included."""
        self.graph.update(memory, value)

    def _load(self, name: str, array: np.ndarray):
        """Write a weight's or param's checked new values (Graph.update) into this version's device memory."""
        placement = next((p for p in self.plan.placements if p.name == name), None)
        with self.versions.lock:
            if placement is not None and self._session is not None:
                self._session.write(placement, array)

    # ---- calls ---------------------------------------------------------------------------------
    def bind(self, tensors, values) -> tuple[list, np.ndarray]:
        """Checked inputs and this call's words (raises before anything is written)."""
        where = self.graph._where
        arrays, scalars = bind_call(self.graph.signature(), tensors, values)
        require_values(self.program, where, scalars)
        inputs = []
        for name, placement in self._inputs:
            a = arrays.get(name)
            if a is None:
                raise ArgumentError(
                    f"{where} was compiled with tensor '{name}' but it was not given: pass it, or compile a version without it."
                )
            check_tensor(where, name, a, placement.shape, placement.dtype)
            inputs.append((placement, a))
        for name, a in arrays.items():
            if a is not None and name not in self._input_names and name not in self.program.unread:
                raise ArgumentError(
                    f"{where} was compiled without tensor '{name}' (it traced the None branch): compile a version with it."
                )
        return inputs, self._words(scalars)

    def __call__(self, *tensors, trace=None, **values):
        """One host-driven call (after the runs in flight of any CarriedLoop of the graph);
        `trace=path` also writes the call's timeline there (iron/runtime/timeline.py)."""
        if trace is not None:
            writable(trace)   # before anything runs: a call that ran cannot be taken back
            timeline = self.timed()
            mark = timeline.mark()
            result = self(*tensors, **values)
            write_trace(timeline.since(mark), trace)
            return result
        inputs, words = self.bind(tensors, values)
        with self.versions.lock:   # this call's inputs, launch and outputs: no other thread's between them
            session = self.session
            for placement, a in inputs:
                session.write(placement, a)
            session.call(words)
            outputs = [session.read(p).copy() for p in self._outputs]
            nxt = {name: self._carried(source, words) for name, source in self.plan.carry}
        return shape_result(self.program.returns, outputs, nxt)

    def timed(self):
        """Run this version on the cost model's clock from now on; the process's Timeline."""
        timed = getattr(self.session, "timed", None)
        if timed is None:
            raise BackendUnavailable(
                f"{self.plan.name} runs on an NPU (IRON_BACKEND=xrt): timing with the cost model needs the "
                "emulator. Set IRON_BACKEND=emulator to estimate and trace.")
        return timed()

    def estimate(self, *tensors, **values) -> Estimate:
        """Make one host-driven call (as a call would: states change) on the timed emulator and
        return its estimated time on the NPU: per call, on the device, and the busiest tile."""
        timeline = self.timed()
        mark, began = timeline.mark(), timeline.host
        self(*tensors, **values)
        return estimate(timeline.since(mark), timeline.host - began, self.plan.device)

    def _carried(self, source, words) -> int:
        if isinstance(source, WordRef):
            return int(words[source.index])
        return int(self.session.read(self.plan.placement(source.placement)).reshape(-1)[0])


register_runtime(Runtime(compile_graph, compile_for_call, update_versions))
