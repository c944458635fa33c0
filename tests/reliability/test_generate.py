"""Issue 25 item 7: generate(steps=0) gives no token on every path, as numpy's generate does:
reference() host-driven (the prompt given per call or loaded by a first version), the compiled
graph host-driven, and the device loop. The prompt still runs (its cache rows are written)."""
import aie_utils
from iron.models import numpy_forward as nf
from iron.models.smollm2_graph import SmolLM2Graph, generate, generate_in_loop


def test_generating_zero_tokens_gives_none_on_every_path(two_layers, on_emulator):
    graph = SmolLM2Graph(two_layers)
    ids = two_layers.tokenizer.encode("Once")
    assert nf.generate(two_layers, ids, 0) == []
    assert generate(graph, graph.reference, ids, 0) == []
    assert generate(graph, graph.reference, ids, 0, loaded=True) == []
    with aie_utils.using_device(aie_utils.from_name("npu2")):
        compiled = graph.compile()
    assert generate(graph, compiled, ids, 0) == []
    assert generate_in_loop(graph, compiled, ids, 0) == []
    assert generate(graph, compiled, ids, 1) == nf.generate(two_layers, ids, 1)   # and one is one
