"""Tests of iron.toolchain.build: exact tool command lines, tool discovery, and builds driven
through fake `aiecc` / `aiecc.py` / `clang++` executables that record their argv (including
`--help`) and write non-empty outputs. The cache's own rules are tested in tests/reliability."""

from pathlib import Path

import pytest

from iron.errors import BuildError, ToolchainMissing
from iron.toolchain.build import (
    FLAGS_AIE_GENERATE,
    FLAGS_GET,
    Artifacts,
    Toolchain,
    aiecc_command,
    build,
    find_toolchain,
    peano_command,
)
from iron.toolchain.cache import Cache
from tests.fake_toolchain import (
    FAKE_AIECC,
    HELP_TEXT,
    LOG_ARGV,
    NPU1,
    NPU2,
    FakeDevice,
    install_fakes,
    make_hermetic,
    recorded_argv,
    script,
)
from tests.quotes import quoted

AIECC = "/opt/mlir_aie/bin/aiecc"
CLANG = "/opt/llvm-aie/bin/clang++"


def toolchain(flags: str) -> Toolchain:
    return Toolchain(Path(AIECC), flags, Path(CLANG), ("aiecc 1", "clang 1"))


# ---- command lines -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "device, target", [(NPU1, "aie2-none-unknown-elf"), (NPU2, "aie2p-none-unknown-elf")]
)
def test_peano_command(device, target):
    command = peano_command(
        toolchain(FLAGS_GET), device, Path("/w/add.cc"), Path("/w/add.o")
    )
    assert command == [
        CLANG, "-O2", "-std=c++20", f"--target={target}", "-I/w", "-c", "/w/add.cc", "-o",
        "/w/add.o",
    ]


@pytest.mark.parametrize("device", [NPU1, NPU2])
def test_aiecc_command_new_flags_xclbin(device):
    command = aiecc_command(
        toolchain(FLAGS_GET), device, "xclbin", Path("/w/design.mlir"), Path("/w")
    )
    assert command == [
        AIECC, "--peano=/opt/llvm-aie", "--tmpdir=/w/design.prj",
        "--get-xclbin", "--xclbin-name=final.xclbin",
        "--get-npu-insts", "--npu-insts-name=insts.bin",
        "/w/design.mlir",
    ]


def test_aiecc_command_new_flags_elf():
    command = aiecc_command(toolchain(FLAGS_GET), NPU2, "elf", Path("/w/design.mlir"), Path("/w"))
    assert command == [
        AIECC, "--peano=/opt/llvm-aie", "--tmpdir=/w/design.prj",
        "--get-full-elf", "--full-elf-name=aie.elf",
        "/w/design.mlir",
    ]


@pytest.mark.parametrize("device", [NPU1, NPU2])
def test_aiecc_command_old_flags_xclbin(device):
    command = aiecc_command(
        toolchain(FLAGS_AIE_GENERATE), device, "xclbin", Path("/w/design.mlir"), Path("/w")
    )
    assert command == [
        AIECC, "--no-compile-host", "--no-xchesscc", "--no-xbridge",
        "--peano=/opt/llvm-aie", "--tmpdir=/w/design.prj",
        "--aie-generate-xclbin", "--xclbin-name=final.xclbin",
        "--aie-generate-npu-insts", "--npu-insts-name=insts.bin",
        "/w/design.mlir",
    ]


def test_aiecc_command_old_flags_elf():
    command = aiecc_command(
        toolchain(FLAGS_AIE_GENERATE), NPU2, "elf", Path("/w/design.mlir"), Path("/w")
    )
    assert command == [
        AIECC, "--no-compile-host", "--no-xchesscc", "--no-xbridge",
        "--peano=/opt/llvm-aie", "--tmpdir=/w/design.prj",
        "--generate-full-elf", "--full-elf-name=aie.elf",
        "/w/design.mlir",
    ]


def test_full_elf_on_npu1_is_refused():
    with pytest.raises(BuildError) as raised:
        aiecc_command(toolchain(FLAGS_GET), NPU1, "elf", Path("/w/design.mlir"), Path("/w"))
    quoted(raised.value, "full ELF", "npu1", "image='xclbin'", "npu2")


def test_unknown_image_is_refused():
    with pytest.raises(BuildError) as raised:
        aiecc_command(toolchain(FLAGS_GET), NPU2, "bin", Path("/w/design.mlir"), Path("/w"))
    quoted(raised.value, "'bin'", "npu2", "image='xclbin'", "image='elf'")


# ---- fake tools --------------------------------------------------------------------------

@pytest.fixture
def hermetic(monkeypatch, tmp_path):
    return make_hermetic(monkeypatch, tmp_path)


MLIR = "module {\n  aie.device(npu2) {\n  }\n}\n"
SOURCES = {
    "scale.cc": '#include "iron_kernel.h"\nextern "C" void scale() {}\n',
    "add.cc": '#include "iron_kernel.h"\nextern "C" void add() {}\n',
    "iron_kernel.h": "#pragma once\n",
}


# ---- discovery ---------------------------------------------------------------------------


def test_toolchain_missing_names_both_tools(hermetic):
    tmp = hermetic
    with pytest.raises(ToolchainMissing) as raised:
        find_toolchain()
    quoted(raised.value, "aiecc (mlir-aie)", f"{tmp}/empty:{tmp}/python/scripts", "Peano clang++ (llvm-aie)",
           f"{tmp}/python/purelib/llvm-aie/bin/clang++", "pip install mlir_aie -f https://github.com/Xilinx/mlir-aie/",
           "pip install llvm-aie -f https://github.com/Xilinx/llvm-aie/", "MLIR_AIE_INSTALL_DIR", "PEANO_INSTALL_DIR",
           "python3-xrt libxrt-npu2 libxrt-utils-npu")


def test_toolchain_missing_peano_under_its_install_dir(hermetic, monkeypatch):
    tmp = hermetic
    install_fakes(monkeypatch, tmp, FLAGS_GET)
    (tmp / "bin" / "clang++").unlink()
    monkeypatch.setenv("PEANO_INSTALL_DIR", str(tmp / "peano"))
    with pytest.raises(ToolchainMissing) as raised:
        find_toolchain()
    text = quoted(raised.value, "Peano clang++ (llvm-aie)", f"{tmp}/peano/bin/clang++", "$PEANO_INSTALL_DIR")
    assert "aiecc (mlir-aie) is not installed" not in text


def test_find_toolchain_reads_new_flag_generation(hermetic, monkeypatch):
    bin_dir = install_fakes(monkeypatch, hermetic, FLAGS_GET)
    found = find_toolchain()
    assert (found.aiecc, found.flags, found.peano_clang, found.peano_dir) == (
        bin_dir / "aiecc", FLAGS_GET, hermetic / "bin" / "clang++", hermetic
    )
    assert found.versions[0].startswith(f"{bin_dir / 'aiecc'} ")
    assert found.versions[1].startswith(f"{bin_dir / 'clang++'} ")


def test_find_toolchain_reads_old_flag_generation_from_aiecc_py(hermetic, monkeypatch):
    bin_dir = install_fakes(monkeypatch, hermetic, FLAGS_AIE_GENERATE, aiecc_name="aiecc.py")
    found = find_toolchain()
    assert (found.aiecc, found.flags) == (bin_dir / "aiecc.py", FLAGS_AIE_GENERATE)


def test_find_toolchain_prefers_mlir_aie_install_dir(hermetic, monkeypatch):
    install_fakes(monkeypatch, hermetic, FLAGS_AIE_GENERATE)
    other = hermetic / "mlir_aie"
    (other / "bin").mkdir(parents=True)
    script(other / "bin" / "aiecc", FAKE_AIECC.format(help=HELP_TEXT[FLAGS_GET], log=LOG_ARGV))
    monkeypatch.setenv("MLIR_AIE_INSTALL_DIR", str(other))
    found = find_toolchain()
    assert (found.aiecc, found.flags) == (other / "bin" / "aiecc", FLAGS_GET)


def test_unknown_aiecc_is_refused(hermetic, monkeypatch):
    bin_dir = install_fakes(monkeypatch, hermetic, FLAGS_GET)
    script(bin_dir / "aiecc", "#!/bin/sh\necho 'usage: aiecc [options]'\n")
    with pytest.raises(ToolchainMissing) as raised:
        find_toolchain()
    quoted(raised.value, f"{bin_dir}/aiecc", "--get-xclbin", "--aie-generate-xclbin", "pip install mlir_aie")


# ---- builds through fake tools -----------------------------------------------------------


def test_build_runs_peano_then_aiecc_and_caches(hermetic, monkeypatch):
    tmp = hermetic
    bin_dir = install_fakes(monkeypatch, tmp, FLAGS_GET)
    heard = []

    def progress(step, total, what):
        heard.append((step, total, what))

    artifacts = build(MLIR, SOURCES, NPU2, "xclbin", cache=Cache(tmp / "cache"), progress=progress)

    entry = artifacts.directory
    assert entry.parent == tmp / "cache"
    assert artifacts == Artifacts(
        entry, "xclbin", entry / "final.xclbin", entry / "insts.bin", None, "MLIR_AIE"
    )
    staged = tmp / "cache" / f"{entry.name}.building"  # built there, then renamed to entry
    assert not staged.exists()
    assert recorded_argv(tmp) == [
        [f"{bin_dir}/aiecc", "--help"],
        [f"{bin_dir}/clang++", "-O2", "-std=c++20", "--target=aie2p-none-unknown-elf",
         f"-I{staged}", "-c", f"{staged}/add.cc", "-o", f"{staged}/add.o"],
        [f"{bin_dir}/clang++", "-O2", "-std=c++20", "--target=aie2p-none-unknown-elf",
         f"-I{staged}", "-c", f"{staged}/scale.cc", "-o", f"{staged}/scale.o"],
        [f"{bin_dir}/aiecc", f"--peano={tmp}", f"--tmpdir={staged}/design.prj",
         "--get-xclbin", "--xclbin-name=final.xclbin", "--get-npu-insts",
         "--npu-insts-name=insts.bin", f"{staged}/design.mlir"],
    ]
    assert Cache(tmp / "cache").manifest(entry.name)["flags"] == FLAGS_GET
    assert heard == [
        (1, 3, "peano add.cc"),
        (2, 3, "peano scale.cc"),
        (3, 3, "aiecc design.mlir -> final.xclbin + insts.bin"),
    ]
    assert (entry / "design.mlir").read_text() == MLIR
    assert {name: (entry / name).read_text() for name in SOURCES} == SOURCES
    assert artifacts.xclbin.is_file() and artifacts.insts.is_file()

    again = build(MLIR, SOURCES, NPU2, "xclbin", cache=Cache(tmp / "cache"), progress=progress)
    assert again == artifacts
    assert len(recorded_argv(tmp)) == 4  # nothing ran, not even aiecc --help
    assert len(heard) == 3


def test_build_full_elf_with_old_flags(hermetic, monkeypatch):
    tmp = hermetic
    bin_dir = install_fakes(monkeypatch, tmp, FLAGS_AIE_GENERATE, aiecc_name="aiecc.py")
    sources = {"add.cc": SOURCES["add.cc"], "iron_kernel.h": SOURCES["iron_kernel.h"]}

    artifacts = build(
        MLIR, sources, NPU2, "elf", cache=Cache(tmp / "cache"), progress=lambda *_: None,
        device_symbol="dev", sequence_symbol="run",
    )

    entry = artifacts.directory
    staged = tmp / "cache" / f"{entry.name}.building"
    assert artifacts == Artifacts(entry, "elf", None, None, entry / "aie.elf", "dev:run")
    assert recorded_argv(tmp)[2] == [
        f"{bin_dir}/aiecc.py", "--no-compile-host", "--no-xchesscc", "--no-xbridge",
        f"--peano={tmp}", f"--tmpdir={staged}/design.prj",
        "--generate-full-elf", "--full-elf-name=aie.elf", f"{staged}/design.mlir",
    ]
    assert Cache(tmp / "cache").manifest(entry.name)["flags"] == FLAGS_AIE_GENERATE
    assert artifacts.elf.is_file()


def test_build_keys_on_device_and_image(hermetic, monkeypatch):
    install_fakes(monkeypatch, hermetic, FLAGS_GET)
    cache = Cache(hermetic / "cache")
    quiet = {"cache": cache, "progress": lambda *_: None}
    on_npu2 = build(MLIR, SOURCES, NPU2, "xclbin", **quiet).directory
    on_npu1 = build(MLIR, SOURCES, NPU1, "xclbin", **quiet).directory
    as_elf = build(MLIR, SOURCES, NPU2, "elf", **quiet).directory
    edited = build(MLIR, {**SOURCES, "add.cc": "// changed\n"}, NPU2, "xclbin", **quiet).directory
    assert len({on_npu2, on_npu1, as_elf, edited}) == 4
    assert len(recorded_argv(hermetic)) == 16  # aiecc --help, 2 x Peano, aiecc: per build


def test_default_progress_prints_one_line_per_step(hermetic, monkeypatch, capsys):
    install_fakes(monkeypatch, hermetic, FLAGS_GET)
    build(MLIR, {"add.cc": SOURCES["add.cc"]}, NPU1, "xclbin", cache=Cache(hermetic / "cache"))
    assert capsys.readouterr().err == (
        "iron build [1/2] peano add.cc\n"
        "iron build [2/2] aiecc design.mlir -> final.xclbin + insts.bin\n"
    )


def test_aiecc_failure_raises_build_error_with_stderr(hermetic, monkeypatch):
    tmp = hermetic
    bin_dir = install_fakes(monkeypatch, tmp, FLAGS_GET)
    monkeypatch.setenv("IRON_FAKE_AIECC_FAILS", "1")
    cache = Cache(tmp / "cache")
    with pytest.raises(BuildError) as raised:
        build(MLIR, {}, NPU2, "elf", cache=cache, progress=lambda *_: None)
    (entry,) = [p for p in (tmp / "cache").iterdir()]
    assert entry.name.endswith(".building")
    assert str(raised.value) == (
        "aiecc failed with exit code 3 on design.mlir -> aie.elf.\n"
        f"command: {bin_dir}/aiecc --peano={tmp} --tmpdir={entry}/design.prj --get-full-elf "
        f"--full-elf-name=aie.elf {entry}/design.mlir\n"
        "stderr (last 20 lines):\n"
        "aiecc: compiling\n"
        "design.mlir:4:5: error: 'aie.objectfifo' op depth 0 is not positive\n"
        f"The design and its objects stay in {entry}: rerun the command there to reproduce, "
        "and report it if the design came from iron unchanged."
    )
    assert cache.entries() == []

    monkeypatch.delenv("IRON_FAKE_AIECC_FAILS")
    rebuilt = build(MLIR, {}, NPU2, "elf", cache=cache, progress=lambda *_: None)
    assert rebuilt.directory == tmp / "cache" / entry.name.removesuffix(".building")
    assert [e.path for e in cache.entries()] == [rebuilt.directory]
    assert sorted(p.name for p in (tmp / "cache").iterdir()) == [rebuilt.directory.name]


def test_peano_failure_stops_before_aiecc(hermetic, monkeypatch):
    tmp = hermetic
    bin_dir = install_fakes(monkeypatch, tmp, FLAGS_GET)
    monkeypatch.setenv("IRON_FAKE_CLANG_FAILS", "1")
    with pytest.raises(BuildError) as raised:
        build(MLIR, {"add.cc": "flot x;\n"}, NPU1, "xclbin", cache=Cache(tmp / "cache"),
              progress=lambda *_: None)
    (entry,) = [p for p in (tmp / "cache").iterdir()]
    assert str(raised.value) == (
        "peano failed with exit code 1 on add.cc.\n"
        f"command: {bin_dir}/clang++ -O2 -std=c++20 --target=aie2-none-unknown-elf -I{entry} "
        f"-c {entry}/add.cc -o {entry}/add.o\n"
        "stderr (last 20 lines):\n"
        "add.cc:2:1: error: unknown type name 'flot'\n"
        f"Fix the kernel source add.cc where the compiler points; the failed build stays in "
        f"{entry}."
    )
    assert [argv[0] for argv in recorded_argv(tmp)] == [f"{bin_dir}/aiecc", f"{bin_dir}/clang++"]


@pytest.mark.parametrize("switch, image, fault", [
    ("IRON_FAKE_AIECC_WRITES_NOTHING", "xclbin", "did not write final.xclbin, insts.bin"),
    ("IRON_FAKE_AIECC_WRITES_EMPTY", "elf", "wrote aie.elf empty"),
])
def test_missing_or_empty_output_raises_build_error_and_is_not_cached(
    hermetic, monkeypatch, switch, image, fault
):
    tmp = hermetic
    install_fakes(monkeypatch, tmp, FLAGS_GET)
    monkeypatch.setenv(switch, "1")
    cache = Cache(tmp / "cache")
    with pytest.raises(BuildError) as raised:
        build(MLIR, {}, NPU2, image, cache=cache, progress=lambda *_: None)
    (staged,) = [p for p in (tmp / "cache").iterdir()]
    outputs = {"xclbin": "final.xclbin + insts.bin", "elf": "aie.elf"}[image]
    assert str(raised.value).startswith(
        f"aiecc exited 0 on design.mlir -> {outputs} but {fault} in {staged}.\ncommand: "
    )
    assert cache.entries() == []


# ---- the real toolchain ------------------------------------------------------------------

ADD_ONE_MLIR = """module {
  aie.device(npu2_1col) {
    %shim = aie.tile(0, 0)
    %ct   = aie.tile(0, 2)
    aie.objectfifo @in (%shim, {%ct},   2 : i32) : !aie.objectfifo<memref<256xi32>>
    aie.objectfifo @out(%ct,   {%shim}, 2 : i32) : !aie.objectfifo<memref<256xi32>>
    func.func private @add_one(memref<256xi32>, memref<256xi32>, i32) attributes {link_with = "add_one.o"}
    %core = aie.core(%ct) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c4 = arith.constant 4 : index
      %cmax = arith.constant 9223372036854775807 : index
      %n = arith.constant 256 : i32
      scf.for %it = %c0 to %cmax step %c1 {
        scf.for %b = %c0 to %c4 step %c1 {
          %vi = aie.objectfifo.acquire @in(Consume, 1) : !aie.objectfifosubview<memref<256xi32>>
          %bi = aie.objectfifo.subview.access %vi[0] : !aie.objectfifosubview<memref<256xi32>> -> memref<256xi32>
          %vo = aie.objectfifo.acquire @out(Produce, 1) : !aie.objectfifosubview<memref<256xi32>>
          %bo = aie.objectfifo.subview.access %vo[0] : !aie.objectfifosubview<memref<256xi32>> -> memref<256xi32>
          func.call @add_one(%bi, %bo, %n) : (memref<256xi32>, memref<256xi32>, i32) -> ()
          aie.objectfifo.release @in(Consume, 1)
          aie.objectfifo.release @out(Produce, 1)
        }
      }
      aie.end
    }
    aie.runtime_sequence @sequence(%src: memref<1024xi32>, %dst: memref<1024xi32>) {
      aiex.npu.dma_memcpy_nd(%dst[0, 0, 0, 0][1, 1, 1, 1024][0, 0, 0, 1]) {id = 1 : i64, metadata = @out, issue_token = true} : memref<1024xi32>
      aiex.npu.dma_memcpy_nd(%src[0, 0, 0, 0][1, 1, 1, 1024][0, 0, 0, 1]) {id = 0 : i64, metadata = @in} : memref<1024xi32>
      aiex.npu.dma_wait {symbol = @out}
    }
  }
}
"""

ADD_ONE_CC = """#include <stdint.h>
extern "C" void add_one(int32_t *in, int32_t *out, int32_t n) {
  for (int32_t i = 0; i < n; i++) out[i] = in[i] + 1;
}
"""


@pytest.mark.toolchain
@pytest.mark.parametrize("image", ["xclbin", "elf"])
def test_real_build_of_add_one(tmp_path, image):
    try:
        tools = find_toolchain()
    except ToolchainMissing as missing:
        pytest.skip(f"mlir-aie and Peano are not installed: {missing}")
    device = FakeDevice("npu2_1col", "npu2", True, "aie2p-none-unknown-elf")
    artifacts = build(ADD_ONE_MLIR, {"add_one.cc": ADD_ONE_CC}, device, image,
                      toolchain=tools, cache=Cache(tmp_path))
    if image == "xclbin":
        assert artifacts.xclbin.read_bytes()[:7] == b"xclbin2"
        insts = artifacts.insts.read_bytes()
        assert len(insts) > 0 and len(insts) % 4 == 0
    else:
        assert artifacts.elf.read_bytes()[:4] == b"\x7fELF"
    assert (artifacts.directory / "add_one.o").read_bytes()[:4] == b"\x7fELF"
