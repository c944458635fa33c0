"""Issue 25 item 1: one compiled graph used from several threads. Each host call holds the
graph's lock from writing its inputs to reading its outputs, and a CarriedLoop holds it for every
step between two yields, so no call returns another call's result, and reading `carry` or
`transitions` or calling the graph while a loop iterates lands between two steps."""
import threading
import time

import numpy as np
import pytest

import iron
from iron import Carried
from iron.kernels import Add, Copy
from iron.models.designs import Walk, numpy_walk
from tests.reliability.conftest import hooked

THREADS, CALLS = 4, 50


# kernels that let other threads run mid-launch (as a kernel releasing the GIL would), so a few
# hundred calls interleave as many thousands do
SlowAdd = hooked(Add, "slow_add", lambda: time.sleep(0))
SlowCopy = hooked(Copy, "slow_copy", lambda: time.sleep(0))


class SlowWalk(Walk):
    def body(self, *, node: Carried[np.int32], steps: Carried[np.int32]):
        nxt = SlowCopy.step(self.successor[node], dtype=np.int32)
        SlowCopy.step(nxt, self.trail[steps], dtype=np.int32)
        return iron.carry(node=nxt, steps=steps + 1)


class Sum(iron.Graph):
    def body(self, a, b):
        return SlowAdd.step(a, b)


def in_threads(work, count=THREADS):
    """Run work(k) on `count` threads at once; the exceptions they raised."""
    errors, ready = [], threading.Barrier(count)

    def run(k):
        ready.wait()
        try:
            work(k)
        except BaseException as error:   # noqa: BLE001 - reported by the test
            errors.append(error)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def four_threads_of_calls(compiled) -> list:
    """THREADS x CALLS host calls of `compiled` at once; the exceptions raised and the calls
    whose result was not their own."""
    wrong = []

    def calls(k):
        for n in range(CALLS):
            a = np.full(64, 1000 * k + n, np.int32)
            b = np.arange(64, dtype=np.int32)
            out = compiled(a, b)
            if not np.array_equal(out, a + b):
                wrong.append((k, n, int(out[0])))

    return in_threads(calls) + wrong


@pytest.mark.parametrize("device", ["npu2", "npu1"])
def test_host_calls_from_four_threads_each_return_their_own_result(on_emulator, device):
    compiled = Sum().compile(((64,), np.int32), ((64,), np.int32), device=device)
    assert four_threads_of_calls(compiled) == []


def test_through_xrt_host_calls_from_four_threads_each_return_their_own_result(xrt):
    compiled = Sum().compile(((64,), np.int32), ((64,), np.int32), device="npu2")
    assert four_threads_of_calls(compiled) == []


def test_reading_a_loop_and_calling_its_graph_from_other_threads_while_it_iterates(on_emulator):
    succ = np.random.default_rng(5).permutation(16).astype(np.int32)
    walk = SlowWalk(succ, 64)
    body = walk.compile(device="npu2")
    loop = iron.CarriedLoop(body, body, depth=3)
    steps, seen, carries, counts = 40, [], [], {2: [], 3: []}

    def work(k):
        if k == 0:
            seen.extend(loop.run(steps, node=3, steps=0))
        elif k == 1:   # host calls of the same graph, writing rows the loop never reaches
            for n in range(12):
                body(node=n, steps=50 + n)
        else:
            for _ in range(30):
                carries.append(dict(loop.carry or {}))
                counts[k].append(loop.transitions)

    assert in_threads(work) == []
    path = numpy_walk(succ, 3, steps + 1)
    assert seen == list(range(steps))
    assert loop.transitions == steps + 1
    assert dict(loop.carry) == {"node": int(path[-1]), "steps": steps + 1}
    trail = body.read(walk.trail)
    np.testing.assert_array_equal(trail[:steps + 1], path)
    np.testing.assert_array_equal(trail[50:62], succ[:12])
    for read in counts.values():   # each reader sees the count grow, never past the end
        assert read == sorted(read) and set(read) <= set(range(steps + 2))
    for carry in carries:   # each carry read whole between two steps: its node is the one of its step
        if carry:
            assert carry["node"] == path[carry["steps"] - 1], carry
