"""A trace path that cannot be written (issue 25 item 6) is a TraceError naming it and the fix
before anything runs: a call or a loop with `trace=` a directory, a file in a missing directory
or not a path changes no state; a bad IRON_TRACE refuses the first call; a write failing as a
loop stops never hides the loop's IndexOutOfRange; IRON_TRACE failing at exit is one line and
exit status 1."""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

import iron
from iron.errors import IndexOutOfRange, TraceError
from iron.runtime.timeline import writable
from tests.quotes import quoted
from tests.reliability.test_cache import _as_an_account_that_cannot_write
from tests.reliability.test_device_bounds import guarded, states, text

REPO = Path(__file__).resolve().parents[2]
FIX = "Give the path of a file you can write, e.g. 'trace.json' in the current directory."


def bad_paths(tmp_path: Path) -> dict[str, tuple[object, str]]:
    """Each bad trace= value, with why it cannot be written."""
    return {
        "a directory": (tmp_path, "it is a directory"),
        "in a missing directory": (tmp_path / "absent" / "t.json", f"its directory {tmp_path / 'absent'} does not exist"),
    }


@pytest.mark.parametrize("case", ["a directory", "in a missing directory"])
def test_a_call_traced_to_an_unwritable_path_runs_nothing(case, tmp_path, on_emulator, trail, unchanged):
    path, why = bad_paths(tmp_path)[case]
    compiled = trail.compile(((4,), np.int32))
    x = np.array([1, 2, 3, 4], np.int32)
    with unchanged(trail, compiled=(compiled,)), pytest.raises(TraceError) as raised:
        compiled(x, trace=path)
    assert str(raised.value) == f"trace={str(path)!r} cannot be written: {why}. {FIX}"
    compiled(x, trace=tmp_path / "t.json")   # a path that can be written: the call runs, once
    np.testing.assert_array_equal(compiled.read(trail.trail), x)
    assert (tmp_path / "t.json").read_text().startswith('{"traceEvents"')


def test_a_trace_that_is_not_a_path_is_refused(on_emulator, trail, unchanged):
    compiled = trail.compile(((4,), np.int32))
    with unchanged(trail, compiled=(compiled,)), pytest.raises(TraceError) as raised:
        compiled(np.ones(4, np.int32), trace=3)
    quoted(raised.value, "trace=3", "not a path", "'trace.json'")


def test_a_loop_traced_to_a_directory_runs_nothing(tmp_path, on_emulator):
    graph, body = guarded()
    before = states(body)
    loop = iron.CarriedLoop(body, body, depth=2)
    with pytest.raises(TraceError) as raised:
        loop.run(3, node=3, steps=0, trace=tmp_path)
    assert str(raised.value) == f"trace={str(tmp_path)!r} cannot be written: it is a directory. {FIX}"
    assert loop.transitions == 0 and loop.carry is None
    np.testing.assert_array_equal(states(body), before)


def test_a_trace_failing_as_the_loop_stops_never_hides_its_index_out_of_range(tmp_path, on_emulator):
    graph, body = guarded()
    folder = tmp_path / "traces"
    folder.mkdir()
    path = folder / "t.json"
    loop = iron.CarriedLoop(body, body, depth=2)
    seen = []
    with pytest.raises(IndexOutOfRange) as raised:
        for index in loop.run(9, node=3, steps=0, trace=path):
            seen.append(index)
            if index == 0:
                shutil.rmtree(folder)   # the trace can no longer be written when the loop stops
    assert str(raised.value) == text(5, 0, by_host=True)
    assert raised.value.__notes__ == [
        f"trace={str(path)!r} cannot be written: No such file or directory. {FIX}"
    ]
    assert seen == [0, 1, 2, 3, 4] and loop.transitions == 6


def test_a_bad_iron_trace_refuses_the_first_call_before_it_runs(tmp_path, monkeypatch, on_emulator, trail, unchanged):
    monkeypatch.setenv("IRON_TRACE", str(tmp_path))
    with unchanged(trail), pytest.raises(TraceError) as raised:
        trail(np.array([1, 2, 3, 4], np.int32))
    assert str(raised.value) == f"IRON_TRACE={str(tmp_path)!r} cannot be written: it is a directory. {FIX}"


SCRIPT = """
    import shutil, sys
    import numpy as np
    import iron
    from iron.kernels import Add

    class Twice(iron.Graph):
        def body(self, x):
            return Add.step(x, x)

    print(Twice()(np.arange(4, dtype=np.int32)))
    shutil.rmtree(sys.argv[1])   # where IRON_TRACE points is gone before the process exits
"""


def test_iron_trace_failing_at_exit_is_one_line_and_a_failed_exit_status(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    path = folder / "t.json"
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), str(folder)], cwd=REPO, capture_output=True, text=True,
        env={**os.environ, "IRON_TRACE": str(path), "IRON_BACKEND": "emulator", "IRON_QUIET": "1"}, check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "[0 2 4 6]\n",
        f"iron: TraceError: IRON_TRACE={str(path)!r} cannot be written: its directory {folder} does not exist. {FIX}\n",
    )


def test_iron_trace_written_at_exit_leaves_the_exit_status_alone(tmp_path):
    """The same script whose trace can still be written at exit: status 0, the trace written."""
    keep, path = tmp_path / "kept", tmp_path / "t.json"
    keep.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), str(keep)], cwd=REPO, capture_output=True, text=True,
        env={**os.environ, "IRON_TRACE": str(path), "IRON_BACKEND": "emulator", "IRON_QUIET": "1"}, check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "[0 2 4 6]\n", "")
    assert path.read_text().startswith('{"traceEvents"')


def test_a_trace_file_you_cannot_write_is_refused():
    # Under /tmp, so that `nobody` can reach it when these tests run as root.
    base = Path(tempfile.mkdtemp(prefix="iron-trace-"))
    try:
        base.chmod(0o755)
        path = base / "t.json"
        path.write_text("kept\n")
        path.chmod(0o444)
        text = _as_an_account_that_cannot_write(lambda: _refusal(writable, path))
        assert text == f"trace={str(path)!r} cannot be written: it is not writable by you. {FIX}"
        assert path.read_text() == "kept\n"
    finally:
        shutil.rmtree(base)


def _refusal(check, path) -> str:
    try:
        check(path)
    except TraceError as error:
        return str(error)
    return "accepted"
