"""`build`: a design's MLIR text and kernel C++ built with the real mlir-aie tools into the
content-addressed cache: every `*.cc` compiled with Peano into the `.o` the MLIR links with,
then aiecc making an xclbin plus its instruction stream (`image="xclbin"`) or one full ELF
(`image="elf"`). aiecc's two flag generations are told apart from its `--help` when something
is built and recorded in the entry's manifest, so a cached build runs no tool
(docs/platform.md section 8). A missing tool raises `ToolchainMissing` saying how to install it."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from iron.errors import BuildError, ToolchainMissing
from iron.toolchain.cache import Cache, content_key

FLAGS_AIE_GENERATE = "2026-03"
FLAGS_GET = "2026-08"

# Bump when the command lines below change, so entries built by older recipes are not served.
RECIPE = "2"

DESIGN_FILE = "design.mlir"
XCLBIN_FILE = "final.xclbin"
INSTS_FILE = "insts.bin"
ELF_FILE = "aie.elf"
IMAGE_OUTPUTS = {"xclbin": (XCLBIN_FILE, INSTS_FILE), "elf": (ELF_FILE,)}

# The install commands of mlir-aie's README and utils/env_setup.sh.
INSTALL_MLIR_AIE = (
    "pip install mlir_aie -f https://github.com/Xilinx/mlir-aie/releases/expanded_assets/latest-wheels/"
)
INSTALL_PEANO = (
    "pip install llvm-aie -f https://github.com/Xilinx/llvm-aie/releases/expanded_assets/nightly"
)
XRT_PACKAGES = "python3-xrt libxrt-npu2 libxrt-utils-npu"

STDERR_TAIL_LINES = 20


class Device(Protocol):
    """What a build needs of an `aie_utils.Device`."""

    name: str
    family: str
    full_elf: bool
    peano_target: str


Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class Artifacts:
    """What a build made: the xclbin and its instructions, or the full ELF, and the kernel name."""

    directory: Path
    image: str
    xclbin: Path | None
    insts: Path | None
    elf: Path | None
    kernel_name: str


@dataclass(frozen=True)
class Toolchain:
    """The installed mlir-aie and Peano tools a build runs.

    `flags` is the aiecc flag generation, FLAGS_AIE_GENERATE ("2026-03") or FLAGS_GET
    ("2026-08"), or None until `detected()` reads it. `versions` identifies each tool's installed
    copy (resolved path, size, modification time), so reinstalling either one changes every
    cache key (and with aiecc, its flags).
    """

    aiecc: Path
    flags: str | None
    peano_clang: Path
    versions: tuple[str, str]

    def detected(self) -> Toolchain:
        """This toolchain with its flag generation read from `aiecc --help` if not known yet."""
        return self if self.flags else replace(self, flags=aiecc_flag_generation(self.aiecc))

    @property
    def peano_dir(self) -> Path:
        """The Peano install directory (the one holding bin/clang++), as aiecc's `--peano`."""
        return self.peano_clang.parent.parent


@dataclass(frozen=True)
class Step:
    """One tool run of a build: what it is called in progress lines, its command, its outputs."""

    tool: str
    subject: str
    command: list[str]
    outputs: tuple[str, ...]
    fix: str


def find_toolchain() -> Toolchain:
    """`locate_toolchain()` with its aiecc flag generation read (this runs `aiecc --help`)."""
    return locate_toolchain().detected()


def locate_toolchain() -> Toolchain:
    """Find aiecc and Peano's clang++ without running either (flags None), or raise
    ToolchainMissing naming each missing one.

    aiecc (preferred over aiecc.py) is looked up in `$MLIR_AIE_INSTALL_DIR/bin`, on PATH, then
    in this Python's scripts directory (where `pip install mlir_aie` puts it). Peano's clang++
    is `$PEANO_INSTALL_DIR/bin/clang++`, else `<site-packages>/llvm-aie/bin/clang++` (where the
    llvm-aie wheel installs it, as mlir-aie's env_setup.sh derives from `pip show llvm-aie`).
    A clang++ merely on PATH is not taken: a host clang++ cannot target AIE.
    """
    aiecc, aiecc_places = _find_aiecc()
    clang, clang_places = _find_peano_clang()
    missing = []
    if aiecc is None:
        missing.append(f"aiecc (mlir-aie) is not installed: no aiecc or aiecc.py in {aiecc_places}")
    if clang is None:
        missing.append(f"Peano clang++ (llvm-aie) is not installed: no {clang_places}")
    if missing:
        raise ToolchainMissing(
            "iron cannot build a design: " + "; ".join(missing) + ". Install mlir-aie with "
            f"`{INSTALL_MLIR_AIE}` and Peano with `{INSTALL_PEANO}` (or point MLIR_AIE_INSTALL_DIR"
            " / PEANO_INSTALL_DIR at existing installs); running on an NPU also needs XRT and "
            f"pyxrt from the distribution packages {XRT_PACKAGES}."
        )
    return Toolchain(
        aiecc=aiecc,
        flags=None,
        peano_clang=clang,
        versions=(_tool_identity(aiecc), _tool_identity(clang)),
    )


def _find_aiecc() -> tuple[Path | None, str]:
    install = os.environ.get("MLIR_AIE_INSTALL_DIR")
    places = [str(Path(install) / "bin")] if install else []
    places += [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    places.append(sysconfig.get_path("scripts"))
    search = os.pathsep.join(places)
    found = shutil.which("aiecc", path=search) or shutil.which("aiecc.py", path=search)
    return (Path(found) if found else None), search


def _find_peano_clang() -> tuple[Path | None, str]:
    install = os.environ.get("PEANO_INSTALL_DIR")
    root = Path(install) if install else Path(sysconfig.get_path("purelib")) / "llvm-aie"
    clang = root / "bin" / "clang++"
    found = clang.is_file() and os.access(clang, os.X_OK)
    where = "under $PEANO_INSTALL_DIR" if install else "where the llvm-aie wheel installs it"
    return (clang if found else None), f"{clang} ({where})"


def aiecc_flag_generation(aiecc: Path) -> str:
    """FLAGS_GET or FLAGS_AIE_GENERATE, read from the options `aiecc --help` lists."""
    shown = subprocess.run(
        [str(aiecc), "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    help_text = shown.stdout + shown.stderr
    if "--get-xclbin" in help_text:
        return FLAGS_GET
    if "--aie-generate-xclbin" in help_text:
        return FLAGS_AIE_GENERATE
    raise ToolchainMissing(
        f"{aiecc} lists neither --get-xclbin (aiecc since 2026-07-21) nor --aie-generate-xclbin "
        "(aiecc.py before) in its --help, so it is not an mlir-aie compiler driver iron knows. "
        f"Install mlir-aie with `{INSTALL_MLIR_AIE}`."
    )


def _tool_identity(tool: Path) -> str:
    real = tool.resolve()
    stat = real.stat()
    return f"{real} {stat.st_size} {stat.st_mtime_ns}"


def peano_command(
    toolchain: Toolchain, device: Device, source_path: Path, object_path: Path
) -> list[str]:
    """The Peano command compiling one kernel source to the object the MLIR links with."""
    return [
        str(toolchain.peano_clang),
        "-O2",
        "-std=c++20",
        f"--target={device.peano_target}",
        f"-I{source_path.parent}",
        "-c",
        str(source_path),
        "-o",
        str(object_path),
    ]


def aiecc_command(
    toolchain: Toolchain, device: Device, image: str, mlir_path: Path, workdir: Path
) -> list[str]:
    """The aiecc command building `image` from `mlir_path`, run with `workdir` as its cwd.

    Outputs are named relative to the cwd, where both generations write them; intermediates go
    to `<workdir>/design.prj`.
    """
    _check_image(device, image)
    toolchain = toolchain.detected()
    if toolchain.flags == FLAGS_GET:
        leading = [str(toolchain.aiecc)]
        wanted = {
            "xclbin": ["--get-xclbin", f"--xclbin-name={XCLBIN_FILE}",
                       "--get-npu-insts", f"--npu-insts-name={INSTS_FILE}"],
            "elf": ["--get-full-elf", f"--full-elf-name={ELF_FILE}"],
        }
    else:
        leading = [str(toolchain.aiecc), "--no-compile-host", "--no-xchesscc", "--no-xbridge"]
        wanted = {
            "xclbin": ["--aie-generate-xclbin", f"--xclbin-name={XCLBIN_FILE}",
                       "--aie-generate-npu-insts", f"--npu-insts-name={INSTS_FILE}"],
            "elf": ["--generate-full-elf", f"--full-elf-name={ELF_FILE}"],
        }
    return [
        *leading,
        f"--peano={toolchain.peano_dir}",
        f"--tmpdir={workdir / 'design.prj'}",
        *wanted[image],
        str(mlir_path),
    ]


def _check_image(device: Device, image: str) -> None:
    if image not in IMAGE_OUTPUTS:
        raise BuildError(
            f"cannot build image {image!r} for {device.name}: the images are 'xclbin' and "
            "'elf'. Ask for image='xclbin' (any device) or image='elf' (full-ELF devices)."
        )
    if image == "elf" and not device.full_elf:
        raise BuildError(
            f"cannot build a full ELF for {device.name}: its firmware cannot load one (family "
            f"{device.family}). Build image='xclbin' for {device.name}, or target an npu2 device."
        )


def build_steps(
    toolchain: Toolchain, device: Device, image: str, sources: Mapping[str, str], workdir: Path
) -> list[Step]:
    """Every tool run of a build in `workdir`: Peano per `*.cc` (sorted by name), then aiecc."""
    steps = []
    for name in sorted(n for n in sources if n.endswith(".cc")):
        obj = Path(name).with_suffix(".o").name
        steps.append(Step(
            tool="peano",
            subject=name,
            command=peano_command(toolchain, device, workdir / name, workdir / obj),
            outputs=(obj,),
            fix=f"Fix the kernel source {name} where the compiler points; the failed build "
                f"stays in {workdir}.",
        ))
    command = aiecc_command(toolchain, device, image, workdir / DESIGN_FILE, workdir)
    outputs = IMAGE_OUTPUTS[image]
    steps.append(Step(
        tool="aiecc",
        subject=f"{DESIGN_FILE} -> {' + '.join(outputs)}",
        command=command,
        outputs=outputs,
        fix=f"The design and its objects stay in {workdir}: rerun the command there to "
            "reproduce, and report it if the design came from iron unchanged.",
    ))
    return steps


def print_progress(step: int, total: int, what: str) -> None:
    """The default progress report: one `iron build [step/total] what` line on stderr."""
    print(f"iron build [{step}/{total}] {what}", file=sys.stderr, flush=True)


def build(*args, **kwargs) -> Artifacts:
    """`serving`'s Artifacts, for a caller that reads them later (its entry may be evicted by
    then: a session loading a design goes through `serving`, CompiledGraph.loading)."""
    with serving(*args, **kwargs) as artifacts:
        return artifacts


@contextmanager
def serving(
    mlir: str,
    sources: Mapping[str, str],
    device: Device,
    image: str,
    *,
    toolchain: Toolchain | None = None,
    cache: Cache | None = None,
    progress: Progress | None = None,
    device_symbol: str = "main",
    sequence_symbol: str = "sequence",
) -> Iterator[Artifacts]:
    """Build `mlir` with its kernel `sources` for `device` into the cache; serve it if built,
    its cache entry held until the block ends, so no process evicts it while it is loaded.

    `image` is "xclbin" (xclbin + insts.bin) or "elf" (full ELF). `progress(step, total, what)`
    hears of each tool run (default: `print_progress`); nothing runs for a cached design.
    The build happens in the cache's staging directory for the key (`Cache.staging`), where a
    failed build stays. Raises ToolchainMissing when the tools are absent, BuildError when one
    fails, CacheError when the cache directory is unusable.
    """
    _check_image(device, image)
    tools = toolchain or locate_toolchain()
    cache = cache or Cache()
    report = progress or print_progress
    key = content_key(
        RECIPE, mlir, device.name, image, *tools.versions,
        *(part for name in sorted(sources) for part in (name, sources[name])),
    )

    def run_build(workdir: Path) -> dict[str, object]:
        detected = tools.detected()
        steps = build_steps(detected, device, image, sources, workdir)
        (workdir / DESIGN_FILE).write_text(mlir)
        for name, text in sources.items():
            (workdir / name).write_text(text)
        for number, step in enumerate(steps, start=1):
            report(number, len(steps), f"{step.tool} {step.subject}")
            _run(step, workdir)
        return {"device": device.name, "flags": detected.flags}

    with cache.serving(key, run_build, kind=image) as directory:
        yield _artifacts(directory, image, device_symbol, sequence_symbol)


def _run(step: Step, workdir: Path) -> None:
    done = subprocess.run(step.command, cwd=workdir, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).splitlines()[-STDERR_TAIL_LINES:])
        raise BuildError(
            f"{step.tool} failed with exit code {done.returncode} on {step.subject}.\n"
            f"command: {shlex.join(step.command)}\n"
            f"stderr (last {STDERR_TAIL_LINES} lines):\n{tail}\n{step.fix}"
        )
    # An empty output is as useless as a missing one, and must never be sealed into the cache.
    missing = [name for name in step.outputs if not (workdir / name).is_file()]
    empty = [name for name in step.outputs if name not in missing
             and (workdir / name).stat().st_size == 0]
    faults = ([f"did not write {', '.join(missing)}"] if missing else []) + (
        [f"wrote {', '.join(empty)} empty"] if empty else [])
    if faults:
        raise BuildError(
            f"{step.tool} exited 0 on {step.subject} but {' and '.join(faults)} in "
            f"{workdir}.\ncommand: {shlex.join(step.command)}\n{step.fix}"
        )


def _artifacts(directory: Path, image: str, device_symbol: str, sequence_symbol: str) -> Artifacts:
    if image == "elf":
        return Artifacts(directory, image, None, None, directory / ELF_FILE,
                         f"{device_symbol}:{sequence_symbol}")
    return Artifacts(directory, image, directory / XCLBIN_FILE, directory / INSTS_FILE, None,
                     "MLIR_AIE")
