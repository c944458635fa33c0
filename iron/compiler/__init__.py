"""The compiler: a traced Program to a checked Plan (`compile.compile_program`, a flat list of
passes drawn in docs/architecture.md), then the Plan printed as MLIR (mlir.py) and kernel C++
(sources.py) and built with the mlir-aie tools (build.py). It never imports the runtime."""
