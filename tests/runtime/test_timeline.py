"""The timed emulator and its timeline (iron/runtime/timeline.py): timed runs compute exactly the
values untimed ones do on every design of tests/compiler/designs.py and the guide's decoder;
estimate() on hand-checked designs; CarriedLoop estimates per depth; and the Chrome trace-event
JSON of a call and of a depth-2 Walk loop checked against the format (required fields, spans
well nested per track, times monotonic), showing two runs in flight at once and a host-driven
call's launch gap."""
import json

import numpy as np
import pytest

import iron
from iron.plan import cost
from iron.runtime.timeline import DEVICE, HOST, Bound, Ddr
from tests.compiler import designs

pytestmark = pytest.mark.usefixtures("on_emulator")

DESIGNS = {
    "walk": lambda: designs.walk(8),
    "add_one": lambda: designs.add_one(256),
    "accumulate_at": lambda: designs.accumulate_at(64, 4),
    "mlp_layer": lambda: designs.mlp_layer(64),
    "mlp": lambda: designs.mlp(2, 256),
    "big_matvec": lambda: designs.big_matvec(512, 256),
    "all_kernels": lambda: all_kernels(),
}


def all_kernels():
    rng = np.random.default_rng(0)
    graph = designs.AllKernels(rng.standard_normal((8, 16)).astype(np.float32),
                               rng.standard_normal((16, 4)).astype(np.float32))
    graph.example = lambda: {"x": rng.standard_normal(16).astype(np.float32),
                             "y": rng.standard_normal(16).astype(np.float32)}
    return graph


VALUES = {"walk": {"node": 3, "steps": 0}, "accumulate_at": {"pos": 2}, "all_kernels": {"n": 5}}


def calls(name: str, device: str, timed: bool) -> list:
    """Three calls of a fresh instance of design `name` (carried values fed back), and its states."""
    graph = DESIGNS[name]()
    tensors = designs.example(graph)
    compiled = graph.compile(**{k: (a.shape, a.dtype) for k, a in tensors.items()}, device=device)
    if timed:
        compiled.timed()
    values, results = dict(VALUES.get(name, {})), []
    for _ in range(3):
        out = compiled(**tensors, **values)
        results.append(out)
        if isinstance(out, iron.Carry):
            values = dict(out)
    states = [compiled.read(p.name) for p in compiled.plan.placements if p.kind.value == "state"]
    return results + states


def same(a, b) -> bool:
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, iron.Carry):
        return dict(a) == dict(b)
    return np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("device", ["npu1", "npu2"])
@pytest.mark.parametrize("name", sorted(DESIGNS))
def test_the_timed_emulator_computes_what_the_untimed_one_does(name, device):
    assert same(calls(name, device, timed=True), calls(name, device, timed=False))


def test_the_timed_decoder_generates_the_same_tokens(capsys):
    from tests.compiler.test_share_channels import load_decoder

    decoder = load_decoder()
    model = decoder.Decoder()
    first, body = decoder.compile_versions(model)
    untimed = decoder.device_loop(model, first, body, decoder.PROMPT, 6, 2)
    model = decoder.Decoder()
    first, body = decoder.compile_versions(model)
    iron.CarriedLoop(first, body).timed()
    assert decoder.device_loop(model, first, body, decoder.PROMPT, 6, 2) == untimed


def test_estimate_of_add_one_on_npu2_is_its_launch_cost_and_its_dma_and_kernel_times():
    compiled = designs.add_one(1024).compile(x=((1024,), np.int32), device="npu2")
    x = np.arange(1024, dtype=np.int32)
    e = compiled.estimate(x)
    assert np.array_equal(compiled(x), x + 1)
    gen = cost.GENERATIONS["npu2"]
    # in: x and the ones, 8192 bytes through one channel at 8 bytes per cycle; the Add of 1024
    # int32 (8192 bytes read at 64 per cycle, 4096 written at 32, plus the call); out: 4096 bytes
    cycles = 8192 / 8 + (64 + 128) + 4096 / 8
    assert e.device_ns == pytest.approx(cycles / 1.8)
    assert e.call_ns == pytest.approx(gen.host_call_ns + cycles / 1.8)
    assert e.busiest == "tile_0_2"
    assert e.share == pytest.approx((64 + 128) / cycles)
    # iron's Add as written: 1024 int64 adds of 2 cycles each, in place of the vectorised 128
    assert e.written_ns == pytest.approx(e.call_ns + (1024 * 2 - 128) / 1.8)
    # the roofline: x and the ones read from DDR, the result written, at 70 GB/s; no MACs
    assert e.bound == Bound(ddr_bytes=3 * 4096, ddr_ns=3 * 4096 / 70, mac_ns=0.0)
    assert e.reached == pytest.approx(3 * 4096 / 70 / e.device_ns)
    assert str(e) == (f"estimated {e.call_ns / 1000:.1f} us per call with vectorised kernels (the roofline), "
                      f"{e.written_ns / 1000:.1f} us with iron's kernels; on the device {e.device_ns / 1000:.1f} us "
                      f"(busiest tile tile_0_2, busy {100 * e.share:.0f}% of the run); roofline bound 0.2 us "
                      f"(0.012 MB to and from DDR: 0.2 us, MACs at the array's peak: 0.0 us): the design reaches "
                      f"{100 * e.reached:.0f}% of it")


def test_a_device_loop_step_costs_a_restart_where_a_host_call_costs_the_whole_launch():
    body = designs.walk(8).compile(device="npu2")
    host = body.estimate(node=3, steps=0)
    gen = cost.GENERATIONS["npu2"]
    per_depth = {d: iron.CarriedLoop(body, body, depth=d).estimate(7, node=3, steps=0) for d in (1, 2, 4)}
    assert host.call_ns == pytest.approx(gen.host_call_ns + host.device_ns)
    # depth 1: restart, then the run, then the host notices; depth 2 and 4: the restarts alone, as
    # each run (about 0.1 us) ends long before the next restart does, plus the last run over 7 steps
    assert per_depth[1].call_ns == pytest.approx(gen.host_restart_ns + per_depth[1].device_ns)
    assert per_depth[2].call_ns == pytest.approx(gen.host_restart_ns + per_depth[2].device_ns / 7)
    assert per_depth[4].call_ns == pytest.approx(gen.host_restart_ns + per_depth[4].device_ns / 7)
    assert all(e.busiest == "tile_0_2" for e in per_depth.values())


def events(path) -> tuple[dict, list]:
    data = json.loads(path.read_text())
    names = {e["tid"]: e["args"]["name"] for e in data["traceEvents"] if e["name"] == "thread_name"}
    return names, [e for e in data["traceEvents"] if e["ph"] == "X"]


def check_trace_format(path):
    """Required fields; per track, spans start in order and nest (each inside or after the last open one)."""
    names, spans = events(path)
    data = json.loads(path.read_text())
    for e in data["traceEvents"]:
        assert {"name", "ph", "pid", "tid"} <= set(e)
        assert e["ph"] in ("X", "M")
    for e in spans:
        assert {"ts", "dur", "cat"} <= set(e) and e["dur"] >= 0 and e["ts"] >= 0
        assert e["tid"] in names
    for tid in names:
        mine = [e for e in spans if e["tid"] == tid]
        assert [e["ts"] for e in mine] == sorted(e["ts"] for e in mine), names[tid]
        open_ends: list[float] = []
        for e in mine:
            while open_ends and e["ts"] >= open_ends[-1] - 1e-6:
                open_ends.pop()
            end = e["ts"] + e["dur"]
            assert not open_ends or end <= open_ends[-1] + 1e-6, f"{names[tid]}: {e} crosses its parent"
            open_ends.append(end)
    return names, spans


def test_a_host_driven_call_traces_its_launch_gap(tmp_path):
    compiled = designs.add_one(1024).compile(x=((1024,), np.int32), device="npu2")
    x = np.arange(1024, dtype=np.int32)
    path = tmp_path / "call.json"
    assert np.array_equal(compiled(x, trace=path), x + 1)
    names, spans = check_trace_format(path)
    tracks = set(names.values())
    assert {HOST, DEVICE, "AddOne: core tile_0_2 (group g0)", "AddOne: s2mm 0 of tile_0_2 (@g0_in)",
            "AddOne: s2mm 0 of shim_0_0 (@g0_host)"} <= tracks
    host = [e for e in spans if names[e["tid"]] == HOST]
    assert [e["name"] for e in host] == ["call AddOne", "submit", "wait", "complete"]
    run = next(e for e in spans if names[e["tid"]] == DEVICE)
    submit, complete = host[1], host[3]
    assert run["ts"] == pytest.approx(submit["ts"] + 32.0)   # the launch gap: half of 64 us before the run
    assert complete["ts"] == pytest.approx(run["ts"] + run["dur"]) and complete["dur"] == pytest.approx(32.0)
    kernel = [e for e in spans if names[e["tid"]] == "AddOne: core tile_0_2 (group g0)" and e["name"] == "g0"]
    assert len(kernel) == 1 and run["ts"] <= kernel[0]["ts"] <= run["ts"] + run["dur"]


def test_a_depth_2_walk_loop_has_two_runs_in_flight_at_once(tmp_path):
    walk = designs.walk(8)
    body = walk.compile(device="npu2")
    path = tmp_path / "walk.json"
    for _ in iron.CarriedLoop(body, body, depth=2).run(6, node=3, steps=0, trace=path):
        pass
    assert body.read("trail").tolist() == [4, 3, 4, 3, 4, 3, 4, 0, 0]   # successor i -> 7 - i, from node 3
    names, spans = check_trace_format(path)
    flights = sorted((e["ts"], e["ts"] + e["dur"]) for e in spans if names[e["tid"]].endswith("in flight"))
    assert len(flights) == 7
    overlapping = [(a, b) for a, b in zip(flights, flights[1:]) if b[0] < a[1]]
    assert len(overlapping) >= 5
    runs = [e for e in spans if names[e["tid"]] == DEVICE]
    assert len(runs) == 7
    assert all(b["ts"] >= a["ts"] + a["dur"] for a, b in zip(runs, runs[1:]))   # the device runs one at a time
    restarts = [e for e in spans if names[e["tid"]] == HOST and e["name"] == "restart Walk"]
    assert len(restarts) == 7 and all(e["dur"] == pytest.approx(42.7) for e in restarts)


def test_a_segmented_design_is_timed_with_a_reconfiguration_before_each_segment(tmp_path):
    from tests.compiler.test_segments import Ladder

    x = np.linspace(-1, 1, 16, dtype=np.float32)
    untimed = Ladder().compile(x=((16,), np.float32), device="npu2_1col")
    compiled = Ladder().compile(x=((16,), np.float32), device="npu2_1col")
    assert len(compiled.segments) == 2
    path = tmp_path / "ladder.json"
    assert np.array_equal(compiled(x, trace=path), untimed(x))
    names, spans = check_trace_format(path)
    device = [e["name"] for e in spans if names[e["tid"]] == DEVICE]
    assert [name.rsplit(" run ", 1)[0] for name in device] == [
        "load Ladder segment 1", "Ladder segment 1", "load Ladder segment 2", "Ladder segment 2"]
    loads = [e for e in spans if e["name"].startswith("load ")]
    assert all(e["dur"] == pytest.approx(100.0) for e in loads)   # 100 us per npu2 reconfiguration
    # the picture has one panel per segment
    from tests.plan.test_picture import parsed

    root = parsed(compiled.svg())
    assert root.get("data-segments") == "2"


def test_iron_trace_writes_the_process_timeline_at_exit(tmp_path):
    import os
    import subprocess
    import sys

    path = tmp_path / "process.json"
    script = ("import numpy as np; from tests.compiler import designs; "
              "c = designs.add_one(64).compile(x=((64,), np.int32), device='npu2'); "
              "[c(np.arange(64, dtype=np.int32)) for _ in range(3)]")
    env = {**os.environ, "IRON_TRACE": str(path), "IRON_BACKEND": "emulator", "IRON_QUIET": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    names, spans = check_trace_format(path)
    assert [e["name"] for e in spans if names[e["tid"]] == DEVICE] == ["AddOne run 1"] * 3
    assert [e["name"] for e in spans if names[e["tid"]] == HOST and e["name"].startswith("call")] == ["call AddOne"] * 3


def test_ddr_moves_at_once_share_its_bandwidth_and_a_move_later_on_the_clock_takes_none_before_it():
    bandwidth = cost.GENERATIONS["npu2"].ddr_bytes_per_ns   # 70 bytes per ns
    ddr = Ddr(bandwidth)
    assert ddr.take(0.0, 14_400, 14.4) == pytest.approx(1000.0)   # alone: its channel's rate
    # simulated ahead of the others: takes the slices from 20 us on, none before
    assert ddr.take(20_000.0, 700_000, 1e9) == pytest.approx(30_000.0)
    # two fast moves at once from 5 us: 70 bytes per ns between them, the first served first in each slice
    first = ddr.take(5_000.0, 140_000, 1e9)
    second = ddr.take(5_000.0, 140_000, 1e9)
    assert (first, second) == (pytest.approx(7_000.0), pytest.approx(9_000.0))
    # run after the one 20 us on, a move at 12 us is not queued behind it
    assert ddr.take(12_000.0, 14_400, 14.4) == pytest.approx(13_000.0)


def test_ddr_slices_count_from_the_launchs_start_so_an_estimate_does_not_depend_on_the_clock():
    ddr = Ddr(cost.GENERATIONS["npu2"].ddr_bytes_per_ns)
    ddr.restart(500.0)   # a launch beginning mid-microsecond: a microsecond's bytes take a microsecond
    assert ddr.take(500.0, 70_000, 1e9) == pytest.approx(1500.0)
    ddr.restart(10_250.0)   # the next launch: none of the last one's slices taken
    assert ddr.take(10_250.0, 70_000, 1e9) == pytest.approx(11_250.0)
    graph = designs.big_matvec(2048, 512)   # 4 MB through shim channels at once, DDR their limit
    x = designs.example(graph)["x"]
    compiled = graph.compile(x=(x.shape, x.dtype), device="npu2")
    timeline = compiled.timed()
    first = compiled.estimate(x)
    timeline.host += 437.0   # the next call submitted at another point of a microsecond
    assert compiled.estimate(x).device_ns == pytest.approx(first.device_ns, abs=1e-6)
