"""Hypothesis times nothing in this suite (tests/conftest.py), so a loaded machine cannot fail a
correct test: an example stalled past hypothesis's default 200 ms deadline passes, and no test in
tests/ sets a deadline or the health checks of its own."""
import ast
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TESTS = Path(__file__).parent


def test_an_example_stalled_past_the_default_deadline_passes():
    stalls = [0.3]   # once, as the scheduler may stall a test on cores shared by several test runs

    @settings(max_examples=3, database=None)
    @given(st.integers())
    def stalled_once(n):
        time.sleep(stalls.pop() if stalls else 0)

    stalled_once()
    assert stalls == []


def test_no_test_sets_hypothesis_timing_of_its_own():
    """Settings on a test override the profile's: none may name a deadline or the health checks,
    and only conftest.py registers or loads a profile."""
    own = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
                name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
                timing = {k.arg for k in node.keywords} & {"deadline", "suppress_health_check"}
                if (name == "settings" and timing) or (name.endswith("_profile") and path.name != "conftest.py"):
                    own.append(f"{path.relative_to(TESTS)}:{node.lineno}")
    assert own == []
    assert settings.default.deadline is None and HealthCheck.too_slow in settings.default.suppress_health_check
