"""What the disk, the file system and other processes do to the build cache (issue 25 items 8-11):
leftovers that are files or links never block a key or `cache clear`; a planted lock link, a
full disk, a read-only cache and a bound that is not a number are each one CacheError naming the
path or value and the fix; an entry is never evicted while it is loaded; and every entry served,
a device image as a native library, must be writable by no other account."""
import ctypes
import errno
import io
import os
import shutil
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest

from iron.__main__ import main, size
from iron.errors import CacheError
from iron.models.designs import Walk
from iron.runtime.emulator import native
from iron.runtime.emulator.native import NativeLibrary
from iron.toolchain.build import build
from iron.toolchain.cache import Cache, content_key
from tests.fake_toolchain import NPU2, recorded_argv
from tests.quotes import quoted
from tests.reliability.test_cache import (
    ADD,
    MLIR,
    QUIET,
    SOURCES,
    A,
    B,
    _as_an_account_that_cannot_write,
    _filled,
    added,
    native_entry,
    snapshot,
)
from tests.runtime import fake_pyxrt

FULL = ("the disk is full (No space left on device). Free space on it (`python -m iron cache clear` "
        "empties iron's cache), or set IRON_CACHE_DIR to a directory on a disk with room.")


def _elf(cache: Cache):
    return build(MLIR, SOURCES, NPU2, "elf", cache=cache, **QUIET)


def _outside(tmp_path: Path) -> Path:
    """A directory of the user's, outside the cache, that a leftover link points at."""
    kept = tmp_path / "mine"
    kept.mkdir()
    (kept / "notes.txt").write_text("keep me\n")
    return kept


# ---- item 8: leftovers that are files or links -----------------------------------------------------


@pytest.mark.parametrize("leftover", ["a file", "a link to a directory"])
def test_a_removing_leftover_that_is_not_a_directory_does_not_block_the_rebuild(fake_tools, capsys, leftover):
    tmp = fake_tools
    cache = Cache(tmp / "cache")
    first = _elf(cache)
    doomed = first.directory.parent / f"{first.directory.name}.removing"
    kept = _outside(tmp)
    if leftover == "a file":
        doomed.write_text("cut off\n")
    else:
        doomed.symlink_to(kept, target_is_directory=True)
    (first.directory / "aie.elf").write_bytes(b"")

    again = _elf(cache)

    assert again.elf.read_bytes() == b"made by fake aiecc"
    quoted(capsys.readouterr().err, f"rebuilding {first.directory}", "aie.elf", "0 bytes", "18")
    assert sorted(p.name for p in (tmp / "cache").iterdir()) == [first.directory.name]
    assert (kept / "notes.txt").read_text() == "keep me\n"


def test_cache_clear_unlinks_leftover_files_and_links_and_keeps_what_they_point_at(cache_dir, tmp_path, capsys):
    Cache(cache_dir).get_or_build(content_key("listed"), _filled(1000, []), kind="xclbin")
    nbytes = Cache(cache_dir).entries()[0].nbytes
    kept = _outside(tmp_path)
    (cache_dir / f"{content_key('a')}.removing").write_text("cut off\n")
    (cache_dir / f"{content_key('b')}.building").symlink_to(kept, target_is_directory=True)
    (cache_dir / content_key("c")).symlink_to(kept / "notes.txt")
    (cache_dir / content_key("d")).write_text("an entry that is a file\n")
    (cache_dir / "notes.txt").write_text("not iron's\n")

    assert main(["cache", "clear"]) == 0

    assert capsys.readouterr() == (f"iron cache {cache_dir}: removed 1 entry, {size(nbytes)}\n", "")
    assert sorted(p.name for p in cache_dir.iterdir()) == ["notes.txt"]
    assert sorted(p.name for p in kept.iterdir()) == ["notes.txt"]
    assert (kept / "notes.txt").read_text() == "keep me\n"


# ---- item 9: a planted lock link, a full disk, a read-only cache, a bound not a number ----------


def test_a_lock_file_that_is_a_symbolic_link_is_one_cache_error(fake_tools):
    tmp = fake_tools
    cache = Cache(tmp / "cache")
    cache.ensure_root()
    key = content_key("planted lock")
    lock = tmp / "cache" / f"{key}.lock"
    lock.symlink_to(tmp / "their-file")

    with pytest.raises(CacheError) as raised:
        cache.get_or_build(key, _filled(10, []), kind="test")

    quoted(raised.value, str(lock), "symbolic link", f"`rm {lock}`", "IRON_CACHE_DIR")
    assert not (tmp / "their-file").exists()
    assert sorted(p.name for p in (tmp / "cache").iterdir()) == [lock.name]


def _disk_full_on_first_write(monkeypatch) -> list[Path]:
    """Path.write_text raising ENOSPC, as a full disk does, on the first file written."""
    tried = []

    def full(self, *args, **kwargs):
        tried.append(self)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
    monkeypatch.setattr(Path, "write_text", full)
    return tried


def _native_load():
    NativeLibrary.load(ADD)


def _design_build():
    build(MLIR, SOURCES, NPU2, "elf", **QUIET)


@pytest.mark.parametrize("route", ["native", "aiecc"])
def test_a_full_disk_is_one_cache_error_and_leaves_no_staged_files(request, cache_dir, monkeypatch, route):
    tools = request.getfixturevalue("native_cache" if route == "native" else "fake_tools")
    tried = _disk_full_on_first_write(monkeypatch)

    with pytest.raises(CacheError) as raised:
        (_native_load if route == "native" else _design_build)()

    assert len(tried) == 1
    assert tried[0].parent.name.endswith(".building")
    assert str(raised.value) == f"iron cannot write {tried[0]} in its cache directory {cache_dir}: {FULL}"
    assert list(cache_dir.iterdir()) == []
    if route == "aiecc":
        assert [argv[1:] for argv in recorded_argv(tools)] == [["--help"]]   # no build step ran


def _two_entries_read_only() -> tuple[Path, Path]:
    """A cache of one entry, readable by everyone, writable by no one but root (under /tmp, so
    `nobody` can reach it when these tests run as root)."""
    base = Path(tempfile.mkdtemp(prefix="iron-read-only-clear-"))
    base.chmod(0o755)
    root = base / "cache"
    Cache(root).get_or_build(content_key("kept"), _filled(100, []), kind="test")
    root.chmod(0o555 if os.geteuid() != 0 else 0o755)
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return base, root


def _cli_clear() -> str:
    """`python -m iron cache clear`, run here: its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = main(["cache", "clear"])
    return f"exit {status}, stdout {out.getvalue()!r}, stderr {err.getvalue()!r}"


def test_cache_clear_on_a_read_only_cache_is_one_cache_error(monkeypatch):
    base, root = _two_entries_read_only()
    try:
        before = snapshot(root)
        monkeypatch.setenv("IRON_CACHE_DIR", str(root))

        text = _as_an_account_that_cannot_write(lambda: Cache().clear())
        shown = _as_an_account_that_cannot_write(_cli_clear)

        refusal = (f"iron cannot clear its cache directory {root}: it is not writable by you. Clear it as the "
                   f"account that owns it, or make it writable (`chmod u+w {root}`).")
        assert text == refusal
        printed = f"iron: CacheError: {refusal}\n"
        assert shown == f"exit 1, stdout '', stderr {printed!r}"
        assert snapshot(root) == before
    finally:
        root.chmod(0o755)
        shutil.rmtree(base)


@pytest.mark.parametrize("value", ["²", "١٢٣", "1e9", "-5"])
def test_a_cache_bound_of_non_ascii_digits_is_one_cache_error(fake_tools, monkeypatch, value):
    monkeypatch.setenv("IRON_CACHE_MAX_BYTES", value)
    with pytest.raises(CacheError) as raised:
        _design_build()
    quoted(raised.value, f"IRON_CACHE_MAX_BYTES={value!r}", "2147483648", "unset it")
    assert recorded_argv(fake_tools) == []


# ---- item 10: no eviction of an entry being loaded -------------------------------------------------


def test_another_process_evicting_while_a_library_loads_skips_it(native_cache, monkeypatch):
    entry = native_entry()
    other = Cache(native_cache, limit=1)        # another process, with a bound only one entry fits
    loads = []

    def evicted_meanwhile(path, *args, **kwargs):
        other.get_or_build(content_key("another design"), _filled(4000, []), kind="test")
        loads.append(Path(path).exists())
        return real(path, *args, **kwargs)
    real = ctypes.CDLL
    monkeypatch.setattr(native.ctypes, "CDLL", evicted_meanwhile)

    library = NativeLibrary.load(ADD)

    assert loads == [True]
    np.testing.assert_array_equal(added(library), A + B)
    assert sorted(e.key for e in Cache(native_cache).entries()) == sorted([entry.name, content_key("another design")])
    # once loaded and let go, the next eviction may take it
    other.get_or_build(content_key("a third design"), _filled(4000, []), kind="test")
    assert [e.key for e in Cache(native_cache).entries()] == [content_key("a third design")]


def test_another_process_evicting_while_an_xrt_session_loads_a_device_image_skips_it(fake_tools, monkeypatch):
    monkeypatch.setenv("IRON_CACHE_DIR", str(fake_tools / "cache"))
    fake = fake_pyxrt.new_pyxrt()
    monkeypatch.setattr("iron.runtime.xrt.load_pyxrt", lambda: fake)   # the real build, XRT's stand-in
    monkeypatch.setattr("iron.runtime.xrt.describe_npu", lambda: "RyzenAI-npu4")
    monkeypatch.setenv("IRON_BACKEND", "xrt")
    monkeypatch.setenv("IRON_QUIET", "1")
    walk = Walk(np.arange(1, 9, dtype=np.int32) % 8, 4)
    body = walk.compile(device="npu2")
    other = Cache(fake_tools / "cache", limit=1)   # another process, with a bound only one entry fits
    seen = []
    real_elf = fake.elf

    def evicted_meanwhile(path):
        other.get_or_build(content_key("another design"), _filled(4000, []), kind="test")
        seen.append(Path(path).is_file())
        return real_elf(path)
    monkeypatch.setattr(fake, "elf", evicted_meanwhile)

    session = body.session   # opens the design: XRT reads its ELF from the cache entry

    assert seen == [True] and session.design is not None
    assert body.artifacts.elf.is_file()
    # once loaded and let go, the next eviction may take it
    other.get_or_build(content_key("a third design"), _filled(4000, []), kind="test")
    assert [e.key for e in Cache(fake_tools / "cache").entries()] == [content_key("a third design")]


# ---- item 11: every entry served is private ---------------------------------------------------------


@pytest.mark.parametrize("exposed", ["the entry", "aie.elf", "the cache dir"])
def test_a_device_image_where_another_account_can_write_is_refused(fake_tools, exposed):
    tmp = fake_tools
    cache = Cache(tmp / "cache")
    entry = _elf(cache).directory
    path = {"the entry": entry, "aie.elf": entry / "aie.elf", "the cache dir": tmp / "cache"}[exposed]
    path.chmod(0o777 if path.is_dir() else 0o666)
    runs, before = recorded_argv(tmp), snapshot(tmp / "cache")

    with pytest.raises(CacheError) as raised:
        _elf(cache)

    mode = "0777" if path.is_dir() else "0666"
    quoted(raised.value, str(tmp / "cache"), f"mode {mode}", f"chmod go-w {path}", "IRON_CACHE_DIR")
    assert recorded_argv(tmp) == runs
    assert snapshot(tmp / "cache") == before
