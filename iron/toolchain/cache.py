"""The content-addressed build cache: one verified directory per key (`content_key`, the sha256 of
everything a build depends on), built at most once. An entry is built in a staging directory,
sealed with a manifest (every file's size and sha256) and renamed into place; it is served only
while every file matches its manifest, else rebuilt with a one-line notice, and only from a
directory no other account can write. Builds, loads and removals of one key are serialised
across processes by a lock file, and `IRON_CACHE_MAX_BYTES` bounds the cache (least recently
served entries not in use go first). Deleting it, or `python -m iron cache clear`, is safe; what
the disk or the file system refuses is one CacheError naming the path and the fix."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import stat
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from iron.errors import CacheError

MANIFEST = "manifest.json"
DEFAULT_MAX_BYTES = 2 * 1024**3
KEY = re.compile(r"[0-9a-f]{64}")
# An entry, a failed build or a cut-off removal, each a directory, a file or a symbolic link.
OWNED = re.compile(r"([0-9a-f]{64})(\.building|\.removing)?")
FULL = (errno.ENOSPC, errno.EDQUOT)
CHUNK = 1 << 20
WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH


def cache_dir() -> Path:
    """`$IRON_CACHE_DIR` if set, else `$XDG_CACHE_HOME/iron`, else `~/.cache/iron`."""
    explicit = os.environ.get("IRON_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "iron"


def max_bytes() -> int:
    """`$IRON_CACHE_MAX_BYTES` (a whole number of bytes), else DEFAULT_MAX_BYTES (2 GiB)."""
    text = os.environ.get("IRON_CACHE_MAX_BYTES", "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    if not re.fullmatch(r"[0-9]+", text):   # not str.isdigit: '²' is a digit to it, not to int()
        raise CacheError(
            f"IRON_CACHE_MAX_BYTES={text!r} is not a number of bytes: set it to a whole number "
            f"such as {DEFAULT_MAX_BYTES} (2 GiB, the default), or unset it."
        )
    return int(text)


def content_key(*parts: str | bytes) -> str:
    """The sha256 hex digest of `parts`, each length-prefixed so ("ab", "c") != ("a", "bc")."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(f"{len(data)}:".encode())
        digest.update(data)
    return digest.hexdigest()


@dataclass(frozen=True)
class Entry:
    """One entry as listed: what its manifest says was built, its bytes on disk, and when it was
    last served (seconds since the epoch, the directory's mtime)."""

    key: str
    path: Path
    kind: str
    nbytes: int
    used: float


class Cache:
    """Verified build entries under `root` (default `cache_dir()`), at most `limit` bytes in all
    (default `max_bytes()`)."""

    def __init__(self, root: Path | None = None, limit: int | None = None):
        self.root = Path(root) if root is not None else cache_dir()
        self.limit = limit if limit is not None else max_bytes()

    def entry(self, key: str) -> Path:
        """The directory of `key` (it may not exist yet)."""
        return self.root / key

    def staging(self, key: str) -> Path:
        """Where `key` is built before it is sealed; a failed build stays here until the next."""
        return self.root / f"{key}.building"

    def manifest(self, key: str) -> dict[str, Any]:
        """The sealed entry's manifest: key, kind, what its build recorded, and `files`."""
        return json.loads((self.entry(key) / MANIFEST).read_text())

    def get_or_build(
        self, key: str, build: Callable[[Path], Mapping[str, Any]], *, kind: str
    ) -> Path:
        """The verified entry of `key`, as `serving` gives it, for a caller reading it at once."""
        with self.serving(key, build, kind=kind) as entry:
            return entry

    @contextmanager
    def serving(
        self, key: str, build: Callable[[Path], Mapping[str, Any]], *, kind: str
    ) -> Iterator[Path]:
        """The verified entry of `key`, running `build(staging)` first if it is missing or fails
        verification, held (its lock taken) until the block ends: no process removes an entry
        while it is loaded. `build` fills the empty staging directory and returns what the
        manifest records besides the files; if it raises, nothing is sealed. CacheError when
        another account could write the entry or the directories above it."""
        self.ensure_root()
        self.require_private()
        entry = self.entry(key)
        with self._locked(key):
            damage = entry_damage(entry, key)
            if damage is not None:
                if entry.exists() or entry.is_symlink():
                    print(f"iron cache: rebuilding {entry}: {damage}.", file=sys.stderr, flush=True)
                self._build(key, build, kind)
            self.require_private(*_served(entry))
            os.utime(entry)
            yield entry
        self.evict(keep=key)

    def ensure_root(self) -> Path:
        """The root directory, made private (0700) if missing; CacheError when it is unusable."""
        root = self.root
        if not root.is_dir():
            try:   # made by whichever thread or process comes first; exist_ok refuses only a file
                root.mkdir(mode=0o700, parents=True, exist_ok=True)
            except FileExistsError:
                raise unusable(root, "it is a file, not a directory") from None
            except OSError as exc:
                raise unusable(root, _why_not_made(root, exc)) from None
        if not os.access(root, os.W_OK | os.X_OK):
            raise unusable(root, "it is not writable by you")
        return root

    def require_private(self, *paths: Path) -> None:
        """Raise CacheError unless no other account can write the root, its parents or `paths`:
        the root and `paths` must be yours and not writable by group or others; a parent may also
        be root's, and group- or world-writable only with the sticky bit (as /tmp). Every entry
        served is checked so: a device image runs on the NPU as a native library runs here."""
        root = self.root.resolve()
        for path in (*reversed(root.parents), root, *paths):
            problem = _exposure(path, strict=path == root or path in paths)
            if problem is not None:
                raise CacheError(
                    f"iron will not load builds from the cache directory {self.root}: "
                    f"{problem}, so another account could replace what iron loads. "
                    f"{_privacy_fix(path)}"
                )

    def entries(self) -> list[Entry]:
        """Every entry under the root, most recently served first."""
        if not self.root.is_dir():
            if self.root.exists():
                raise unusable(self.root, "it is a file, not a directory")
            return []
        found = [
            _listed(path) for path in self.root.iterdir()
            if KEY.fullmatch(path.name) and path.is_dir() and not path.is_symlink()
        ]
        return sorted((e for e in found if e is not None), key=lambda e: e.used, reverse=True)

    def evict(self, keep: str) -> list[Entry]:
        """Remove the least recently served entries (never `keep`, never one being built or
        loaded, never one the file system will not let go) until the cache holds at most `limit`
        bytes; the removed entries."""
        listed = self.entries()
        excess = sum(e.nbytes for e in listed) - self.limit
        removed = []
        for entry in reversed(listed):
            if excess <= 0:
                break
            with suppress(CacheError):   # eviction makes room when it can; `clear` says why not
                if entry.key != keep and self._remove(entry.key, wait=False):
                    excess -= entry.nbytes
                    removed.append(entry)
        return removed

    def clear(self) -> list[Entry]:
        """Remove every entry and leftover (waiting for builds in progress); the entries."""
        removed = self.entries()
        if not self.root.is_dir():
            return removed
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise CacheError(
                f"iron cannot clear its cache directory {self.root}: it is not writable by you. "
                f"Clear it as the account that owns it, or make it writable (`chmod u+w {self.root}`)."
            )
        owned = {m[1] for m in map(OWNED.fullmatch, os.listdir(self.root)) if m}
        for key in sorted(owned):
            self._remove(key, wait=True)
        return removed

    @contextmanager
    def _locked(self, key: str, wait: bool = True) -> Iterator[None]:
        # The holder deletes the lock file before releasing it; filelock retries a lock taken on
        # a deleted file, so a waiter never holds a lock no one else can see.
        path = self.root / f"{key}.lock"
        lock = FileLock(str(path), timeout=-1 if wait else 0)
        try:
            lock.acquire()
        except Timeout:
            raise
        except OSError as exc:
            raise self._unwritable(path, exc) from None
        try:
            yield
        finally:
            path.unlink(missing_ok=True)
            lock.release()

    def _build(self, key: str, build: Callable[[Path], Mapping[str, Any]], kind: str) -> None:
        staging = self.staging(key)
        self._delete(staging)
        with self._writing(staging):
            staging.mkdir(mode=0o700)
        with self._writing(staging, tool=True):
            record = build(staging)
        with self._writing(staging):
            _seal(staging, {"key": key, "kind": kind, **record})
        self._discard(key)
        with self._writing(staging):
            staging.rename(self.entry(key))

    @contextmanager
    def _writing(self, staging: Path, tool: bool = False) -> Iterator[None]:
        """Make an OSError of the block a CacheError naming the file, except a build `tool`'s
        own, which stays staged to be looked at; a full disk also drops the staged files."""
        try:
            yield
        except OSError as exc:
            if tool and exc.errno not in FULL:
                raise
            if exc.errno in FULL:
                with suppress(CacheError):
                    self._delete(staging)
            raise self._unwritable(Path(exc.filename or staging), exc) from None

    def _remove(self, key: str, wait: bool) -> bool:
        try:
            with self._locked(key, wait=wait):
                self._discard(key)
                self._delete(self.staging(key))
        except Timeout:
            return False
        return True

    def _discard(self, key: str) -> None:
        # Renamed aside first, so no reader ever sees a half-deleted entry under its key; a
        # removal cut off before (a crash, a kill) leaves `doomed`, which would block the rename.
        doomed = self.root / f"{key}.removing"
        self._delete(doomed)
        try:
            self.entry(key).rename(doomed)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise self._unremovable(self.entry(key), exc) from None
        self._delete(doomed)

    def _delete(self, path: Path) -> None:
        """Remove `path`, a directory tree, a file or a symbolic link (never what it points to)."""
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise self._unremovable(Path(exc.filename or path), exc) from None

    def _unremovable(self, path: Path, exc: OSError) -> CacheError:
        return CacheError(
            f"iron cannot remove {path} from its cache directory {self.root} ({exc.strerror}). "
            f"Make it writable by you (`chmod -R u+w {self.root}`) or remove it as its owner, or "
            "set IRON_CACHE_DIR to another directory."
        )

    def _unwritable(self, path: Path, exc: OSError) -> CacheError:
        """The one error for a file iron cannot make in the cache: a full disk, a planted link."""
        if exc.errno in FULL:
            return CacheError(
                f"iron cannot write {path} in its cache directory {self.root}: the disk is full "
                f"({exc.strerror}). Free space on it (`python -m iron cache clear` empties iron's "
                "cache), or set IRON_CACHE_DIR to a directory on a disk with room."
            )
        if exc.errno == errno.ELOOP or path.is_symlink():
            return CacheError(
                f"iron will not open {path}: it is a symbolic link, which iron never makes there, "
                f"so another account may have planted it. Remove it (`rm {path}`), or set "
                "IRON_CACHE_DIR to a directory only you can write."
            )
        return unusable(self.root, f"cannot write {path} ({exc.strerror})")


def unusable(root: Path, why: str) -> CacheError:
    """The one error for a cache directory iron cannot use."""
    return CacheError(
        f"iron cannot use its cache directory {root}: {why}. Set IRON_CACHE_DIR to a directory "
        "you can write (iron creates it if missing)."
    )


def entry_damage(entry: Path, key: str) -> str | None:
    """Why `entry` cannot be served as `key`, or None when every file matches its manifest."""
    if entry.is_symlink() or not entry.is_dir():
        return "it is missing" if not entry.exists() else "it is not a directory"
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
        files = manifest["files"]
        if manifest["key"] != key:
            return f"its manifest is for key {manifest['key']}"
        expected = {name: (int(f["size"]), str(f["sha256"])) for name, f in files.items()}
    except FileNotFoundError:
        return "it has no manifest"
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "its manifest is unreadable"
    for name, (size, sha256) in sorted(expected.items()):
        damage = _file_damage(entry, name, size, sha256)
        if damage is not None:
            return damage
    return None


def _file_damage(entry: Path, name: str, size: int, sha256: str) -> str | None:
    if Path(name).is_absolute() or ".." in Path(name).parts:
        return f"its manifest names {name}, outside the entry"
    try:
        found = os.lstat(entry / name)
    except FileNotFoundError:
        return f"{name} is missing"
    if not stat.S_ISREG(found.st_mode):
        return f"{name} is not a regular file"
    if found.st_size != size:
        return f"{name} has {found.st_size} bytes where its manifest says {size}"
    if _sha256(entry / name) != sha256:
        return f"{name} does not match the sha256 in its manifest"
    return None


def _served(entry: Path) -> list[Path]:
    """The entry, its manifest and every file it lists, with the directories between: what must
    be private for it to be served (after `entry_damage` found the manifest sound)."""
    files = [entry / name for name in json.loads((entry / MANIFEST).read_text())["files"]]
    between = {parent for f in files for parent in f.parents if entry in parent.parents}
    return [entry, entry / MANIFEST, *sorted(between), *files]


def _seal(staging: Path, record: Mapping[str, Any]) -> None:
    """Write the manifest of every regular file in `staging`, none (nor any directory between)
    writable by group or others."""
    files = {}
    for path in sorted(p for p in staging.rglob("*") if not p.is_symlink()):
        path.chmod(path.stat().st_mode & ~WRITABLE_BY_OTHERS)
        if not path.is_file():
            continue
        files[path.relative_to(staging).as_posix()] = {
            "size": path.stat().st_size, "sha256": _sha256(path)
        }
    partial = staging / (MANIFEST + ".partial")
    partial.write_text(json.dumps({**record, "files": files}, indent=1, sort_keys=True))
    partial.chmod(0o644)
    os.replace(partial, staging / MANIFEST)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _listed(path: Path) -> Entry | None:
    try:
        used = path.lstat().st_mtime
        nbytes = sum(p.lstat().st_size for p in path.rglob("*") if p.is_file())
    except OSError:
        return None  # removed meanwhile
    try:
        kind = str(json.loads((path / MANIFEST).read_text())["kind"])
    except (OSError, ValueError, KeyError, TypeError):
        kind = "unsealed"
    return Entry(path.name, path, kind, nbytes, used)


def _why_not_made(root: Path, exc: OSError) -> str:
    ancestor = next(p for p in root.parents if p.exists() or p.is_symlink())
    if not ancestor.is_dir():
        return f"it cannot be created, as {ancestor} is a file"
    return f"it cannot be created in {ancestor} ({exc.strerror})"


def _exposure(path: Path, strict: bool) -> str | None:
    """How an account other than this one could write `path`, or None."""
    found = path.lstat()
    me = os.geteuid()
    if found.st_uid != me and (strict or found.st_uid != 0):
        return f"{path} is owned by uid {found.st_uid}, not by you (uid {me})"
    open_to_others = found.st_mode & WRITABLE_BY_OTHERS
    if open_to_others and (strict or not found.st_mode & stat.S_ISVTX):
        return f"{path} is writable by group or others (mode {stat.S_IMODE(found.st_mode):04o})"
    return None


def _privacy_fix(path: Path) -> str:
    if path.lstat().st_uid != os.geteuid():
        return "Set IRON_CACHE_DIR to a directory you own that only you can write."
    return f"Run `chmod go-w {path}`, or set IRON_CACHE_DIR to a directory only you can write."
