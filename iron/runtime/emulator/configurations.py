"""A segmented Plan on the emulated NPU (iron/compiler/segment.py): one configuration per
segment, each loaded as an Emulator of its own, all sharing the design's host buffers (DDR). A
launch does what a full ELF's `@main` sequence or the host's segment-by-segment runs do: load
configuration k (its cores from the start of their programs, its FIFOs empty, its tile memory
cleared: nothing survives a reconfiguration but DDR, docs/platform.md section 7), run its
sequence to the end, then the next.
`load(plan)` gives the Emulator or the Configurations a Plan needs; both take the same calls.
"""
from __future__ import annotations

import numpy as np

from iron.plan import cost
from iron.runtime.emulator.machine import Emulator, Run
from iron.runtime.timeline import DEVICE, SpanKind


def load(plan, kernels: str | None = "numpy", replay: bool = True):
    """The plan loaded on the emulated NPU: an Emulator, or Configurations for a segmented plan."""
    return Configurations(plan, kernels, replay) if plan.segments else Emulator(plan, kernels, replay)


class Configurations:
    """A segmented Plan loaded on the emulator: buffer, run, start and wait as an Emulator takes them."""

    def __init__(self, plan, kernels: str | None = "numpy", replay: bool = True):
        self.plan, self.launches, self._runs = plan, 0, 0
        self.segments = [Emulator(segment, kernels, replay) for segment in plan.segments]
        self._buffers = {b.name: np.zeros(b.nwords, np.uint32) for b in plan.host_buffers}
        self.timeline = None

    def timed(self, timeline):
        """Every segment on the cost model's clock, each preceded by its reconfiguration."""
        for k, segment in enumerate(self.segments):
            segment.timed(timeline, f"{self.plan.name} segment {k + 1}")
        self.timeline = timeline

    @property
    def replayed(self) -> int:
        return sum(s.replayed for s in self.segments)

    def buffer(self, name: str) -> np.ndarray:
        self.segments[0].buffer(name)   # the same names in every segment: its error for an unknown one
        return self._buffers[name]

    def run(self, **bindings) -> Run:
        checked = self.segments[0].run(**bindings)   # checks each binding against the buffer's size
        self._runs += 1
        return Run(self._runs, {**self._buffers, **{name: checked.buffers[name] for name in bindings}})

    def start(self, run: Run, issued: float | None = None):
        """Launch `run` now: the device may run a launch as soon as it is started, and runs
        execute in the order they start, which is all a caller may rely on."""
        run.completed = False
        for segment in self.segments:
            segment.clear_tile_memory()
            launch = segment.run(**run.buffers)
            segment.start(launch)
            if self.timeline is not None:
                launch.issued = launch.submitted if issued is None else issued
                self._reconfigure(segment, launch)
            segment.wait(launch)
        self.launches += 1
        run.completed = True
        run.ended = self.timeline.device_end if self.timeline is not None else 0.0

    def _reconfigure(self, segment: Emulator, launch: Run):
        """Loading the segment's configuration delays its launch (docs/platform.md section 11)."""
        took = cost.generation(self.plan.device).reconfigure_ns
        begins = max(launch.submitted, self.timeline.device_end)
        self.timeline.span(DEVICE, f"load {segment.timeline_name}", begins, took, SpanKind.RECONFIGURE)
        launch.submitted = begins + took

    def wait(self, run: Run):
        """Nothing left to do: `start` ran the launch (and the host waited for it)."""

