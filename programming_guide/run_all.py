"""Run every programming-guide design on the current backend and say which ones pass.

Runs each `section-N/*.py` design file as its own process with this Python, from its section's
folder (`--device` is passed through, npu2 by default), prints one line per file (status and
time) and a summary, shows the output of any file that failed, and exits 1 if any did. It does
not build with aiecc or choose the backend: set IRON_BACKEND for that.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

GUIDE = Path(__file__).resolve().parent
TIMEOUT_SECONDS = 300


def design_files() -> list[Path]:
    """Every design file of every section, in section order."""
    sections = sorted(GUIDE.glob("section-*"), key=lambda p: int(p.name.split("-")[1]))
    return [f for section in sections for f in sorted(section.glob("*.py"))]


def run_design(path: Path, device: str) -> tuple[bool, float, str]:
    """(passed, seconds, output) of one design file."""
    began = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, path.name, "--device", device], cwd=path.parent,
                              capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired as expired:
        return False, time.perf_counter() - began, f"timed out after {TIMEOUT_SECONDS} s\n{expired.stdout or ''}"
    return done.returncode == 0, time.perf_counter() - began, done.stdout + done.stderr


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="npu2", help="passed to every design (npu1, npu2, ...)")
    args = parser.parse_args(argv)
    began, failed = time.perf_counter(), []
    for path in design_files():
        passed, seconds, output = run_design(path, args.device)
        name = path.relative_to(GUIDE)
        print(f"{'ok  ' if passed else 'FAIL'} {str(name):40s} {seconds:6.1f} s", flush=True)
        if not passed:
            failed.append(name)
            print("    " + output.strip().replace("\n", "\n    "))
    total = len(design_files())
    print(f"{total - len(failed)} of {total} designs passed on {args.device} in {time.perf_counter() - began:.1f} s"
          + (f"; failed: {', '.join(map(str, failed))}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
