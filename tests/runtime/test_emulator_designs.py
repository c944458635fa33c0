"""The emulator on real Plans: tests/compiler/designs.py compiled by iron.compiler.compile and run
through the emulator, with the host's side written inline (constants, inputs and per-call words
into host buffers, outputs and states read back), compared with `graph.reference(...)`.

Integers are exact; float32 within rtol 1e-5 / atol 1e-6 (matrix rows are summed in blocks on the
device, in another order than numpy's), bfloat16 within rtol 2e-2 (two bf16 ulps). Walk runs as a
device loop on npu2 (each run's Emit writes the next run's scratchpad) and host-driven on npu1.
The native kernel mode runs two designs through the kernels' C++ (skipped without g++). Two
designs run 24 calls each replayed and task by task: every host buffer bit for bit alike.
"""
import shutil
from collections import Counter

import ml_dtypes
import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron.compiler.compile import compile_program
from iron.plan.plan import HostRole, PlacementKind
from iron.runtime.emulator import Emulator
from iron.runtime.emulator.batch import Batch
from iron.runtime.words import WordProgram
from tests.compiler import designs

F32 = {"rtol": 1e-5, "atol": 1e-6}
BF16 = {"rtol": 2e-2, "atol": 1e-2}


def view(words: np.ndarray, placement) -> np.ndarray:
    """The typed, shaped view of `placement` inside its uint32 host buffer."""
    nbytes = int(np.prod(placement.shape, dtype=np.int64)) * placement.dtype.itemsize
    start = placement.offset * 4
    return words.view(np.uint8)[start: start + nbytes].view(placement.dtype).reshape(placement.shape)


def load(graph, device="npu2", kernels="numpy", replay=True):
    """The graph's Plan loaded on an Emulator, with its weights and params written."""
    plan = compile_program(designs.trace(graph), from_name(device))
    emulator = Emulator(plan, kernels=kernels, replay=replay)
    arrays = graph._arrays()
    for p in plan.placements:
        if p.kind in (PlacementKind.WEIGHT, PlacementKind.PARAM):
            view(emulator.buffer(p.buffer), p)[...] = arrays[p.name]
    return plan, emulator


def call(plan, emulator, tensors=None, **values):
    """One host-driven call: inputs and words written, one launch; returns the outputs."""
    for name, array in (tensors or {}).items():
        view(emulator.buffer(plan.placement(name).buffer), plan.placement(name))[...] = array
    words = WordProgram(plan.words)(values).view(np.uint32)
    bindings = {"words": np.resize(words, plan.host_buffer(HostRole.WORDS).nwords)}
    if not plan.full_elf:
        emulator.buffer("words")[:] = bindings.pop("words")
    if plan.emit is not None:
        bindings["feedback"] = np.zeros(plan.host_buffer(HostRole.FEEDBACK).nwords, np.uint32)
    run = emulator.run(**bindings)
    emulator.start(run)
    emulator.wait(run)
    return [view(emulator.buffer(p.buffer), p).copy() for p in plan.placements if p.kind is PlacementKind.OUTPUT]


@pytest.mark.parametrize("device", ["npu2", "npu1"])
def test_add_one(device):
    graph = designs.add_one()
    plan, emulator = load(graph, device)
    for x in (np.arange(1024, dtype=np.int32), np.full(1024, 2**31 - 1, np.int32)):
        (y,) = call(plan, emulator, {"x": x})
        np.testing.assert_array_equal(y, graph.reference(x))


def test_accumulate_at_a_scratchpad_row():
    graph = designs.accumulate_at()
    plan, emulator = load(graph)
    for pos, scale in ((1, 1), (3, -2), (1, 5)):
        x = np.arange(64, dtype=np.int32) * scale
        call(plan, emulator, {"x": x}, pos=pos)
        graph.reference(x, pos=pos)
    np.testing.assert_array_equal(view(emulator.buffer("states"), plan.placement("acc")), graph.read("acc"))
    assert graph.read("acc")[1].tolist() == (np.arange(64) * 6).tolist()


@pytest.mark.parametrize("graph, tolerance", [
    (designs.mlp_layer(64, np.float32), F32),
    (designs.mlp_layer(64, ml_dtypes.bfloat16), BF16),
    (designs.mlp(), F32),
    (designs.big_matvec(), F32),
])
def test_float_designs_match_the_reference(graph, tolerance):
    plan, emulator = load(graph)
    x = designs.example(graph)["x"]
    for scale in (1.0, -0.5):
        given = (x * scale).astype(x.dtype)
        (y,) = call(plan, emulator, {"x": given})
        expected = graph.reference(given)
        np.testing.assert_allclose(y.astype(np.float32), expected.astype(np.float32), **tolerance)


def numpy_trail(graph, steps: int) -> np.ndarray:
    nxt = {"node": 0, "steps": 0}
    for _ in range(steps):
        nxt = graph.reference(**nxt)
    return graph.read("trail")


def test_walk_runs_as_a_device_loop_on_npu2():
    graph = designs.walk()
    plan, emulator = load(graph, "npu2")
    ring = [np.zeros(plan.host_buffer(HostRole.WORDS).nwords, np.uint32) for _ in range(2)]
    ring[0][:len(plan.words)] = WordProgram(plan.words)({"node": 0, "steps": 0}).view(np.uint32)
    runs = [emulator.run(words=ring[k], feedback=ring[(k + 1) % 2]) for k in range(2)]
    for k in range(9):
        emulator.wait(runs[k % 2])
        emulator.start(runs[k % 2])
    for run in runs:
        emulator.wait(run)
    assert emulator.launches == 9
    np.testing.assert_array_equal(view(emulator.buffer("states"), plan.placement("trail")), numpy_trail(graph, 9))


def test_runs_binding_the_same_arrays_reuse_their_dma_windows():
    """A bound uint32 array is used as it is (not a new view per run), so each DMA op keeps one
    window per array and offset it was launched on: two for the ring's two scratchpads, one for
    the others (those whose offset is patched per launch aside), after 9 launches."""
    graph = designs.walk()
    plan, emulator = load(graph, "npu2")
    ring = [np.zeros(plan.host_buffer(HostRole.WORDS).nwords, np.uint32) for _ in range(2)]
    runs = [emulator.run(words=ring[k], feedback=ring[(k + 1) % 2]) for k in range(2)]
    assert runs[0].buffers["words"] is ring[0] and runs[1].buffers["feedback"] is ring[0]
    for k in range(9):
        emulator.start(runs[k % 2])
        emulator.wait(runs[k % 2])
    ops = [dma for _, dma, _, _ in emulator.sequence.steps if dma is not None and dma.dma.patch_word is None]
    on_words = [dma for dma in ops if dma.dma.buffer in ("words", "feedback")]
    assert on_words and {len(dma.windows) for dma in on_words} == {2}
    assert {len(dma.windows) for dma in ops if dma not in on_words} == {1}


def test_walk_runs_host_driven_on_npu1():
    graph = designs.walk()
    plan, emulator = load(graph, "npu1")
    values = {"node": 0, "steps": 0}
    for _ in range(9):
        call(plan, emulator, **values)
        node = int(view(emulator.buffer("outputs"), plan.placement("carry.node")))
        values = {"node": node, "steps": values["steps"] + 1}
    np.testing.assert_array_equal(view(emulator.buffer("states"), plan.placement("trail")), numpy_trail(graph, 9))


def test_native_kernels_run_real_plans():
    if shutil.which("g++") is None:
        pytest.skip("the host C++ compiler g++ is not installed (apt-get install g++)")
    layer = designs.mlp_layer(64, np.float32)
    plan, emulator = load(layer, kernels="native")
    x = designs.example(layer)["x"]
    (y,) = call(plan, emulator, {"x": x})
    np.testing.assert_allclose(y, layer.reference(x), rtol=1e-4, atol=1e-5)
    graph = designs.accumulate_at()
    plan, emulator = load(graph, kernels="native")
    call(plan, emulator, {"x": np.arange(64, dtype=np.int32)}, pos=2)
    assert view(emulator.buffer("states"), plan.placement("acc"))[2].tolist() == list(range(64))


def walk_calls(plan, emulator, k):
    """Walk host-driven: the next node from the carried output, steps counting up (mod its 9 trail rows)."""
    node = int(view(emulator.buffer("outputs"), plan.placement("carry.node"))) if k else 0
    return {}, {"node": node, "steps": k % 9}


class TiledProduct(iron.Graph):
    """C = A @ B over the array's grid (tile_matmul_over_array): A an input, B a param."""

    def __init__(self, m: int, k: int, n: int, dtype):
        rng = np.random.default_rng(3)
        self.b = iron.param(rng.integers(-9, 9, (k, n)).astype(dtype))
        self.m = m

    def body(self, a):
        return iron.kernels.MatMul.step(a, self.b)

    def example(self) -> dict[str, np.ndarray]:
        return {"a": np.ones((self.m, self.b.shape[0]), self.b.dtype)}


def tiled_calls(dtype):
    def given(plan, emulator, k):
        rng = np.random.default_rng(k)
        return {"a": rng.standard_normal((128, 256)).astype(dtype) * 9}, {}
    return given


REPLAYED = [
    (designs.mlp, "npu2", 21, lambda plan, emulator, k: ({"x": designs.example(designs.mlp())["x"] * (1 + k / 8)}, {})),
    (designs.big_matvec, "npu2", 21, lambda plan, emulator, k: ({"x": designs.example(designs.big_matvec())["x"] - k}, {})),
    (designs.accumulate_at, "npu2", 21, lambda plan, emulator, k: ({"x": np.arange(64, dtype=np.int32) * k}, {"pos": k % 4})),
    (designs.walk, "npu1", 21, walk_calls),
    (lambda: TiledProduct(128, 256, 64, np.float32), "npu2", 21, tiled_calls(np.float32)),
    (lambda: TiledProduct(128, 256, 64, np.int16), "npu2", 21, tiled_calls(np.int16)),
]


@pytest.mark.parametrize("make, device, replayed, given", REPLAYED,
                         ids=["mlp", "big_matvec", "accumulate_at", "walk", "tiled_f32", "tiled_i16"])
def test_replayed_calls_equal_calls_run_task_by_task(make, device, replayed, given):
    """Calls after the launches repeat are replayed: every host buffer (outputs, states, words)
    bit for bit as launches run task by task leave it, call after call."""
    graph = make()
    plan, replaying = load(graph, device)
    _, stepping = load(graph, device, replay=False)
    for k in range(24):
        tensors, values = given(plan, stepping, k)
        tensors = {name: array.astype(plan.placement(name).dtype) for name, array in tensors.items()}
        call(plan, replaying, tensors, **values)
        call(plan, stepping, tensors, **values)
        for b in plan.host_buffers:
            np.testing.assert_array_equal(replaying.buffer(b.name), stepping.buffer(b.name))
    assert (replaying.launches, replaying.replayed, stepping.replayed) == (24, replayed, 0)


def test_replay_reads_the_host_words_of_kernel_inputs_in_place():
    """A tiled MatMul's A and B blocks are only kernel inputs filled from the host in the same
    launch, so the replayed launches fill no tile buffer with them: every call reads its blocks
    in place (Forwarded), and the results stay bit for bit those of launches run task by task
    (test_replayed_calls_equal_calls_run_task_by_task, "tiled_f32")."""
    graph = TiledProduct(128, 256, 64, np.float32)
    plan, emulator = load(graph)
    for k in range(4):
        tensors, _ = tiled_calls(np.float32)(plan, emulator, k)
        (c,) = call(plan, emulator, tensors)
    # sums of 256 products of up to ~100 in another order than numpy's: within 1e-2
    np.testing.assert_allclose(c, graph.reference(**tensors), rtol=1e-5, atol=1e-2)
    moves = {id(a): a for launch in emulator._replay.cycle for moves in launch.moves.values() for _, a in moves}
    batches = [a for a in moves.values() if type(a) is Batch]
    kinds = Counter(type(a).__name__ for a in [*moves.values(), *(m for b in batches for m in b.members)])
    # a cycle of two launches, each 32 cores x 2 k-blocks calls reading in place, 32 Drains of C;
    # the 32 cores' calls of one k-block run as one Batch (batch.py)
    assert emulator.replayed == 1 and kinds == {"Forwarded": 128, "Drain": 64, "Batch": 4}
    assert [len(b.members) for b in batches] == [32] * 4
