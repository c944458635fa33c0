"""Section 7, full ELF vs xclbin: the same carried graph compiled for npu1 and for npu2.

Compiles the seed chapter's Walk (iron.models.designs.Walk) for npu1 and npu2 and prints what differs:
`plan.full_elf`, `plan.image` ("xclbin" or "elf"), the Emit and the feedback buffer, the
`aie.device` line of the MLIR. On npu1 `iron.CarriedLoop` is refused (its LoopError is printed)
and the host-driven path runs; on npu2 both the host-driven path and the device loop run. Every
trail is checked exactly against a numpy walk. Finally it builds the `--device` version with
aiecc and Peano (`compiled.build()`); where they are not installed it prints the
ToolchainMissing message and carries on (exit 0). On an attached NPU it runs only the device
matching `--device` (the other device's design cannot load there). A mismatch exits 1.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import aie_utils
import iron
from iron.errors import LoopError, ToolchainMissing
from iron.models.designs import Walk, numpy_walk
from iron.runtime.backend import select_backend

STEPS, START = 6, 2


def show_plan(body) -> None:
    """What the device decides about a carried graph: image, full ELF, Emit, buffers, MLIR."""
    plan = body.plan
    device_line = next(line.strip() for line in body.mlir.splitlines() if "aie.device(" in line)
    print(f"{plan.device.name}: full_elf={plan.full_elf}, image={plan.image!r}, "
          f"emit={'on ' + plan.emit.tile.name if plan.emit else 'none'}, "
          f"host buffers {[str(b.role) for b in plan.host_buffers]}")
    print(f"  MLIR: {device_line}")


def host_driven(walk: Walk, body, expected: np.ndarray) -> bool:
    node, steps = START, 0
    for _ in range(STEPS + 1):
        nxt = body(node=node, steps=steps)
        node, steps = int(nxt["node"]), int(nxt["steps"])
    trail = body.read(walk.trail)
    ok = np.array_equal(trail, expected)
    print(f"  host-driven ({body.device.name}): trail {trail.tolist()} -> "
          f"{'matches' if ok else 'DIFFERS from'} the numpy walk (exact)")
    return ok


def device_loop(walk: Walk, body, expected: np.ndarray) -> bool:
    """Run the device loop, or print why this device refuses it (then the host-driven path is all)."""
    try:
        loop = iron.CarriedLoop(body, body, depth=2)
    except LoopError as refused:
        print(f"  CarriedLoop on {body.device.name}: LoopError: {refused}")
        return not body.plan.full_elf
    body.write(walk.trail, np.zeros(walk.trail.shape, np.int32))
    for _ in loop.run(STEPS, node=START, steps=0):
        pass
    trail = body.read(walk.trail)
    ok = np.array_equal(trail, expected)
    print(f"  device loop ({body.device.name}): trail {trail.tolist()} -> "
          f"{'matches' if ok else 'DIFFERS from'} the numpy walk (exact)")
    return ok


def build(body) -> None:
    """Build with aiecc and Peano where installed; say what is missing where not."""
    try:
        artifacts = body.build()
        print(f"built {body.device.name} ({body.plan.image}) into {artifacts.directory}")
    except ToolchainMissing as missing:
        print(f"build for {body.device.name}: ToolchainMissing: {missing}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="npu2", help="the device to build for (npu1 or npu2)")
    args = parser.parse_args(argv)
    target = aie_utils.from_name(args.device)
    aie_utils.set_current_device(target)

    successor = np.random.default_rng(1).permutation(12).astype(np.int32)
    expected = numpy_walk(successor, START, STEPS + 1)
    on_emulator = select_backend() == "emulator"
    ok = True
    for name in ("npu1", "npu2"):
        walk = Walk(successor, STEPS + 1)
        body = walk.compile(device=aie_utils.from_name(name))
        show_plan(body)
        if on_emulator or body.device.family == target.family:
            ok &= host_driven(walk, body, expected)
            ok &= device_loop(walk, body, expected)
    print()
    build(Walk(successor, STEPS + 1).compile())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
