"""The programming guide's designs, run as a reader runs them: each file in its section's folder,
as its own process, on the emulator. Each must exit 0 and print its key lines: the values it
computed and that they match numpy (section 8: the generated tokens, token for token).

All design processes start together, once per test session, so the suite waits for the slowest
file rather than for their sum.
"""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import aie_utils

GUIDE = Path(__file__).resolve().parents[2] / "programming_guide"
TIMEOUT_SECONDS = 240   # section 10 loads a real model (GGUF parse and dequantization) before it compiles

WALK_TRAIL = "[10, 6, 7, 5, 4, 0, 2, 3, 10]"
TRAIL = "[4, 1, 10, 15, 11, 2, 6]"
SECTION7_TRAIL = "[4, 5, 0, 8, 2, 4, 5]"
TOKENS = "[36, 55, 18, 1, 36, 31, 35, 47, 44, 48, 7, 28, 9, 18, 44, 48, 7, 28, 57, 12, 12, 12, 58, 24]"

ESTIMATE = re.compile(r"estimate: estimated \d+\.\d us per call with vectorised kernels \(the roofline\), \d+\.\d us "
                      r"with iron's kernels; on the device \d+\.\d us \(busiest tile tile_\d_\d, busy \d+% of the run\); "
                      r"roofline bound \d+\.\d us \(\d+\.\d+ MB to and from DDR: \d+\.\d us, MACs at the array's peak: "
                      r"\d+\.\d us\): the design reaches \d+% of it")

# Lines each design must print, exactly (a str) or as a whole-line pattern (an re.Pattern).
EXPECTED = {
    "section-1/add_one.py": [
        "reference: out[:4] = [1, 2, 3, 4], out[-1] = 1024 -> matches numpy (exact)",
        "compiled (npu2): out[:4] = [1, 2, 3, 4], out[-1] = 1024 -> matches numpy (exact)",
        "  aie.device(npu2) {",
    ],
    "section-2/compose.py": [
        "  g0 on tile_0_2: RMSNorm#0",
        "  g1 on tile_0_3: MatVec#1 -> SiLU#2 -> Add#3",
        "reference: out[:3] = [0.1329 1.4469 0.0653] -> matches numpy (rtol 1e-05, atol 1e-05)",
        "compiled (npu2): out[:3] = [0.1329 1.4469 0.0653] -> matches numpy (rtol 1e-05, atol 1e-05)",
    ],
    "section-2/custom_kernel.py": [
        "reference: out[:4] = [0.3918 0.     1.9037 1.3728] -> matches numpy (rtol 1e-6)",
        "      my_axpy_f32(reinterpret_cast<const float*>(p0), reinterpret_cast<const float*>(p0 + 256), "
        "reinterpret_cast<float*>(p2), 64, 0.5f);",
        "compiled (npu2, numpy kernels): out[:4] = [0.3918 0.     1.9037 1.3728] -> matches numpy (rtol 1e-6)",
        "compiled (npu2, the C++ built for the host): out[:4] = [0.3918 0.     1.9037 1.3728] -> matches numpy (rtol 1e-6)",
    ],
    "section-3/per_call.py": [
        "reference: 4 calls and sums: matches numpy (exact)",
        "  compiled (npu2): pos=7 -> [224, 226, 228, 230]...",
        "compiled (npu2): 4 calls and sums: matches numpy (exact)",
        "pos=8 is refused: table[pos] with pos = 8 is out of range: pos must be in 0..7; nothing was written. "
        "Keep pos in range, or make 'table' larger.",
        "sums after the refused call: unchanged",
    ],
    "section-3/trace_time_error.py": [
        "ClampedWrong: TracedValueError: per-call value 'pos' used as a Python bool (pos > 3): its value is known "
        "only on the device, when the call runs. Compute with it on the device instead: iron.min / iron.max for "
        "bounds, or a kernel for data-dependent choices.",
        "Clamped(pos=6) -> [15, 16, 17, 18, 19]",
        "Clamped (npu2): matches numpy (exact)",
    ],
    "section-4/views.py": [
        "reference: vcache rows 2..3 = [[1, 6, 12, -23], [0, 0, -32, 20]] -> matches numpy (exact)",
        "compiled (npu2): vcache rows 2..3 = [[1, 6, 12, -23], [0, 0, -32, 20]] -> matches numpy (exact)",
        "pos=4: kcache[pos] with pos = 4 is out of range: pos must be in 0..3; nothing was written. "
        "Keep pos in range, or make 'kcache' larger.",
    ],
    "section-4/weights_params_state.py": [
        "reference: acc after 5 calls = [[-10, 178, 92, 46], [51, -12, 151, 143], [127, 72, 110, 106]] -> "
        "matches numpy (exact)",
        "compiled (npu2): acc after 5 calls = [[-10, 178, 92, 46], [51, -12, 151, 143], [127, 72, 110, 106]] -> "
        "matches numpy (exact)",
        "ParamIndexed: TracedValueError: param 'proj' is indexed by per-call value 'tok': a param is used whole. "
        "Declare it with iron.weight(...) to read it through a per-call index.",
    ],
    "section-5/carried_loop.py": [
        f"host-driven (npu2, 9 calls): trail {WALK_TRAIL} -> matches the numpy walk (exact)",
        re.compile(r"device loop \(depth 2\): first \+ 8 body steps, last carry \{'node': 10, 'steps': 9\}, "
                   r"\d+ us per step on this backend"),
        f"device loop (npu2, 8 + 1 transitions): trail {WALK_TRAIL} -> matches the numpy walk (exact)",
    ],
    "section-5/feeds.py": [
        "first's words: node (carried), steps (carried), skip (scratchpad), steps (dma), steps (dma), steps + 1 (next)",
        "body's words: node (carried), steps (carried), node (dma), steps (dma), steps (dma), steps + 1 (next)",
        f"host-driven (npu2): trail {TRAIL} -> matches numpy (exact)",
        "device loop (depth 2): yielded [0, 1, 2, 3, 4, 5], last carry {'node': 6, 'steps': 7}",
        f"device loop (npu2): trail {TRAIL} -> matches numpy (exact)",
    ],
    "section-5/resume.py": [
        "start: yielded [], 1 transitions, carry {'node': 10, 'steps': 1} -> matches the numpy walk (exact)",
        "steps(3): yielded [0, 1, 2], 4 transitions, carry {'node': 5, 'steps': 4} -> matches the numpy walk (exact)",
        "steps(4): yielded [3, 4, 5, 6], 8 transitions, carry {'node': 3, 'steps': 8} -> matches the numpy walk "
        "(exact)",
        "steps(10), break at 8: yielded [7, 8], 11 transitions, carry {'node': 7, 'steps': 11} -> matches the "
        "numpy walk (exact)",
        "steps(2): yielded [10, 11], 13 transitions, carry {'node': 4, 'steps': 13} -> matches the numpy walk "
        "(exact)",
    ],
    "section-6/does_not_fit.py": [
        "RunningSum: stream_elementwise: g0: Add, Copy over 8192 elements streamed in blocks of 512 over 16 tiles "
        "(2 rows x 8 columns of cores), 1 blocks per core; into history (stream_into_state: each block back where "
        "it was read); Add(history, x) joined for the host too (stream_every_result)",
        "RunningSum (npu2), 3 calls: history[:3] = [ 1.6432 -0.8204  0.3386] -> matches numpy (rtol 1e-06, "
        "atol 1e-06)",
        "Joined: DoesNotFit: Joined does not fit tile_0_2, where Concat#0 runs: its buffers take 132128 bytes but "
        "a compute tile has 65536: g0_host@tile_0_2 65552 bytes (out0), g0_in@tile_0_2 65552 bytes (x, y), "
        "stack@tile_0_2 1024 bytes (stream_elementwise: g0: not streamed: Concat#0 joins along axis 1, each row of "
        "its result a row of every input: only a lone Concat of host tensors end to end streams (stream_joined)). "
        "Split Concat#0 into at least 3 calls over parts of the tensors, each call's buffers at most 64512 bytes.",
        "JoinedByRows: 4 compute tiles, one per Copy",
        "JoinedByRows (npu2), 3 calls: joined[1, 4096:4098] = [-1.2135 -1.8645] -> matches numpy (rtol 1e-06, "
        "atol 1e-06)",
    ],
    "section-6/placement.py": [
        re.compile(r"  split_matrix_over_tiles: g0: .*\(256, 512\) float32 \(524288 bytes\) split by rows over 4 tiles"),
        re.compile(r"  split_matrix_over_tiles: g1: .*\(512, 256\) float32 \(524288 bytes\) split by rows over 4 tiles"),
        "8 compute tiles of 32 on npu2, in columns [0, 1]: tile_0_2 (g0), tile_0_3 (g0), tile_0_4 (g0), "
        "tile_0_5 (g0), tile_1_5 (g1), tile_1_4 (g1), tile_1_3 (g1), tile_1_2 (g1)",
        "compiled (npu2): y[:3] = [0.0214 0.899  0.3666] -> matches numpy (rtol 0.0001, atol 0.0001)",
    ],
    "section-7/elf_vs_xclbin.py": [
        "npu1: full_elf=False, image='xclbin', emit=none, host buffers ['consts', 'states', 'inputs', 'outputs', "
        "'words']",
        f"  host-driven (npu1): trail {SECTION7_TRAIL} -> matches the numpy walk (exact)",
        "  CarriedLoop on npu1: LoopError: Walk is compiled for npu1, which has no full ELF: a carried graph has no "
        "device loop there. Only the host-driven path applies: call it and feed the returned Carry back.",
        re.compile(r"npu2: full_elf=True, image='elf', emit=on tile_\d_\d, host buffers \['consts', 'states', "
                   r"'inputs', 'outputs', 'words', 'feedback'\]"),
        f"  host-driven (npu2): trail {SECTION7_TRAIL} -> matches the numpy walk (exact)",
        f"  device loop (npu2): trail {SECTION7_TRAIL} -> matches the numpy walk (exact)",
        re.compile(r"build for npu2: ToolchainMissing: iron cannot build a design: .*|built npu2 \(elf\) into .*"),
    ],
    "section-8/decoder.py": [
        f"prompt [5, 17, 42, 8]; numpy generates {TOKENS} (smallest top-2 logit gap 0.00552)",
        f"reference (host-driven): {TOKENS} -> matches numpy (token for token)",
        "compiled for npu2: body on 16 of 32 compute tiles, first on 16",
        f"host-driven (npu2): {TOKENS} -> matches numpy (token for token)",
        f"device loop (npu2, depth 2): {TOKENS} -> matches numpy (token for token)",
        re.compile(r"tokens per second on the emulator: host-driven \d+, device loop \d+ \(\d+\.\d\dx\)"),
        "estimated NPU tokens per second (cost model, not measured): host-driven 15224, device loop depth 1 22531, "
        "depth 2 23379, depth 4 23379 (1.54x) with vectorised kernels (the roofline); host-driven 7411, device loop "
        "depth 2 8926 with iron's kernels; a step takes 1.7 us on the device, bottleneck tile_2_3 busy 9% of it, 43% "
        "of its roofline bound (0.72 us)",
    ],
    "section-9/bigger.py": [
        "tile_matmul_over_array: g0: MatMul (256, 256) x (256, 256) float32 -> float32 over 32 tiles (4 rows x 8 "
        "columns of cores): blocks m=64 k=32 n=32 (each divides its side: no padding), 1 output blocks per core, "
        "8 k-blocks each (8 kernel calls per core), summed in float32",
        "Product 256^3 float32 (npu2): matches numpy",
        "Tower (40 layers) on npu2: 2 segments on 32 + 8 compute tiles",
        "  segment 0  g0..g31   32 compute tiles  tile_0_2..tile_7_5  then 256 bytes cross",
        "  segment 1  g32..g39  8 compute tiles   tile_0_2..tile_1_5  last",
        "  before g32: 256 bytes (Add#95)",
        "Tower (npu2): matches numpy (rtol 0.0001, atol 0.0001)",
        "Swollen: DoesNotFit: Swollen does not fit npu2 even cut into segments: Softmax#1 (group g1) alone is too "
        "large for one configuration. Swollen: Softmax#1 reduces a row of 16384 float32 elements, whose inputs and "
        "result take 131072 bytes, but a compute tile has 64512 (65536 less the core's 1024-byte stack), and a row "
        "reduction reads its whole row at once, so it is not cut into blocks: make the row at most 8064 elements, "
        "or reduce it in pieces.",
    ],
    "section-10/smollm2.py": [
        "SmolLM2-135M, its first 2 layers; prompt 'The capital of France is' = [504, 3575, 282, 4649, 314]",
        "numpy forward (the oracle) generates [30, 216, 216]: '.  '",
        "reference(), prompt fed by the host: [30, 216, 216] -> matches numpy",
        "reference(), prompt loaded by the first version: [30, 216, 216] -> matches numpy",
        re.compile(r"compiled for npu2 in \d+\.\d s: the body in \d+ segments run in order within each call, "
                   r"the first version \(loads the prompt\) in 1"),
        re.compile(r"float32 weights: a token reads \d+\.\d MB of weights and params from DDR"),
        re.compile(r"host-driven \(npu2, emulator\), prompt fed by the host: \[30, 216, 216\] -> matches reference\(\) "
                   r"\(7 calls, one per position, in \d+\.\d s: \d+\.\d\d tokens/s\)"),
        re.compile(r"device loop \(npu2, emulator, depth 2\), prompt loaded by the first version: \[30, 216, 216\] -> "
                   r"matches reference\(\) \(7 calls, one per position, in \d+\.\d s: \d+\.\d\d tokens/s\)"),
        re.compile(r"estimated on the NPU \(cost model\): host-driven \d+\.\d tokens/s, device loop \d+\.\d tokens/s "
                   r"with vectorised kernels \(the roofline\); host-driven \d+\.\d\d tokens/s, device loop \d+\.\d\d "
                   r"tokens/s with iron's kernels; roofline bound \d+\.\d us \(\d+\.\d+ MB to and from DDR: \d+\.\d us, "
                   r"MACs at the array's peak: \d+\.\d us\) per token: the design reaches \d+% of it"),
        "text: The capital of France is.  ",
    ],
    "section-11/heads.py": [
        re.compile(r"reference vs numpy \(float64\): 32 heads, largest difference 0\.0\d+ -> matches \(rtol 0\.02, atol 0\.02\)"),
        re.compile(r"compiled \(npu2\) vs reference: 32 heads, largest difference 0\.0\d+ -> matches \(rtol 0\.01, atol 0\.01\)"),
        re.compile(r"32 heads over 64 positions: \d+ configurations? per call"),
        ESTIMATE,
    ],
    "section-11/layers.py": [
        "reference: out[:3] = [13.5249  8.9295  4.0959] -> matches numpy (rtol 0.0001, atol 0.0001)",
        "compiled (npu2): out[:3] = [13.5249  8.9295  4.0959] -> matches numpy (rtol 0.0001, atol 0.0001)",
        re.compile(r"48 layers of 128: \d+ configurations? per call"),
        ESTIMATE,
    ],
    "section-12/edge_detect.py": [
        "reference: 318 of 768 pixels white, out[0, 0] = [95, 130, 194, 255] -> matches numpy (exact)",
        "groups: g0: Cast#0 -> Conv2D#1 -> Requantize#2 -> Conv2D#3 -> Requantize#4 -> Concat#5, "
        "g1: Conv2D#6 -> Requantize#7",
        "compiled (npu2, numpy kernels): 318 of 768 pixels white, out[0, 0] = [95, 130, 194, 255] -> matches numpy (exact)",
        "compiled (npu2, the C++ built for the host): 318 of 768 pixels white, out[0, 0] = [95, 130, 194, 255] -> "
        "matches numpy (exact)",
    ],
}


def load(relative: str):
    """A guide file imported as a module (guide folders are not packages)."""
    spec = importlib.util.spec_from_file_location(Path(relative).stem, GUIDE / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def runs():
    """Every design started at once on the emulator; name -> (exit code, stdout, stderr)."""
    env = dict(os.environ, IRON_BACKEND="emulator", IRON_QUIET="1")
    started = {
        name: subprocess.Popen([sys.executable, Path(name).name], cwd=GUIDE / Path(name).parent, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name in EXPECTED
    }
    done = {}
    for name, process in started.items():
        try:
            out, err = process.communicate(timeout=TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
            err += f"\n(killed after {TIMEOUT_SECONDS} s)"
        done[name] = (process.returncode, out, err)
    return done


def test_run_all_finds_every_design_of_the_guide_in_section_order():
    names = [str(p.relative_to(GUIDE)) for p in load("run_all.py").design_files()]
    assert names == list(EXPECTED)


def test_every_section_has_a_readme_and_a_makefile_running_its_designs():
    shared = (GUIDE / "section.mk").read_text()
    assert "PYTHON ?= $(if $(wildcard ../../.venv/bin/python),../../.venv/bin/python,python3)" in shared
    assert "DEVICE ?= npu2" in shared
    assert "--device $(DEVICE)" in shared and "override DEVICE := npu2" in shared
    for number in range(1, 13):
        section = GUIDE / f"section-{number}"
        makefile = (section / "Makefile").read_text()
        designs = sorted(p.name for p in section.glob("*.py"))
        assert f"DESIGNS := {' '.join(designs)}" in makefile
        assert "include ../section.mk" in makefile
        readme = (section / "README.md").read_text()
        assert readme.startswith(f"# Section {number} - ")
        assert "## Exercises" in readme
        for design in designs:
            assert design in readme


@pytest.mark.parametrize("name", list(EXPECTED))
def test_design_runs_on_the_emulator_and_matches_numpy(runs, name):
    code, out, err = runs[name]
    assert code == 0, f"{name} exited {code}\n{out}\n{err}"
    lines = out.splitlines()
    for expected in EXPECTED[name]:
        if isinstance(expected, re.Pattern):
            assert any(expected.fullmatch(line) for line in lines), f"{name}: no line matches {expected.pattern}\n{out}"
        else:
            assert expected in lines, f"{name}: missing line {expected!r}\n{out}"


def test_the_decoder_is_importable_and_main_takes_argv(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    decoder = load("section-8/decoder.py")
    previous = aie_utils.get_current_device()
    drawn = tmp_path / "body.svg"
    try:
        assert decoder.main(["--tokens", "3", "--prompt", "5,17,42,8", "--svg", str(drawn)]) == 0
    finally:
        aie_utils.set_current_device(previous)   # main() sets the device from --device
    lines = capsys.readouterr().out.splitlines()
    assert "device loop (npu2, depth 2): [36, 55, 18] -> matches numpy (token for token)" in lines
    assert f"the body's placement, drawn: {drawn}" in lines
    # the picture the guide shows is the one the script draws now
    assert drawn.read_text() == (GUIDE / "section-8" / "decoder-npu2.svg").read_text()
    model = decoder.Decoder()
    assert decoder.numpy_generate(model, (5, 17, 42, 8), 3)[0] == [36, 55, 18]


@pytest.mark.parametrize("script, picture", [("section-1/add_one.py", "add_one-npu2.svg"),
                                             ("section-6/placement.py", "placement-npu2.svg")])
def test_a_guide_script_draws_its_picture_only_when_asked(monkeypatch, capsys, tmp_path, script, picture):
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    design, folder = load(script), (GUIDE / script).parent
    beside = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    drawn = tmp_path / picture
    previous = aie_utils.get_current_device()
    try:
        assert design.main([]) == 0
        assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == beside   # no --svg: no file
        assert design.main(["--svg", str(drawn)]) == 0
    finally:
        aie_utils.set_current_device(previous)
    assert f"the placement, drawn: {drawn}" in capsys.readouterr().out.splitlines()
    assert drawn.read_text() == (folder / picture).read_text()   # the picture the guide shows is the one drawn now


@pytest.mark.parametrize("device, tiles, loop", [
    # npu2: two of its layers loop on one layer's tiles (repeat_over_time), their inputs sharing shim channels
    # after the same Waits: one configuration; npu1: the loop in 2 segments
    ("npu2", "body on 28 of 32 compute tiles, first on 28", True),
    ("npu1", "body in 2 segments on 12 + 15 of 16 compute tiles, first in 2 segments on 12 + 15", False),
])
def test_the_decoder_grows_past_the_array_as_segments(monkeypatch, capsys, device, tiles, loop):
    # 3 layers need 38 compute tiles at once; as segments they run host-driven and as a device loop
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    decoder = load("section-8/decoder.py")
    previous = aie_utils.get_current_device()
    beside = {p.name: p.stat().st_mtime_ns for p in (GUIDE / "section-8").iterdir()}
    try:
        assert decoder.main(["--device", device, "--layers", "3", "--tokens", "4"]) == 0
    finally:
        aie_utils.set_current_device(previous)
    assert {p.name: p.stat().st_mtime_ns for p in (GUIDE / "section-8").iterdir()} == beside   # no --svg: no file
    lines = capsys.readouterr().out.splitlines()
    expected = decoder.numpy_generate(decoder.Decoder(3), decoder.PROMPT, 4)[0]
    assert f"compiled for {device}: {tiles}" in lines
    assert f"host-driven ({device}): {expected} -> matches numpy (token for token)" in lines
    assert (f"device loop ({device}, depth 2): {expected} -> matches numpy (token for token)" in lines) == loop
