"""The compiler: a traced Program to a checked Plan (`compile.compile_program`, a flat list of
passes drawn in docs/architecture.md). The Plan and its printers are iron/plan, the mlir-aie
toolchain driver iron/toolchain. It never imports the runtime."""
