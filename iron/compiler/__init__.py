"""The compiler: Program -> fuse -> place -> allocate -> lower -> Plan, then MLIR, kernel sources and the build."""
