"""The Plan, the compiler's output (plan.py: tiles, FIFOs, links, buffers, cores, the runtime
sequence, with fifos.py's identities and rules.py's decisions), and what only reads it: its
printers (mlir.py, sources.py, describe.py, picture.py), its tile memory (memory.py),
`check_plan` (invariants.py, core_checks.py) and the cost model pricing it (cost.py), which the
compiler decides by and the runtime's timed emulator and `estimate()` use. It imports nothing of the compiler's passes."""
