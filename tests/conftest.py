"""Test-wide settings: under CI (CI=true) hypothesis draws the same examples every run, so a
failure there is reproducible; on a developer's machine it explores new ones each run."""
import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
