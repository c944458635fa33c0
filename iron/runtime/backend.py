"""Which backend runs compiled graphs: the emulator, or XRT on an attached NPU.

`IRON_BACKEND=emulator|xrt` forces one; otherwise XRT where an NPU and pyxrt are present, the
emulator elsewhere. The choice is said once per process, with the reason, on stderr. This module
decides; it runs nothing.
"""
from __future__ import annotations

import os
import sys

from iron.errors import BackendUnavailable

_announced: set[str] = set()
CHOICES = ("emulator", "xrt")


def select_backend() -> str:
    forced = os.environ.get("IRON_BACKEND", "").strip().lower()
    if forced:
        if forced not in CHOICES:
            raise BackendUnavailable(
                f"IRON_BACKEND={forced!r} is not a backend: use IRON_BACKEND=emulator or IRON_BACKEND=xrt."
            )
        _announce(forced, "IRON_BACKEND is set")
        return forced
    from iron.runtime.xrt import describe_npu, load_pyxrt

    npu = describe_npu()
    if npu is None:
        _announce("emulator", "no Ryzen AI NPU found under /dev/accel")
        return "emulator"
    try:
        load_pyxrt()
    except BackendUnavailable:
        _announce("emulator", f"an NPU ({npu}) is present but pyxrt is not installed")
        return "emulator"
    _announce("xrt", f"NPU {npu} with pyxrt")
    return "xrt"


def _announce(backend: str, why: str):
    if backend in _announced or os.environ.get("IRON_QUIET"):
        return
    _announced.add(backend)
    print(f"iron: running on the {backend} ({why}); set IRON_BACKEND to choose.", file=sys.stderr)
