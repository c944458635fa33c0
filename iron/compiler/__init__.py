"""The compiler: Program -> fuse -> place -> allocate -> lower -> Plan, then MLIR, kernel sources and the build.

It never imports the runtime: what runs a Plan (the emulator, XRT) lives in iron.runtime."""
