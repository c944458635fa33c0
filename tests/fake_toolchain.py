"""Fake mlir-aie and Peano tools for build tests: `aiecc` / `aiecc.py` and `clang++` shell
scripts that log their argv (`--help` included) to $IRON_FAKE_LOG and write non-empty outputs, and
a hermetic environment where no real tool can be found, and stand-in devices. Env switches: IRON_FAKE_AIECC_FAILS,
IRON_FAKE_AIECC_WRITES_NOTHING, IRON_FAKE_AIECC_WRITES_EMPTY, IRON_FAKE_CLANG_FAILS."""
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from iron.toolchain.build import FLAGS_AIE_GENERATE, FLAGS_GET


@dataclass(frozen=True)
class FakeDevice:
    """Stand-in for aie_utils.Device with what a build reads."""

    name: str
    family: str
    full_elf: bool
    peano_target: str


NPU1 = FakeDevice("npu1", "npu1", False, "aie2-none-unknown-elf")
NPU2 = FakeDevice("npu2", "npu2", True, "aie2p-none-unknown-elf")

HELP_TEXT = {
    FLAGS_GET: "  --get=<name> named artifacts also have shorthands (e.g. --get-xclbin)",
    FLAGS_AIE_GENERATE: "  --aie-generate-xclbin  Generate xclbin",
}

LOG_ARGV = """{ printf '%s' "$0"; for a in "$@"; do printf '\\t%s' "$a"; done; printf '\\n'; } \
>> "$IRON_FAKE_LOG"
"""

FAKE_AIECC = """#!/bin/sh
{log}if [ "$1" = "--help" ]; then echo "{help}"; exit 0; fi
if [ -n "$IRON_FAKE_AIECC_FAILS" ]; then
  echo "aiecc: compiling" >&2
  echo "design.mlir:4:5: error: 'aie.objectfifo' op depth 0 is not positive" >&2
  exit 3
fi
if [ -n "$IRON_FAKE_AIECC_WRITES_NOTHING" ]; then exit 0; fi
if [ -n "$IRON_FAKE_AIECC_WRITES_EMPTY" ]; then
  for a in "$@"; do case "$a" in --full-elf-name=*) : > "${{a#*=}}";; esac; done; exit 0
fi
for a in "$@"; do
  case "$a" in --xclbin-name=*|--npu-insts-name=*|--full-elf-name=*)
    printf 'made by fake aiecc' > "${{a#*=}}";; esac
done
"""

FAKE_CLANG = """#!/bin/sh
{log}if [ -n "$IRON_FAKE_CLANG_FAILS" ]; then
  echo "add.cc:2:1: error: unknown type name 'flot'" >&2
  exit 1
fi
prev=""
for a in "$@"; do
  if [ "$prev" = "-o" ]; then printf 'made by fake clang++' > "$a"; fi
  prev="$a"
done
"""


def script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def make_hermetic(monkeypatch, tmp_path: Path) -> Path:
    """No tool reachable: empty PATH, no install env vars, a Python with nothing installed."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("MLIR_AIE_INSTALL_DIR", raising=False)
    monkeypatch.delenv("PEANO_INSTALL_DIR", raising=False)
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(tmp_path / "python" / name))
    return tmp_path


def install_fakes(monkeypatch, root: Path, flags: str, aiecc_name: str = "aiecc") -> Path:
    """Put fake aiecc and Peano clang++ in root/bin, found through PATH and PEANO_INSTALL_DIR."""
    bin_dir = root / "bin"
    bin_dir.mkdir()
    script(bin_dir / aiecc_name, FAKE_AIECC.format(help=HELP_TEXT[flags], log=LOG_ARGV))
    script(bin_dir / "clang++", FAKE_CLANG.format(log=LOG_ARGV))
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("PEANO_INSTALL_DIR", str(root))
    monkeypatch.setenv("IRON_FAKE_LOG", str(root / "argv.log"))
    return bin_dir


def recorded_argv(root: Path) -> list[list[str]]:
    log = root / "argv.log"
    return [line.split("\t") for line in log.read_text().splitlines()] if log.exists() else []
