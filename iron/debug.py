"""`IRON_DEBUG=1`: what the compiler and runtime say on stderr when asked, and nothing otherwise."""
from __future__ import annotations

import os
import sys


def enabled() -> bool:
    return os.environ.get("IRON_DEBUG", "") not in ("", "0")


def say(what: str):
    if enabled():
        print(f"iron: {what}", file=sys.stderr)
