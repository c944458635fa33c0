"""`python -m iron cache` lists iron's build cache (where it is, its size against its bound, each
entry) and `python -m iron cache clear` empties it; errors are iron's named ones, printed on one
line with exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone

from iron.errors import IronError
from iron.toolchain.cache import Cache, Entry

UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def size(nbytes: int) -> str:
    """`nbytes` in the largest binary unit it reaches, to one decimal (whole bytes below 1 KiB)."""
    unit = 0
    while unit + 1 < len(UNITS) and nbytes >= 1024 ** (unit + 1):
        unit += 1
    return f"{nbytes} B" if unit == 0 else f"{nbytes / 1024**unit:.1f} {UNITS[unit]}"


def count(n: int) -> str:
    return f"{n} entry" if n == 1 else f"{n} entries"


def show(cache: Cache) -> str:
    """The cache's location, total against its bound, then one line per entry, latest used first."""
    listed = cache.entries()
    total = sum(e.nbytes for e in listed)
    lines = [
        f"iron cache {cache.root}: {count(len(listed))}, {size(total)} of at most "
        f"{size(cache.limit)} (IRON_CACHE_MAX_BYTES)"
    ]
    lines += [_line(e) for e in listed]
    return "\n".join(lines)


def _line(entry: Entry) -> str:
    used = datetime.fromtimestamp(entry.used, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"  {used}  {entry.kind:<8} {size(entry.nbytes):>10}  {entry.path}"


def clear(cache: Cache) -> str:
    removed = cache.clear()
    total = sum(e.nbytes for e in removed)
    return f"iron cache {cache.root}: removed {count(len(removed))}, {size(total)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m iron", description="iron's command line")
    commands = parser.add_subparsers(dest="command", required=True)
    cache_command = commands.add_parser("cache", help="show iron's build cache, or clear it")
    cache_command.add_argument("action", nargs="?", choices=["clear"], help="empty the cache")
    args = parser.parse_args(argv)
    try:
        cache = Cache()
        print(clear(cache) if args.action == "clear" else show(cache))
    except IronError as error:
        print(f"iron: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
