"""Section 12, a vision example: mlir-aie's edge detect (programming_examples/vision/edge_detect)
with library kernels only.

An RGBA image becomes grey (a 1x1 Conv2D weighing R, G and B, then Requantize), a 3x3 Laplacian
finds its edges (a Conv2D of uint8 pixels by int8 weights into int32), a binary threshold marks
those above 10 with 255 (one Requantize: scale 255, zero point -2550, clamped to uint8), and the
edges are added onto the image, saturating (a Concat of the two and a 1x1 Conv2D, then
Requantize). It checks reference() and the compiled design (numpy kernels, then the C++ built
for the host) against the same pipeline written in numpy; every pixel must match exactly, or it
exits 1.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

import numpy as np

import aie_utils
import iron
from iron.kernels import Cast, Concat, Conv2D, Requantize

HEIGHT, WIDTH, THRESHOLD = 24, 32, 10
GREY = (4899, 9617, 1868)   # R, G, B weights / 2**14 (OpenCV's RGB to grey in fixed point)
LAPLACIAN = ((0, 1, 0), (1, -4, 1), (0, 1, 0))


class EdgeDetect(iron.Graph):
    """rgba (H, W, 4) uint8 -> the image with its edges added in white, (H, W, 4) uint8."""

    def __init__(self):
        self.grey = iron.param(np.array([*GREY, 0], np.int16).reshape(1, 1, 4, 1))
        self.laplacian = iron.param(np.array(LAPLACIAN, np.int8).reshape(3, 3, 1, 1))
        blend = np.zeros((1, 1, 5, 4), np.int8)
        blend[0, 0, :4, :4] = np.eye(4, dtype=np.int8)   # the image's channels as they are
        blend[0, 0, 4, :3] = 1                          # plus the edges on R, G and B
        self.blend = iron.param(blend)

    def body(self, rgba):
        grey = Conv2D.step(Cast.step(rgba, dtype=np.int16), self.grey, dtype=np.int32)
        grey = Requantize.step(grey, shift=14, dtype=np.uint8)
        laplacian = Conv2D.step(grey, self.laplacian, padding=1)   # uint8 x int8 -> int32
        edges = Requantize.step(laplacian, shift=0, scale=255, zero_point=-255 * THRESHOLD, dtype=np.uint8)
        added = Conv2D.step(Concat.step(rgba, edges, axis=2), self.blend)
        return Requantize.step(added, shift=0, dtype=np.uint8)


def numpy_edge_detect(rgba: np.ndarray) -> np.ndarray:
    """The same pipeline in plain numpy, with exact integers."""
    weighted = rgba[..., :3].astype(np.int64) @ np.array(GREY)
    grey = np.clip(np.round(weighted / 2**14), 0, 255).astype(np.int64)   # halves to even
    padded = np.pad(grey, 1)
    laplacian = sum(LAPLACIAN[i][j] * padded[i:i + HEIGHT, j:j + WIDTH] for i in range(3) for j in range(3))
    edges = np.where(laplacian > THRESHOLD, 255, 0)
    out = rgba.astype(np.int64)
    out[..., :3] = np.minimum(out[..., :3] + edges[..., None], 255)
    return out.astype(np.uint8)


def report(label: str, got: np.ndarray, expected: np.ndarray) -> bool:
    ok = got.dtype == expected.dtype and np.array_equal(got, expected)
    white = int(np.all(got[..., :3] == 255, axis=-1).sum())
    print(f"{label}: {white} of {HEIGHT * WIDTH} pixels white, out[0, 0] = {got[0, 0].tolist()} -> "
          f"{'matches' if ok else 'DIFFERS from'} numpy (exact)")
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="npu2", help="npu1, npu2 or a partition such as npu2_4col")
    args = parser.parse_args(argv)
    aie_utils.set_current_device(aie_utils.from_name(args.device))

    rgba = np.random.default_rng(0).integers(0, 256, (HEIGHT, WIDTH, 4), dtype=np.uint8)
    rgba[..., 3] = 255
    rgba[8:16, 8:24, :3] = 40   # a dark rectangle: its border is an edge
    expected = numpy_edge_detect(rgba)
    ok = report("reference", EdgeDetect().reference(rgba), expected)

    compiled = EdgeDetect().compile(rgba=rgba)
    print("groups:", ", ".join(f"{g}: {' -> '.join(calls)}" for g, calls in compiled.plan.groups))
    ok &= report(f"compiled ({compiled.device.name}, numpy kernels)", compiled(rgba), expected)
    if shutil.which(os.environ.get("CXX", "g++")):
        os.environ["IRON_EMULATOR_KERNELS"] = "native"
        native = EdgeDetect().compile(rgba=rgba)
        ok &= report(f"compiled ({native.device.name}, the C++ built for the host)", native(rgba), expected)
    else:
        print("no host C++ compiler: the native kernel mode is skipped")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
