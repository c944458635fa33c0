"""The README's example runs as written and records the walk numpy records."""
import contextlib
import io
import re
from pathlib import Path

import numpy as np

from iron.models.designs import numpy_walk

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs_and_matches_numpy(monkeypatch):
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")
    code = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    scope: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(README), "exec"), scope)
    successor = scope["successor"]
    np.testing.assert_array_equal(scope["body"].read(scope["walk"].trail), numpy_walk(successor, 3, 9))
    first, trail = printed.getvalue().splitlines()
    assert first == f"Carry(node={int(successor[3])}, steps=1)"
    assert trail == str(numpy_walk(successor, 3, 9))
