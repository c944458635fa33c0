"""Test-wide settings: under CI (CI=true) hypothesis draws the same examples every run, so a
failure there is reproducible; on a developer's machine it explores new ones each run. The
`on_emulator` fixture runs compiled graphs on the emulator, quietly."""
import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture
def on_emulator(monkeypatch):
    """Compiled graphs run on the emulator, without the backend notice."""
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")
