"""The placement picture (iron/plan/picture.py, CompiledGraph.svg): the SVG parsed with an XML
parser and read back through its data-* attributes for Walk on npu2 (its tiles, groups, kernels,
memory bars, arrows, the Emit tile) and a split MLP on npu1 (mem-tile arrows); one panel per
segment; written to a path; and rendered by headless Chromium when it is installed."""
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

from aie_utils import from_name
from iron.compiler.compile import compile_program
from iron.plan.picture import picture
from tests.compiler import designs

SVG = "{http://www.w3.org/2000/svg}"


def parsed(text: str) -> ET.Element:
    return ET.fromstring(text)


def used_tiles(root) -> dict[str, ET.Element]:
    return {g.get("data-tile"): g for g in root.iter(f"{SVG}g") if g.get("class") == "tile used"}


def arrows(root) -> list[tuple[str, str, str, str]]:
    return sorted((g.get("data-fifo"), g.get("data-from"), g.get("data-to"), g.get("class"))
                  for g in root.iter(f"{SVG}g") if (g.get("class") or "").startswith("fifo"))


def texts(element) -> list[str]:
    return [t.text for t in element.iter(f"{SVG}text")]


@pytest.fixture(scope="module")
def walk_plan():
    return compile_program(designs.trace(designs.walk(8)), from_name("npu2"))


def test_walk_on_npu2_shows_its_tiles_groups_kernels_and_memory(walk_plan):
    root = parsed(picture((walk_plan,)))
    assert root.get("data-device") == "npu2" and root.get("data-segments") == "1"
    tiles = used_tiles(root)
    assert sorted(tiles) == ["shim_0_0", "tile_0_2", "tile_0_3"]
    assert texts(tiles["tile_0_2"])[:2] == ["tile_0_2  g0", "Copy#0, Copy#1"]
    assert tiles["tile_0_2"].get("data-group") == "g0"
    # describe(): tile_0_2 holds 1056 of 65536 bytes, tile_0_3 1144
    bars = {name: (g.find(f"{SVG}g[@class='memory']")) for name, g in tiles.items() if name != "shim_0_0"}
    assert {name: (b.get("data-used"), b.get("data-budget")) for name, b in bars.items()} == {
        "tile_0_2": ("1056", "65536"), "tile_0_3": ("1144", "65536")}
    assert texts(bars["tile_0_2"]) == ["1 / 64 KiB"]
    assert tiles["tile_0_3"].get("data-emit") == "true" and texts(tiles["tile_0_3"])[:3] == [
        "tile_0_3", "Emit: next call's words", "EMIT"]
    assert [g.get("data-emit") for name, g in tiles.items() if name != "tile_0_3"] == [None, None]
    # npu2 has 8 columns of 6 rows: every other tile is drawn as unused
    unused = [g for g in root.iter(f"{SVG}g") if g.get("class") == "tile unused"]
    assert len(unused) == 8 * 6 - 3


def test_walk_on_npu2_draws_each_fifo_as_an_arrow_dma_and_shared_memory_told_apart(walk_plan):
    root = parsed(picture((walk_plan,)))
    assert arrows(root) == [
        ("emit_in", "shim_0_0", "tile_0_3", "fifo dma"),
        ("feedback", "tile_0_3", "shim_0_0", "fifo dma"),
        ("g0_host", "tile_0_2", "shim_0_0", "fifo dma"),
        ("g0_in", "shim_0_0", "tile_0_2", "fifo dma"),
        ("g0_out", "tile_0_2", "tile_0_3", "fifo shared"),
    ]
    lines = {g.get("data-fifo"): g.find(f"{SVG}polyline") for g in root.iter(f"{SVG}g") if g.get("data-fifo")}
    assert lines["g0_out"].get("stroke-dasharray") == "5,3"
    assert lines["g0_in"].get("stroke-dasharray") is None
    assert lines["g0_out"].get("marker-end") == "url(#head-shared)"


def test_a_split_mlp_on_npu1_shows_mem_tile_splits_and_joins():
    plan = compile_program(designs.trace(designs.mlp(2, 256)), from_name("npu1"))
    root = parsed(picture((plan,)))
    drawn = arrows(root)
    assert any(a[0] == "g1_w0_mem" and a[1].startswith("shim_") and a[2].startswith("mem_") for a in drawn)
    expected = {(str(f.name), f.producer.name, c.name) for f in plan.fifos for c in f.consumers}
    assert {a[:3] for a in drawn} == expected
    assert len(drawn) == sum(len(f.consumers) for f in plan.fifos)
    tiles = used_tiles(root)
    assert set(tiles) == {t.name for t in plan.tiles}
    assert all(g.get("data-kind") == "mem" for name, g in tiles.items() if name.startswith("mem_"))
    assert len(list(g for g in root.iter(f"{SVG}g") if g.get("class", "").startswith("tile"))) == 4 * 6


def test_each_segment_is_one_panel(walk_plan):
    root = parsed(picture((walk_plan, walk_plan)))
    panels = [g for g in root.iter(f"{SVG}g") if g.get("class") == "panel"]
    assert len(panels) == 2 and root.get("data-segments") == "2"
    assert [t.text for p in panels for t in p.findall(f"{SVG}text")] == [
        "segment 1 of 2: Walk", "segment 2 of 2: Walk"]
    assert all(len(used_tiles(p)) == 3 for p in panels)


def test_compiled_svg_returns_and_writes_the_picture(tmp_path):
    compiled = designs.add_one(64).compile(x=((64,), "int32"), device="npu2")
    path = tmp_path / "add_one.svg"
    text = compiled.svg(path)
    assert path.read_text() == text == compiled.svg()
    assert sorted(used_tiles(parsed(text))) == ["shim_0_0", "tile_0_2"]


@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium (Debian package chromium) is not installed")
def test_chromium_renders_the_picture(tmp_path, walk_plan):
    svg = tmp_path / "walk.svg"
    svg.write_text(picture((walk_plan,)))
    png = tmp_path / "walk.png"
    done = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--window-size=1900,900", f"--screenshot={png}", svg.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 20_000   # a page with the tiles drawn, not a blank one
    dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", svg.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr
    assert "parsererror" not in dom.stdout and 'data-tile="tile_0_3"' in dom.stdout
