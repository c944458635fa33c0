"""Repetition over time on the emulator (iron/compiler/repeat.py): a loop over layers whose
residual stream crosses from one iteration to the next through a DDR buffer of the compiler's,
as one configuration, host-driven on npu1 and npu2 and as a CarriedLoop at depth 2 on npu2 (a
full ELF with the Emit); launches replayed and batched agree with reference() call after call."""
import numpy as np
import pytest

import iron
from iron import Carried
from iron.compiler.plan import Loop
from iron.compiler.rules import Rule
from iron.kernels import Add, Argmax, Copy, MatVec, RMSNorm

F32 = np.float32
N, V = 64, 16


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")


class Layers(iron.Graph):
    """x = x + w_l @ RMSNorm(x, g_l) for each of `count` layers with weights of their own."""

    def __init__(self, count: int):
        rng = np.random.default_rng(5)
        self.w = [iron.param((rng.standard_normal((N, N)) / 16).astype(F32)) for _ in range(count)]
        self.g = [iron.param((1 + rng.standard_normal(N) / 8).astype(F32)) for _ in range(count)]

    def layers(self, x):
        for w, g in zip(self.w, self.g):
            x = Add.step(x, MatVec.step(w, RMSNorm.step(x, g)))
        return x

    def body(self, x):
        return self.layers(x)


class Decoder(Layers):
    """A token's embedding through the layers, the next token the Argmax of a head, recorded."""

    def __init__(self, count: int):
        super().__init__(count)
        rng = np.random.default_rng(6)
        self.emb = iron.weight(rng.standard_normal((V, N)).astype(F32))
        self.head = iron.param(rng.standard_normal((V, N)).astype(F32))
        self.tokens = iron.state((8,), np.int32, name="tokens")

    def body(self, *, tok: Carried[np.int32], pos: Carried[np.int32]):
        nxt = Argmax.step(MatVec.step(self.head, self.layers(Copy.step(self.emb[tok]))))
        Copy.step(nxt, out=self.tokens[pos])
        return iron.carry(tok=nxt, pos=pos + 1)


@pytest.mark.parametrize("device", ["npu1", "npu2"])
def test_thirty_layers_run_as_one_configuration_their_stream_through_ddr(device):
    graph = Layers(30)
    compiled = graph.compile(x=((N,), F32), device=device)
    plan = compiled.plan
    assert len(plan.configurations) == 1
    assert plan.repeat.groups == ("g0", "g1") and plan.repeat.count == 29   # the last layer's result is the output
    assert plan.repeat.operands[3] == ("through.Add#8", "g.3", "w.3", "through.Add#11")
    looped = [c for c in plan.cores if c.group in plan.repeat.groups]
    assert len(looped) == 2 and all(c.program == (Loop(29, c.program[0].body),) for c in looped)
    crossing = [text for rule, text in plan.rules if rule is Rule.REPEAT_OVER_TIME][0]
    assert crossing.startswith("Add#2, Add#5, Add#8, ") and crossing.endswith(", through.Add#86)")
    x = np.random.default_rng(1).standard_normal(N).astype(F32)
    for _ in range(3):   # the first launch runs task by task, the later ones replay it
        np.testing.assert_array_equal(compiled(x), graph.reference(x))


def test_a_decoder_over_twenty_layers_runs_as_a_carried_loop_at_depth_two_on_npu2():
    body = Decoder(20).compile(device="npu2")
    plan = body.plan
    assert plan.full_elf and plan.emit is not None and len(plan.configurations) == 1
    assert plan.repeat.count == 19
    reference, carry, tokens = Decoder(20), {"tok": 1, "pos": 0}, []
    for _ in range(8):
        carry = dict(reference.reference(**carry))
        tokens.append(carry["tok"])
    loop = iron.CarriedLoop(body, body, depth=2)
    assert list(loop.run(7, tok=1, pos=0)) == list(range(7))
    assert dict(loop.carry) == carry
    assert body.read("tokens").tolist() == reference.read("tokens").tolist() == tokens
