"""The build cache trusts nothing on disk (issue 12): every case an adversarial user or a damaged
disk made of it. Damaged entries are rebuilt (a one-line notice, then the right result, and the
tools ran again); a native library another account could have written is refused with a
CacheError and never loaded; an unusable cache directory is one CacheError naming it and
IRON_CACHE_DIR; lock files never stay; the bound evicts the least recently used entries; a cached
build runs no tool; `python -m iron cache` lists and clears. Each case also checks that no cache
entry changed where it should not (`snapshot`, every file's bytes)."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest
from filelock import FileLock

from iron.__main__ import main, show
from iron.errors import BuildError, CacheError
from iron.runtime.emulator.native import COMPILE_FLAGS, LIBRARY_NAME, NativeLibrary, library_entry
from iron.toolchain.build import FLAGS_GET, build
from iron.toolchain.cache import Cache, content_key, entry_damage
from tests.fake_toolchain import NPU2, recorded_argv
from tests.quotes import quoted

REPO = Path(__file__).resolve().parents[2]
ADD = {
    "add.cc": 'extern "C" void add(const int* a, const int* b, int* out, int n) {\n'
              "  for (int i = 0; i < n; i++) out[i] = a[i] + b[i];\n}\n"
}
# The tampered library: add computes a - b, and loading it leaves a marker file behind.
SUBTRACTING = """#include <cstdio>
__attribute__((constructor)) static void planted() { std::fclose(std::fopen("{marker}", "w")); }
extern "C" void add(const int* a, const int* b, int* out, int n) {
  for (int i = 0; i < n; i++) out[i] = a[i] - b[i];
}
"""
A = np.arange(16, dtype=np.int32) * 7
B = np.arange(16, dtype=np.int32) + 100


MLIR = "module {\n  aie.device(npu2) {\n  }\n}\n"
SOURCES = {"add.cc": 'extern "C" void add() {}\n'}
QUIET = {"progress": lambda *_: None}
FIX = ("IRON_CACHE_DIR",)   # the fix every cache-directory refusal names


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under `root`: relative path -> bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def added(library: NativeLibrary) -> np.ndarray:
    out = np.zeros_like(A)
    library.call("add", [A, B, out, len(A)], ["ptr", "ptr", "ptr", "i32"])
    return out


def native_entry() -> Path:
    """The cache entry of the ADD kernels' library, built first if need be (not loaded)."""
    with library_entry(ADD) as entry:
        return entry


def compile_planted(out: Path, marker: Path) -> None:
    source = SUBTRACTING.replace("{marker}", str(marker))
    subprocess.run(["g++", *COMPILE_FLAGS, "-x", "c++", "-o", str(out), "-"], input=source,
                   text=True, check=True)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- damaged native libraries are rebuilt, never loaded ----------------------------------------


def test_a_tampered_kernels_so_is_not_served_but_rebuilt(native_cache, tmp_path, capsys):
    entry = native_entry()
    library = entry / LIBRARY_NAME
    manifest = json.loads((entry / "manifest.json").read_text())
    marker = tmp_path / "planted-ran"
    compile_planted(tmp_path / "tampered.so", marker)
    os.replace(tmp_path / "tampered.so", library)
    tampered_size = library.stat().st_size
    reason = (
        f"kernels.so has {tampered_size} bytes where its manifest says "
        f"{manifest['files']['kernels.so']['size']}"
        if tampered_size != manifest["files"]["kernels.so"]["size"]
        else "kernels.so does not match the sha256 in its manifest"
    )

    np.testing.assert_array_equal(added(NativeLibrary.load(ADD)), A + B)

    assert capsys.readouterr().err == f"iron cache: rebuilding {entry}: {reason}.\n"
    assert not marker.exists()
    assert sha256(library) == manifest["files"]["kernels.so"]["sha256"]
    assert entry_damage(entry, entry.name) is None


def test_a_same_size_kernels_so_with_other_bytes_is_rebuilt(native_cache, capsys):
    entry = native_entry()
    library = entry / LIBRARY_NAME
    good = library.read_bytes()
    library.write_bytes(good[:100] + bytes([good[100] ^ 0xFF]) + good[101:])

    np.testing.assert_array_equal(added(NativeLibrary.load(ADD)), A + B)

    quoted(capsys.readouterr().err, f"rebuilding {entry}", "kernels.so", "sha256")
    assert library.read_bytes() == good


def test_a_truncated_kernels_so_does_not_crash_the_process(native_cache, capsys):
    entry = native_entry()
    library = entry / LIBRARY_NAME
    size = library.stat().st_size
    os.truncate(library, size // 2)

    np.testing.assert_array_equal(added(NativeLibrary.load(ADD)), A + B)

    quoted(capsys.readouterr().err, f"rebuilding {entry}", "kernels.so", f"{size // 2} bytes", str(size))
    assert library.stat().st_size == size


# ---- damaged build entries are rebuilt, never returned ------------------------------------------


def _zero_elf(entry: Path) -> None:
    (entry / "aie.elf").write_bytes(b"")


def _delete_elf(entry: Path) -> None:
    (entry / "aie.elf").unlink()


def _same_size_elf(entry: Path) -> None:
    (entry / "aie.elf").write_bytes(b"made by fake AIECC")


def _delete_manifest(entry: Path) -> None:
    (entry / "manifest.json").unlink()


def _garble_manifest(entry: Path) -> None:
    (entry / "manifest.json").write_text("{not json")


def _elf_into_symlink(entry: Path) -> None:
    elsewhere = entry.parent.parent / "elsewhere.elf"
    elsewhere.write_bytes((entry / "aie.elf").read_bytes())
    (entry / "aie.elf").unlink()
    (entry / "aie.elf").symlink_to(elsewhere)


def _manifest_naming_outside(entry: Path) -> None:
    manifest = json.loads((entry / "manifest.json").read_text())
    manifest["files"]["../elsewhere.elf"] = manifest["files"]["aie.elf"]
    (entry / "manifest.json").write_text(json.dumps(manifest))


DAMAGE = {
    "zero-byte aie.elf": (_zero_elf, "aie.elf has 0 bytes where its manifest says 18"),
    "deleted aie.elf": (_delete_elf, "aie.elf is missing"),
    "aie.elf with other bytes": (_same_size_elf, "aie.elf does not match the sha256 in its manifest"),
    "no manifest (an unfinished or pre-manifest entry)": (_delete_manifest, "it has no manifest"),
    "garbled manifest": (_garble_manifest, "its manifest is unreadable"),
    "aie.elf a symbolic link": (_elf_into_symlink, "aie.elf is not a regular file"),
    "manifest naming a file outside": (
        _manifest_naming_outside, "its manifest names ../elsewhere.elf, outside the entry"),
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_build_entry_is_rebuilt_not_returned(fake_tools, capsys, damage):
    tmp = fake_tools
    cache = Cache(tmp / "cache")
    first = build(MLIR, SOURCES, NPU2, "elf", cache=cache, **QUIET)
    assert first.elf.read_bytes() == b"made by fake aiecc"
    runs = recorded_argv(tmp)
    spoil, reason = DAMAGE[damage]
    spoil(first.directory)

    again = build(MLIR, SOURCES, NPU2, "elf", cache=cache, **QUIET)

    assert again == first
    assert again.elf.read_bytes() == b"made by fake aiecc"
    assert recorded_argv(tmp) == runs + runs  # every tool ran again, aiecc --help included
    assert capsys.readouterr().err == f"iron cache: rebuilding {first.directory}: {reason}.\n"
    assert entry_damage(again.directory, again.directory.name) is None
    assert sorted(p.name for p in (tmp / "cache").iterdir()) == [first.directory.name]


def test_a_removal_cut_off_halfway_does_not_block_the_rebuild(fake_tools, capsys):
    tmp = fake_tools
    cache = Cache(tmp / "cache")
    first = build(MLIR, SOURCES, NPU2, "elf", cache=cache, **QUIET)
    leftover = tmp / "cache" / f"{first.directory.name}.removing"
    shutil.copytree(first.directory, leftover)  # as a killed eviction leaves it
    _zero_elf(first.directory)

    again = build(MLIR, SOURCES, NPU2, "elf", cache=cache, **QUIET)

    assert again.elf.read_bytes() == b"made by fake aiecc"
    assert capsys.readouterr().err == (
        f"iron cache: rebuilding {first.directory}: {DAMAGE['zero-byte aie.elf'][1]}.\n"
    )
    assert sorted(p.name for p in (tmp / "cache").iterdir()) == [first.directory.name]


def test_an_entry_copied_under_another_key_is_not_served(fake_tools, capsys):
    tmp = fake_tools
    cache = Cache(tmp / "cache")
    mine = build(MLIR, SOURCES, NPU2, "elf", cache=cache, **QUIET).directory
    other = build(MLIR, {"add.cc": "// another design\n"}, NPU2, "elf", cache=cache, **QUIET)
    kept = snapshot(mine)
    shutil.rmtree(other.directory)
    shutil.copytree(mine, other.directory)

    rebuilt = build(MLIR, {"add.cc": "// another design\n"}, NPU2, "elf", cache=cache, **QUIET)

    quoted(capsys.readouterr().err, f"rebuilding {other.directory}", f"key {mine.name}")
    assert (rebuilt.directory / "add.cc").read_text() == "// another design\n"
    assert snapshot(mine) == kept


def test_a_cached_build_runs_no_tool_not_even_aiecc_help(fake_tools):
    tmp = fake_tools
    first = build(MLIR, SOURCES, NPU2, "xclbin", cache=Cache(tmp / "cache"), **QUIET)
    runs = recorded_argv(tmp)
    assert [argv[1:] for argv in runs if argv[0].endswith("aiecc")][0] == ["--help"]
    kept = snapshot(tmp / "cache")

    again = build(MLIR, SOURCES, NPU2, "xclbin", cache=Cache(tmp / "cache"), **QUIET)

    assert again == first
    assert recorded_argv(tmp) == runs
    assert Cache(tmp / "cache").manifest(first.directory.name)["flags"] == FLAGS_GET
    assert snapshot(tmp / "cache") == kept


# ---- native libraries load only from a cache no other account can write ------------------------


def _plant(native_cache: Path, cache_root: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A kernels.so under the predictable key in `cache_root`, with a manifest that verifies."""
    genuine = native_entry()  # the key anyone can compute from iron's sources
    planted = cache_root / genuine.name
    shutil.copytree(genuine, planted)
    marker = tmp_path / "planted-ran"
    compile_planted(planted / LIBRARY_NAME, marker)
    manifest = json.loads((planted / "manifest.json").read_text())
    manifest["files"][LIBRARY_NAME] = {
        "size": (planted / LIBRARY_NAME).stat().st_size, "sha256": sha256(planted / LIBRARY_NAME)
    }
    (planted / "manifest.json").write_text(json.dumps(manifest))
    assert entry_damage(planted, planted.name) is None  # verification alone would serve it
    return planted, marker


def _refusal(path: Path, root: Path, mode: str) -> tuple[str, ...]:
    """What a refusal of a cache writable by others quotes: the directory, the path, its mode, the fixes."""
    return str(root), f"mode {mode}", f"chmod go-w {path}", "IRON_CACHE_DIR"


@pytest.mark.parametrize("open_to_group", ["the cache dir", "the entry"])
def test_a_planted_kernels_so_where_a_group_can_write_is_refused(
    native_cache, tmp_path, monkeypatch, open_to_group
):
    root = tmp_path / "shared"
    root.mkdir(mode=0o700)
    planted, marker = _plant(native_cache, root, tmp_path)
    exposed = root if open_to_group == "the cache dir" else planted
    exposed.chmod(0o775)
    monkeypatch.setenv("IRON_CACHE_DIR", str(root))
    before = snapshot(root)

    with pytest.raises(CacheError) as raised:
        NativeLibrary.load(ADD)

    quoted(raised.value, *_refusal(exposed, root, "0775"))
    assert not marker.exists()
    assert snapshot(root) == before
    assert sorted(p.name for p in root.iterdir()) == [planted.name]


def test_a_cache_dir_inside_a_world_writable_dir_without_the_sticky_bit_is_refused(
    native_cache, tmp_path, monkeypatch
):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    monkeypatch.setenv("IRON_CACHE_DIR", str(open_dir / "cache"))

    with pytest.raises(CacheError) as raised:
        NativeLibrary.load(ADD)

    quoted(raised.value, *_refusal(open_dir, open_dir / "cache", "0777"))
    assert sorted(p.name for p in (open_dir / "cache").iterdir()) == []


def test_a_cache_dir_inside_a_sticky_world_writable_dir_is_used(native_cache, tmp_path, monkeypatch):
    like_tmp = tmp_path / "like-tmp"
    like_tmp.mkdir()
    like_tmp.chmod(0o1777)
    monkeypatch.setenv("IRON_CACHE_DIR", str(like_tmp / "cache"))

    np.testing.assert_array_equal(added(NativeLibrary.load(ADD)), A + B)

    assert (like_tmp / "cache").stat().st_mode & 0o777 == 0o700


# ---- unusable cache directories: one CacheError naming the path and IRON_CACHE_DIR -------------


def _load_native() -> None:
    NativeLibrary.load(ADD)


def _build_design() -> None:
    build(MLIR, SOURCES, NPU2, "elf", **QUIET)


def _list_cache() -> None:
    Cache().entries()


ROUTES = {"native load": _load_native, "build()": _build_design, "cache listing": _list_cache}


@pytest.mark.parametrize("route", ROUTES, ids=list(ROUTES))
def test_a_cache_dir_that_is_a_file_is_one_cache_error(fake_tools, monkeypatch, route):
    path = fake_tools / "a-file"
    path.write_text("mine\n")
    monkeypatch.setenv("IRON_CACHE_DIR", str(path))
    with pytest.raises(CacheError) as raised:
        ROUTES[route]()
    quoted(raised.value, str(path), "a file, not a directory", *FIX)
    assert path.read_text() == "mine\n"


@pytest.mark.parametrize("route", ["native load", "build()"])
def test_a_cache_dir_under_a_file_is_one_cache_error(fake_tools, monkeypatch, route):
    blocker = fake_tools / "a-file"
    blocker.write_text("mine\n")
    path = blocker / "sub" / "cache"
    monkeypatch.setenv("IRON_CACHE_DIR", str(path))
    with pytest.raises(CacheError) as raised:
        ROUTES[route]()
    quoted(raised.value, str(path), f"{blocker} is a file", *FIX)
    assert blocker.read_text() == "mine\n"


def _as_an_account_that_cannot_write(action) -> str:
    """Run `action` as an account denied writing where this one is: this process when it is not
    root (it honours file modes), else a forked child switched to `nobody`. The CacheError text,
    else what `action` returned (a text, or None for "")."""
    if os.geteuid() != 0:
        try:
            return action() or ""
        except CacheError as error:
            return str(error)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        text = ""
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            text = action() or ""
        except CacheError as error:
            text = str(error)
        except BaseException as error:
            text = f"unexpected {type(error).__name__}: {error}"
        finally:
            os.write(write, text.encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    return text


def test_a_read_only_cache_dir_is_one_cache_error(monkeypatch):
    # Under /tmp, not pytest's private tmp_path, so that `nobody` can reach it when run as root.
    base = Path(tempfile.mkdtemp(prefix="iron-read-only-"))
    try:
        base.chmod(0o755)
        path = base / "cache"
        path.mkdir(mode=0o555 if os.geteuid() != 0 else 0o755)
        monkeypatch.setenv("IRON_CACHE_DIR", str(path))
        monkeypatch.delenv("CXX", raising=False)
        text = _as_an_account_that_cannot_write(_load_native)
        quoted(text, str(path), "not writable", *FIX)
        assert list(path.iterdir()) == []
    finally:
        (base / "cache").chmod(0o755)
        shutil.rmtree(base)


def test_a_cache_bound_that_is_not_a_number_is_one_cache_error(fake_tools, monkeypatch):
    monkeypatch.setenv("IRON_CACHE_MAX_BYTES", "2GB")
    with pytest.raises(CacheError) as raised:
        build(MLIR, SOURCES, NPU2, "elf", cache=None, **QUIET)
    quoted(raised.value, "IRON_CACHE_MAX_BYTES='2GB'", "2147483648", "unset it")
    assert recorded_argv(fake_tools) == []


# ---- lock files do not stay --------------------------------------------------------------------


def test_no_lock_file_stays_after_builds_hits_failures_and_concurrent_loads(
    native_cache, fake_tools
):
    tmp = fake_tools
    cache = Cache(tmp / "cache")
    designs = [build(MLIR, {"add.cc": f"// {i}\n"}, NPU2, "elf", cache=cache,
                     **QUIET).directory for i in range(3)]
    build(MLIR, {"add.cc": "// 0\n"}, NPU2, "elf", cache=cache, **QUIET)
    threads = [threading.Thread(target=NativeLibrary.load, args=(ADD,)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with pytest.raises(BuildError, match="^Compiling the native kernels broken.cc failed"):
        NativeLibrary.load({"broken.cc": "int broken = ;\n"})

    names = sorted(p.name for p in (tmp / "cache").iterdir())
    native = native_entry().name
    assert [n for n in names if n.endswith(".lock")] == []
    assert [n for n in names if not n.endswith(".building")] == sorted(
        [d.name for d in designs] + [native]
    )
    assert len([n for n in names if n.endswith(".building")]) == 1  # the failed build, kept


# ---- the bound: least recently used entries are evicted -----------------------------------------


def _filled(nbytes: int, calls: list):
    def make(staging: Path):
        calls.append(staging.name)
        (staging / "blob").write_bytes(b"x" * nbytes)
        return {}
    return make


def test_least_recently_used_entries_are_evicted_past_the_bound(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    keys = [content_key(f"entry {i}") for i in range(4)]
    calls = []
    Cache(root, limit=10**9).get_or_build(keys[0], _filled(4000, calls), kind="test")
    per_entry = Cache(root).entries()[0].nbytes
    monkeypatch.setenv("IRON_CACHE_MAX_BYTES", str(2 * per_entry + per_entry // 2))
    cache = Cache(root)
    cache.get_or_build(keys[1], _filled(4000, calls), kind="test")
    os.utime(root / keys[0], (1_000_000, 1_000_000))
    os.utime(root / keys[1], (2_000_000, 2_000_000))
    cache.get_or_build(keys[0], _filled(4000, calls), kind="test")  # served: now the latest
    kept = snapshot(root / keys[0])

    cache.get_or_build(keys[2], _filled(4000, calls), kind="test")

    assert sorted(e.key for e in cache.entries()) == sorted([keys[2], keys[0]])
    assert not (root / keys[1]).exists()
    assert snapshot(root / keys[0]) == kept
    assert calls == [f"{k}.building" for k in (keys[0], keys[1], keys[2])]
    assert sorted(p.name for p in root.iterdir()) == sorted([keys[0], keys[2]])


def test_eviction_skips_an_entry_another_process_holds(tmp_path):
    root = tmp_path / "cache"
    keys = [content_key(f"entry {i}") for i in range(3)]
    cache = Cache(root, limit=10**9)
    for age, key in enumerate(keys[:2]):
        cache.get_or_build(key, _filled(4000, []), kind="test")
        os.utime(root / key, (1_000_000 * (age + 1),) * 2)
    bounded = Cache(root, limit=2 * cache.entries()[0].nbytes + 100)
    with FileLock(str(root / f"{keys[0]}.lock")):  # the least recently used, busy elsewhere
        bounded.get_or_build(keys[2], _filled(4000, []), kind="test")
    (root / f"{keys[0]}.lock").unlink()
    assert sorted(e.key for e in bounded.entries()) == sorted([keys[0], keys[2]])


def test_an_entry_larger_than_the_bound_is_kept_until_the_next(tmp_path):
    root = tmp_path / "cache"
    first, second = content_key("first"), content_key("second")
    cache = Cache(root, limit=100)
    cache.get_or_build(first, _filled(4000, []), kind="test")
    assert [e.key for e in cache.entries()] == [first]
    cache.get_or_build(second, _filled(4000, []), kind="test")
    assert [e.key for e in cache.entries()] == [second]
    assert show(cache).splitlines()[0] == (
        f"iron cache {root}: 1 entry, 4.1 KiB of at most 100 B (IRON_CACHE_MAX_BYTES)"
    )


# ---- python -m iron cache -----------------------------------------------------------------------


def _two_entries(root: Path) -> list[str]:
    keys = [content_key("listed one"), content_key("listed two")]
    cache = Cache(root)
    cache.get_or_build(keys[0], _filled(1500, []), kind="xclbin")
    cache.get_or_build(keys[1], _filled(3000, []), kind="native")
    os.utime(root / keys[0], (1_767_225_600, 1_767_225_600))  # 2026-01-01 00:00:00 UTC
    os.utime(root / keys[1], (1_767_312_000, 1_767_312_000))  # 2026-01-02 00:00:00 UTC
    return keys


def test_python_m_iron_cache_shows_size_and_entries(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.delenv("IRON_CACHE_MAX_BYTES", raising=False)
    one, two = _two_entries(root)
    sizes = {key: sum(p.stat().st_size for p in (root / key).rglob("*")) for key in (one, two)}
    assert sizes == {one: 1726, two: 3226}
    shown = subprocess.run(
        [sys.executable, "-m", "iron", "cache"], cwd=REPO, capture_output=True, text=True,
        env={**os.environ, "IRON_CACHE_DIR": str(root)}, check=False,
    )
    assert (shown.returncode, shown.stderr) == (0, "")
    assert shown.stdout == (
        f"iron cache {root}: 2 entries, 4.8 KiB of at most 2.0 GiB (IRON_CACHE_MAX_BYTES)\n"
        f"  2026-01-02 00:00:00 UTC  native      3.2 KiB  {root / two}\n"
        f"  2026-01-01 00:00:00 UTC  xclbin      1.7 KiB  {root / one}\n"
    )


def test_python_m_iron_cache_clear_empties_it(tmp_path, monkeypatch, capsys):
    root = tmp_path / "cache"
    monkeypatch.setenv("IRON_CACHE_DIR", str(root))
    monkeypatch.setenv("IRON_CACHE_MAX_BYTES", "1048576")
    _two_entries(root)
    (root / f"{content_key('failed')}.building").mkdir()
    (root / f"{content_key('cut off')}.removing" / "sub").mkdir(parents=True)
    (root / "notes.txt").write_text("not iron's\n")

    assert main(["cache", "clear"]) == 0
    assert main(["cache"]) == 0

    assert capsys.readouterr().out == (
        f"iron cache {root}: removed 2 entries, 4.8 KiB\n"
        f"iron cache {root}: 0 entries, 0 B of at most 1.0 MiB (IRON_CACHE_MAX_BYTES)\n"
    )
    assert sorted(p.name for p in root.iterdir()) == ["notes.txt"]


def test_python_m_iron_cache_on_a_file_prints_the_cache_error(tmp_path, monkeypatch, capsys):
    path = tmp_path / "a-file"
    path.write_text("mine\n")
    monkeypatch.setenv("IRON_CACHE_DIR", str(path))
    assert main(["cache", "clear"]) == 1
    quoted(capsys.readouterr().err, "CacheError", str(path), "a file, not a directory", *FIX)
    assert path.read_text() == "mine\n"
