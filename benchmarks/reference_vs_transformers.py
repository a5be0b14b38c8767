"""The numpy reference engine against Hugging Face transformers on the same checkpoints (issue 6).

For each family (llama, mistral, qwen2, qwen3, OPT) a small randomly initialised transformers
model is saved with save_pretrained (config.json + model.safetensors), read back through the
reference engine's checkpoint reader, and compared: the largest absolute logit difference over a
prompt (float32 rounding is ~1e-5 here), and whether 32 greedy tokens are identical. Then the
speed of greedy decoding on a 4-layer, 256-wide llama (about 3.3 M parameters, byte vocabulary):
numpy engine tokens/s over transformers' tokens/s, both single-threaded, runs alternated because
this machine's speed drifts; medians are printed.

Needs the optional PyTorch + transformers (not part of CI):
    python -m venv /tmp/hf && /tmp/hf/bin/pip install torch==2.13.0 transformers && /tmp/hf/bin/pip install -e .
    /tmp/hf/bin/python benchmarks/reference_vs_transformers.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from dfvg_dse.catalog.checkpoints import forward_settings, read_checkpoint
from dfvg_dse.reference import Model, ReferenceConfig, generate_ar

COMMON = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, vocab_size=97,
              max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=10000.0)
FAMILIES = {
    "llama": ("LlamaConfig", dict(num_key_value_heads=2)),
    "mistral": ("MistralConfig", dict(num_key_value_heads=2, sliding_window=None)),
    "qwen2": ("Qwen2Config", dict(num_key_value_heads=2, tie_word_embeddings=True)),
    "qwen3": ("Qwen3Config", dict(num_key_value_heads=1, head_dim=24, tie_word_embeddings=True)),
    "opt": ("OPTConfig", dict(ffn_dim=96, word_embed_proj_dim=64, do_layer_norm_before=True)),
}


def hf_model(family: str, overrides: dict | None = None, seed: int = 0):
    import torch
    import transformers

    class_name, extra = FAMILIES[family]
    fields = {**COMMON, **extra, **(overrides or {})}
    if family == "opt":
        fields.pop("intermediate_size"), fields.pop("rms_norm_eps"), fields.pop("rope_theta")
    config = getattr(transformers, class_name)(**fields)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config).eval().float()
    with torch.no_grad():  # default init leaves norms at exactly 1 and biases at 0: perturb them
        for name, param in model.named_parameters():
            param.add_(torch.randn_like(param) * (0.1 if "norm" in name or "bias" in name else 0.0))
    return model


def reference_model(hf, folder: Path) -> Model:
    hf.save_pretrained(folder, safe_serialization=True)
    config, spec, tensors = read_checkpoint(folder)
    rope, rms_norm_eps = forward_settings(folder, config, spec)
    return Model(tensors, ReferenceConfig(spec, rope=rope, rms_norm_eps=rms_norm_eps))


def hf_greedy(hf, prompt: list[int], new_tokens: int) -> list[int]:
    import torch

    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                          do_sample=False, use_cache=True, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def compare_family(family: str, tmp: Path) -> tuple[float, bool]:
    import torch

    hf = hf_model(family)
    ref = reference_model(hf, tmp / family)
    prompt = [int(t) for t in np.random.default_rng(1).integers(0, COMMON["vocab_size"], 24)]
    with torch.no_grad():
        expected = hf(torch.tensor([prompt])).logits[0].numpy()
    got = ref.run(prompt, np.arange(len(prompt)))
    fresh = reference_model(hf, tmp / (family + "-2"))
    same = generate_ar(fresh, prompt, 32) == hf_greedy(hf, prompt, 32)
    return float(np.max(np.abs(got - expected))), same


def speed(repeats: int, new_tokens: int, tmp: Path) -> tuple[float, float]:
    import torch

    torch.set_num_threads(1)
    hf = hf_model("llama", dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
                                num_key_value_heads=4, vocab_size=256, max_position_embeddings=1024,
                                tie_word_embeddings=True))
    hf.save_pretrained(tmp / "speed", safe_serialization=True)
    config, spec, tensors = read_checkpoint(tmp / "speed")
    prompt = list(b"def main(argv):\n    parser = argparse.ArgumentParser(")
    numpy_rates, torch_rates = [], []
    for _ in range(repeats):  # alternate the two engines
        start = time.perf_counter()
        generate_ar(Model(tensors, ReferenceConfig(spec)), prompt, new_tokens)
        numpy_rates.append(new_tokens / (time.perf_counter() - start))
        start = time.perf_counter()
        hf_greedy(hf, prompt, new_tokens)
        torch_rates.append(new_tokens / (time.perf_counter() - start))
    return statistics.median(numpy_rates), statistics.median(torch_rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args()
    import transformers

    transformers.utils.logging.disable_progress_bar()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        print("family    max |logit diff|   32 greedy tokens identical")
        for family in FAMILIES:
            diff, same = compare_family(family, tmp)
            print(f"{family:9s} {diff:16.2e}   {same}")
        numpy_rate, torch_rate = speed(args.repeats, args.new_tokens, tmp)
        print(f"greedy {args.new_tokens} tokens, 3.3M-parameter llama, one thread, median of {args.repeats}: "
              f"numpy {numpy_rate:.0f} tok/s, PyTorch {torch_rate:.0f} tok/s, ratio {numpy_rate / torch_rate:.2f}")


if __name__ == "__main__":
    main()
