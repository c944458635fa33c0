"""The content-addressed build cache: one directory per key, built at most once.

A key is the sha256 of everything a build depends on (`content_key`). Its entry is a directory
under `cache_dir()`. An entry is finished when its `done.json` exists; that file is written
last, by an atomic rename, so a build that crashed half-way is never served: the next build of
the key wipes the leftovers and starts again. Builds of one key are serialised across processes
by a `filelock.FileLock` beside the entry, so two processes asking for the same key at once run
the build once; the second waits, then finds the finished entry.

This module does not know what is built (see `iron.compiler.build`) and never evicts entries:
deleting the cache directory is always safe.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock

DONE_FILE = "done.json"


def cache_dir() -> Path:
    """`$IRON_CACHE_DIR` if set, else `$XDG_CACHE_HOME/iron`, else `~/.cache/iron`."""
    explicit = os.environ.get("IRON_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "iron"


def content_key(*parts: str | bytes) -> str:
    """The sha256 hex digest of `parts`, each length-prefixed so ("ab", "c") != ("a", "bc")."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(f"{len(data)}:".encode())
        digest.update(data)
    return digest.hexdigest()


class Cache:
    """Build entries under `root` (default `cache_dir()`), each finished at most once."""

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else cache_dir()

    def entry(self, key: str) -> Path:
        """The directory of `key` (it may not exist yet, or hold an unfinished build)."""
        return self.root / key

    def is_done(self, key: str) -> bool:
        """True when the entry of `key` finished building (its done.json exists)."""
        return (self.entry(key) / DONE_FILE).is_file()

    def record(self, key: str) -> dict[str, Any]:
        """The contents of the finished entry's done.json."""
        return json.loads((self.entry(key) / DONE_FILE).read_text())

    @contextmanager
    def locked(self, key: str) -> Iterator[Path]:
        """Hold the inter-process lock of `key` and yield its entry directory."""
        self.root.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.root / f"{key}.lock")):
            yield self.entry(key)

    def get_or_build(self, key: str, build: Callable[[Path], Mapping[str, Any]]) -> Path:
        """The finished entry of `key`, running `build(entry)` first if no process has.

        `build` fills the empty entry directory and returns what to record in done.json; if it
        raises, the entry stays unfinished (kept for inspection, wiped by the next attempt).
        """
        if self.is_done(key):
            return self.entry(key)
        with self.locked(key) as entry:
            if not self.is_done(key):
                shutil.rmtree(entry, ignore_errors=True)
                entry.mkdir(parents=True)
                self._finish(entry, {"key": key, **build(entry)})
        return entry

    @staticmethod
    def _finish(entry: Path, record: Mapping[str, Any]) -> None:
        partial = entry / (DONE_FILE + ".partial")
        partial.write_text(json.dumps(record, indent=1, sort_keys=True))
        os.replace(partial, entry / DONE_FILE)
