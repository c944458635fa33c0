"""iron's NPU emulator: runs a compiled Plan (iron.plan.plan) on an emulated array of tiles,
locks, buffer descriptors, DMA channels and cores, as the hardware would; `load(plan)` (an Emulator, or
Configurations for a segmented Plan) is all the host side uses. It never reads a traced Program
or calls a graph's reference.
"""
from iron.runtime.emulator.configurations import Configurations, load
from iron.runtime.emulator.machine import Emulator, Run

__all__ = ["Configurations", "Emulator", "Run", "load"]
