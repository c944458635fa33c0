"""iron's NPU emulator: executes a compiled Plan (iron.compiler.plan) as the hardware would.

`Emulator(plan, kernels="numpy", check=True, replay=True)` loads a plan; `buffer(name)`,
`run(**bindings)`, `start(run)`, `wait(run)` and `launches` are all the host side uses
(machine.py; `replayed` counts launches that repeated a recorded one, see its docstring). The modules: fifo.py (object
FIFO rings, tile DMAs, mem-tile links), dma.py (shim DMA and the runtime sequence), core.py
(Functions and core programs), kernels.py (numpy or native kernel calls), native.py (the kernels'
C++ built for the host). It never reads a traced Program or calls a graph's reference.
"""
from iron.runtime.emulator.machine import Emulator, Run

__all__ = ["Emulator", "Run"]
