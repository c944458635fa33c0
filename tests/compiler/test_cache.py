"""Tests of iron.compiler.cache: where the cache lives, keys, and build-at-most-once entries."""

import hashlib
import json
import multiprocessing
import time
from pathlib import Path

import pytest

from iron.compiler.cache import Cache, cache_dir, content_key


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


def test_get_or_build_builds_once_and_records(tmp_path):
    cache = Cache(tmp_path)
    calls = []

    def make(entry: Path):
        calls.append(entry)
        (entry / "out.txt").write_text("made")
        return {"size": 4}

    first = cache.get_or_build("k1", make)
    second = cache.get_or_build("k1", make)
    assert first == second == tmp_path / "k1"
    assert calls == [tmp_path / "k1"]
    assert cache.is_done("k1")
    assert cache.record("k1") == {"key": "k1", "size": 4}
    assert json.loads((tmp_path / "k1" / "done.json").read_text()) == {"key": "k1", "size": 4}
    assert sorted(p.name for p in (tmp_path / "k1").iterdir()) == ["done.json", "out.txt"]


def test_unfinished_entry_is_rebuilt_from_empty(tmp_path):
    cache = Cache(tmp_path)
    stale = tmp_path / "k2"
    stale.mkdir()
    (stale / "half.o").write_text("crashed here")
    seen = []

    def make(entry: Path):
        seen.append(sorted(p.name for p in entry.iterdir()))
        return {}

    assert not cache.is_done("k2")
    cache.get_or_build("k2", make)
    assert seen == [[]]
    assert not (stale / "half.o").exists()


def test_failed_build_is_not_served(tmp_path):
    cache = Cache(tmp_path)

    def fail(entry: Path):
        (entry / "partial").write_text("x")
        raise RuntimeError("tool broke")

    with pytest.raises(RuntimeError, match="^tool broke$"):
        cache.get_or_build("k3", fail)
    assert not cache.is_done("k3")
    assert (tmp_path / "k3" / "partial").read_text() == "x"
    cache.get_or_build("k3", lambda entry: {"second": True})
    assert cache.record("k3") == {"key": "k3", "second": True}


def test_entry_and_locked_name_the_same_directory(tmp_path):
    cache = Cache(tmp_path / "root")
    with cache.locked("k4") as entry:
        assert entry == cache.entry("k4") == tmp_path / "root" / "k4"
        assert (tmp_path / "root" / "k4.lock").exists()


def _build_in_process(root: str, log: str, barrier, results) -> None:
    def make(entry: Path):
        with open(log, "a") as f:
            f.write("build\n")
        time.sleep(0.3)
        (entry / "result.txt").write_text(f"built in {entry.name}")
        return {}

    barrier.wait()
    entry = Cache(Path(root)).get_or_build("shared", make)
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
    assert got == ["built in shared", "built in shared"]
