"""The host's scratchpad words (WordProgram) and backend selection."""
import numpy as np
import pytest

from iron.errors import ArgumentError, BackendUnavailable, IndexOutOfRange
from iron.plan.plan import Const, WordDef, WordKind, WordOp, WordRef
from iron.runtime import backend
from iron.runtime.words import WordProgram
from tests.quotes import quoted

WORDS = (
    WordDef(0, "node", WordKind.CARRIED, bound=(0, 10), what="successor[node]", tensor="successor"),
    WordDef(1, "steps", WordKind.CARRIED, bound=(0, 6), what="trail[steps]", tensor="trail"),
    WordDef(2, "steps + 1", WordKind.NEXT, WordOp.ADD, WordRef(1), Const(1)),
    WordDef(3, "node * 4", WordKind.DMA, WordOp.MUL, WordRef(0), Const(4)),
    WordDef(4, "min(node, 3)", WordKind.CORE, WordOp.MIN, WordRef(0), Const(3)),
    WordDef(5, "-7 // node", WordKind.CORE, WordOp.FLOORDIV, Const(-7), WordRef(0)),
    WordDef(6, "-7 % node", WordKind.CORE, WordOp.MOD, Const(-7), WordRef(0)),
    WordDef(7, "steps * big", WordKind.CORE, WordOp.MUL, WordRef(1), Const(2**31 - 1)),
)


def test_words_are_computed_in_order_with_floor_division_and_int32_wrap():
    words = WordProgram(WORDS)({"node": 2, "steps": 5})
    assert words.dtype == np.int32
    assert words.tolist() == [2, 5, 6, 8, 2, -4, 1, 5 * (2**31 - 1) - 2 * 2**32]  # -7 // 2 = -4, -7 % 2 = 1


def test_a_bound_is_checked_before_anything_runs_with_the_shared_text():
    with pytest.raises(IndexOutOfRange) as e:
        WordProgram(WORDS)({"node": 1, "steps": 6})
    quoted(e.value, "trail[steps]", "steps = 6", "0..5", "nothing was written", "'trail'")


def test_division_by_zero_is_an_argument_error():
    with pytest.raises(ArgumentError) as e:
        WordProgram(WORDS)({"node": 0, "steps": 0})
    quoted(e.value, "-7 // node", "divides by zero")


def test_backend_forced_by_environment(monkeypatch, capsys):
    monkeypatch.setattr(backend, "_announced", set())
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    assert backend.select_backend() == "emulator"
    assert backend.select_backend() == "emulator"
    assert quoted(capsys.readouterr().err, "running on the emulator", "IRON_BACKEND is set").count("\n") == 1   # once


def test_unknown_backend_is_refused(monkeypatch):
    monkeypatch.setenv("IRON_BACKEND", "gpu")
    with pytest.raises(BackendUnavailable) as e:
        backend.select_backend()
    quoted(e.value, "IRON_BACKEND='gpu'", "IRON_BACKEND=emulator", "IRON_BACKEND=xrt")


def test_default_is_the_emulator_without_an_npu(monkeypatch, capsys):
    monkeypatch.setattr(backend, "_announced", set())
    monkeypatch.delenv("IRON_BACKEND", raising=False)
    monkeypatch.setattr("iron.runtime.xrt.describe_npu", lambda: None)
    assert backend.select_backend() == "emulator"
    quoted(capsys.readouterr().err, "running on the emulator", "no Ryzen AI NPU", "/dev/accel")
