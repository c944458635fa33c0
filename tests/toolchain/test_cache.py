"""Tests of iron.toolchain.cache: where the cache lives, keys, sealed build-at-most-once entries.
What it refuses to serve, its errors, eviction and `python -m iron cache` are in tests/reliability."""

import hashlib
import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from iron.toolchain.cache import Cache, cache_dir, content_key


def test_cache_dir_prefers_iron_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("IRON_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "mine"


def test_cache_dir_uses_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.delenv("IRON_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "iron"


def test_cache_dir_defaults_to_home_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("IRON_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir() == tmp_path / ".cache" / "iron"


def test_content_key_is_sha256_of_length_prefixed_parts():
    assert content_key("ab", "c") == hashlib.sha256(b"2:ab1:c").hexdigest()
    assert content_key("ab", "c") == (
        "430fb1b4ac43316eca81fab27a1930ab8eff8fef6a1dc7903dce44bbc2790dc5"
    )


def test_content_key_separates_parts():
    assert content_key("ab", "c") != content_key("a", "bc")
    assert content_key("ab", "") != content_key("ab")


def test_content_key_reads_str_as_utf8():
    assert content_key("é", b"x") == content_key("é".encode(), "x")


def test_get_or_build_builds_once_and_seals_a_manifest(tmp_path):
    cache = Cache(tmp_path)
    calls = []

    def make(staging: Path):
        calls.append(staging)
        (staging / "out.txt").write_text("made")
        (staging / "sub").mkdir()
        (staging / "sub" / "deep.bin").write_bytes(b"\x00\x01")
        return {"size": 4}

    first = cache.get_or_build("k1", make, kind="test")
    second = cache.get_or_build("k1", make, kind="test")
    assert first == second == tmp_path / "k1"
    assert calls == [tmp_path / "k1.building"]
    assert cache.manifest("k1") == {
        "key": "k1",
        "kind": "test",
        "size": 4,
        "files": {
            "out.txt": {"size": 4, "sha256": hashlib.sha256(b"made").hexdigest()},
            "sub/deep.bin": {"size": 2, "sha256": hashlib.sha256(b"\x00\x01").hexdigest()},
        },
    }
    assert json.loads((tmp_path / "k1" / "manifest.json").read_text()) == cache.manifest("k1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k1"]
    assert sorted(p.name for p in (tmp_path / "k1").iterdir()) == ["manifest.json", "out.txt", "sub"]


def test_a_failed_build_stays_staged_and_the_next_starts_from_empty(tmp_path):
    cache = Cache(tmp_path)

    def fail(staging: Path):
        (staging / "partial").write_text("x")
        raise RuntimeError("tool broke")

    with pytest.raises(RuntimeError, match="^tool broke$"):
        cache.get_or_build("k3", fail, kind="test")
    assert not (tmp_path / "k3").exists()
    assert (tmp_path / "k3.building" / "partial").read_text() == "x"
    seen = []

    def make(staging: Path):
        seen.append(sorted(p.name for p in staging.iterdir()))
        return {"second": True}

    cache.get_or_build("k3", make, kind="test")
    assert seen == [[]]
    assert cache.manifest("k3")["second"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k3"]


def test_the_lock_file_exists_while_held_and_is_removed_after(tmp_path):
    cache = Cache(tmp_path)
    seen = []
    cache.get_or_build("k4", lambda staging: seen.append((tmp_path / "k4.lock").exists()) or {},
                       kind="test")
    assert seen == [True]
    assert not (tmp_path / "k4.lock").exists()


def _build_in_process(root: str, log: str, barrier, results) -> None:
    def make(entry: Path):
        with open(log, "a") as f:
            f.write("build\n")
        time.sleep(0.3)
        (entry / "result.txt").write_text(f"built in process {os.getpid()}")
        return {}

    barrier.wait()
    entry = Cache(Path(root)).get_or_build("shared", make, kind="test")
    results.put((entry / "result.txt").read_text())


def test_two_processes_build_the_same_key_once(tmp_path):
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    results = context.Queue()
    log = tmp_path / "builds.log"
    workers = [
        context.Process(target=_build_in_process, args=(str(tmp_path), str(log), barrier, results))
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    got = [results.get(timeout=30), results.get(timeout=30)]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    assert log.read_text() == "build\n"
    assert got[0] == got[1] and got[0].startswith("built in process ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["builds.log", "shared"]
