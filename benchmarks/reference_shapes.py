"""Verification cost against target shape (issue 6): a k-token forward over one token's, for the
shipped 4 x 256 target and deeper, thinner llama shapes of similar size, random weights.

Why: a forward's per-layer call overhead is the same for 1 and k tokens, so a deeper, thinner
target makes few-token verification relatively cheaper on this machine (docs/reference.md, where a
trained 10 x 160 target turned out harder for its draft to predict).

Run with one BLAS thread: OPENBLAS_NUM_THREADS=1 python benchmarks/reference_shapes.py [--repeats 100]
Prints medians (ms) and ratios to one token; shapes and sizes alternate within each repeat.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from dfvg_dse.reference import Model, ReferenceConfig
from dfvg_dse.reference.tiny_lm import random_weights
from dfvg_dse.specs import ModelSpec
from reference_forward import time_forward  # a sibling script: benchmarks/ is on the path when run

SHAPES = {"4x256 (shipped)": (4, 256, 4, 688), "10x160": (10, 160, 4, 432), "12x160": (12, 160, 4, 432),
          "16x128": (16, 128, 2, 344), "1x128 (shipped draft)": (1, 128, 2, 344)}
TOKENS = (1, 4, 7)
CONTEXT = 150


def build(layers: int, width: int, heads: int, ffn: int) -> Model:
    spec = ModelSpec(name=f"{layers}x{width}", family="llama", n_layers=layers, d_model=width, n_heads=heads,
                     n_kv_heads=heads, head_dim=width // heads, d_ffn=ffn, vocab_size=256, max_positions=1024,
                     tied_embeddings=True, weight_dtype="float32")
    model = Model(random_weights(spec), ReferenceConfig(spec))
    model.run(list(range(CONTEXT)), np.arange(CONTEXT))
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=100)
    args = parser.parse_args()
    models = {name: build(*shape) for name, shape in SHAPES.items()}
    times = {(name, n): [] for name in models for n in TOKENS}
    for _ in range(args.repeats):
        for name, model in models.items():
            for n in TOKENS:
                times[(name, n)].append(time_forward(model, n))
    for name, model in models.items():
        one = statistics.median(times[(name, 1)])
        params = sum(w.size for layer in model.weights.layers for w in (layer.qkv, layer.out, layer.up, layer.down))
        row = " ".join(f"{n}:{statistics.median(times[(name, n)]) * 1e3:.3f}ms"
                       f"({statistics.median(times[(name, n)]) / one:.2f}x)" for n in TOKENS)
        print(f"{name:22s} {params / 1e6:.2f} M layer parameters: {row}")


if __name__ == "__main__":
    main()
