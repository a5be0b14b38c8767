"""Make tests/reference/hf_fixtures/: tiny random llama, mistral, qwen2 and qwen3 checkpoints saved
by transformers itself, one per RoPE type and config style, with transformers' own outputs.

Each folder holds what `save_pretrained` wrote (config.json, model.safetensors, float32) and
`expected.npz` (arrays) + `expected.json` (everything else): transformers' logits over a short
and a long prompt and its greedy continuation of each. The short prompt lies inside the original
context and its continuation runs past it; the long prompt already lies past it (the context is
`original_max_position_embeddings` for llama3, yarn and longrope, `max_position_embeddings` for
dynamic), so every scaling is exercised where it changes the result. "v4" fixtures had their
config.json edited to transformers 4's keys (top-level rope_theta, rope_scaling, "type" for linear
and dynamic, torch_dtype); the edit is checked to leave transformers' own logits unchanged.

Each fixture is also checked before it is written: the top-two logit margin along every greedy
step is at least MIN_MARGIN (float32 rounding cannot flip a token), and the same weights with plain
RoPE at base 10,000 (what a reader that ignores the scaling would run) change the logits by more
than SENSITIVITY and at least one greedy token, so a test comparing with these outputs can fail.

    pip install '.[hf]'          # torch and transformers >= 5
    python tests/reference/make_hf_fixtures.py [--out DIR] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent / "hf_fixtures"
VOCAB = 32
SHAPE = dict(hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
             num_key_value_heads=1, head_dim=16, vocab_size=VOCAB, rms_norm_eps=1e-6)
DRAFT_SHAPE = dict(hidden_size=16, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
                   num_key_value_heads=1, head_dim=8, vocab_size=VOCAB, rms_norm_eps=1e-6)
CLASSES = {"llama": "LlamaConfig", "mistral": "MistralConfig", "qwen2": "Qwen2Config", "qwen3": "Qwen3Config"}
PROMPT_SEED = 7
SHORT, SHORT_NEW = 8, 40  # 8 + 40 = 48 > every fixture's context of 16 or 32
LONG, LONG_NEW = 40, 16
MIN_MARGIN = 1e-3
SENSITIVITY = 1e-2  # 100x the tests' logit tolerance
LINEAR_STD = 0.3  # of every projection: large enough that attention, hence RoPE, matters


@dataclass(frozen=True)
class Fixture:
    family: str
    style: str  # "v5": as transformers 5 saves it; "v4": config.json edited to transformers 4's keys
    rope: dict  # rope_parameters as transformers 5 states them
    max_positions: int = 128
    seed: int = 0  # first weight seed tried; the one used is recorded in expected.json
    extra: dict = field(default_factory=dict)


LONG_FACTORS = [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0]  # longrope: one divisor per rotated pair (head_dim 16)
FIXTURES = {
    # plain RoPE with a base other than 10,000: the bug this suite was written for (Qwen: 1e6)
    "llama-default-v5": Fixture("llama", "v5", {"rope_type": "default", "rope_theta": 500000.0}),
    "mistral-default-v4": Fixture("mistral", "v4", {"rope_type": "default", "rope_theta": 1000000.0},
                                  extra={"sliding_window": None}),
    "qwen2-default-v5": Fixture("qwen2", "v5", {"rope_type": "default", "rope_theta": 1000000.0},
                                extra={"tie_word_embeddings": True}),
    "qwen3-default-v5": Fixture("qwen3", "v5", {"rope_type": "default", "rope_theta": 1000000.0}),
    "qwen3-default-v4": Fixture("qwen3", "v4", {"rope_type": "default", "rope_theta": 1000000.0}, seed=1,
                                extra={"tie_word_embeddings": True}),
    "llama-linear-v4": Fixture("llama", "v4", {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}),
    "qwen2-linear-v5": Fixture("qwen2", "v5", {"rope_type": "linear", "factor": 2.0, "rope_theta": 50000.0}),
    "mistral-dynamic-v5": Fixture("mistral", "v5", {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0},
                                  max_positions=16, extra={"sliding_window": None}),
    "llama-dynamic-v4": Fixture("llama", "v4", {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0},
                                max_positions=16),
    # Llama 3.1's own band limits (1, 4) and the Llama 3.2 base, over a 32-token original context
    "llama-llama3-v5": Fixture("llama", "v5", {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                               "high_freq_factor": 4.0, "original_max_position_embeddings": 32,
                                               "rope_theta": 500000.0}),
    "llama-llama3-v4": Fixture("llama", "v4", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 2.0,
                                               "high_freq_factor": 8.0, "original_max_position_embeddings": 32,
                                               "rope_theta": 10000.0}, max_positions=256),
    # yarn's factor is max_position_embeddings / original, as transformers expects it
    "qwen3-yarn-v5": Fixture("qwen3", "v5", {"rope_type": "yarn", "factor": 4.0,
                                             "original_max_position_embeddings": 32, "rope_theta": 1000000.0}),
    "qwen2-yarn-v4": Fixture("qwen2", "v4", {"rope_type": "yarn", "factor": 4.0,
                                             "original_max_position_embeddings": 32, "rope_theta": 10000.0}),
    "mistral-yarn-mscale-v5": Fixture("mistral", "v5", {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "rope_theta": 10000.0,
        "mscale": 1.0, "mscale_all_dim": 0.5, "beta_fast": 16.0, "beta_slow": 2.0, "truncate": False},
        extra={"sliding_window": None}),
    "llama-longrope-v5": Fixture("llama", "v5", {"rope_type": "longrope", "short_factor": [1.0] * 8,
                                                 "long_factor": LONG_FACTORS,
                                                 "original_max_position_embeddings": 32, "rope_theta": 10000.0}),
    "qwen3-longrope-v4": Fixture("qwen3", "v4", {"rope_type": "longrope", "short_factor": [1.0, 1.0, 1.1, 1.2,
                                                                                           1.4, 1.6, 2.0, 2.5],
                                                 "long_factor": LONG_FACTORS, "attention_factor": 1.3,
                                                 "original_max_position_embeddings": 32, "rope_theta": 10000.0},
                                  seed=1),
}


def prompts() -> dict[str, list[int]]:
    tokens = np.random.default_rng(PROMPT_SEED).integers(0, VOCAB, LONG)
    return {"short": [int(t) for t in tokens[:SHORT]], "long": [int(t) for t in tokens]}


def _config(family: str, shape: dict, rope: dict, max_positions: int, extra: dict):
    import transformers

    return getattr(transformers, CLASSES[family])(**shape, **extra, max_position_embeddings=max_positions,
                                                  rope_parameters=dict(rope), bos_token_id=None,
                                                  eos_token_id=None, pad_token_id=None)


def _randomise(model, seed: int) -> None:
    """Unit-scale embeddings, N(0, LINEAR_STD) projections, norm gains 1 + N(0, 0.1), biases N(0, 0.1)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if "norm" in name:
                param.copy_(1 + 0.1 * noise)
            elif "embed" in name:
                param.copy_(noise)
            else:
                param.copy_((0.1 if name.endswith("bias") else LINEAR_STD) * noise)


def _load(folder: Path):
    """A fresh model per measurement: dynamic NTK keeps state between forwards in transformers."""
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype="float32",
                                                             attn_implementation="eager").eval()


def _run(model, prompt: list[int], new_tokens: int) -> tuple[np.ndarray, list[int], float]:
    """(logits over the prompt, greedy continuation, smallest top-two margin along it)."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0].numpy()
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                             output_scores=True, return_dict_in_generate=True, pad_token_id=0)
    steps = np.stack([s[0].numpy() for s in out.scores])  # (new_tokens, V) raw logits: greedy has no processor
    top = -np.sort(-steps, axis=1)
    return logits, out.sequences[0, len(prompt):].tolist(), float(np.min(top[:, 0] - top[:, 1]))


def to_v4(config: dict) -> dict:
    """transformers 4's spelling of a transformers 5 config.json."""
    config = dict(config)
    params = dict(config.pop("rope_parameters"))
    config["rope_theta"] = params.pop("rope_theta")
    kind = params.get("rope_type")
    if kind == "default":
        config["rope_scaling"] = None
    else:
        if kind in ("linear", "dynamic"):  # transformers < 4.42 wrote "type"
            params["type"] = params.pop("rope_type")
        config["rope_scaling"] = params
    if "dtype" in config:
        config["torch_dtype"] = config.pop("dtype")
    return config


def measure(folder: Path) -> dict:
    return {case: _run(_load(folder), prompt, SHORT_NEW if case == "short" else LONG_NEW)
            for case, prompt in prompts().items()}


def build(name: str, folder: Path, tries: int = 40) -> dict:
    """Write fixture `name` into `folder` (replaced); returns its expected.json record."""
    import torch
    import transformers

    fixture = FIXTURES[name]
    torch.set_num_threads(1)
    for seed in range(fixture.seed, fixture.seed + tries):
        if folder.exists():
            shutil.rmtree(folder)
        config = _config(fixture.family, SHAPE, fixture.rope, fixture.max_positions, fixture.extra)
        model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
        _randomise(model, seed)
        model.save_pretrained(folder)
        got = measure(folder)
        if fixture.style == "v4":
            path = folder / "config.json"
            path.write_text(json.dumps(to_v4(json.loads(path.read_text())), indent=2, sort_keys=True) + "\n")
            edited = measure(folder)
            for case in got:  # transformers reads the edited config as the same model
                assert np.array_equal(edited[case][0], got[case][0]) and edited[case][1] == got[case][1], name
        plain = folder.parent / f".{name}-plain"
        unscaled = _config(fixture.family, SHAPE, {"rope_type": "default", "rope_theta": 10000.0},
                           fixture.max_positions, fixture.extra)
        other = transformers.AutoModelForCausalLM.from_config(unscaled).float().eval()
        other.load_state_dict(model.state_dict())
        other.save_pretrained(plain)
        base = measure(plain)
        shutil.rmtree(plain)
        margin = min(g[2] for g in got.values())
        diff = max(float(np.max(np.abs(got[c][0] - base[c][0]))) for c in got)
        changed = any(got[c][1] != base[c][1] for c in got)
        distinct = min(len(set(g[1])) for g in got.values())
        if margin >= MIN_MARGIN and diff > SENSITIVITY and changed and distinct >= 4:
            break
    else:
        raise SystemExit(f"{name}: no seed in {fixture.seed}..{fixture.seed + tries - 1} gives margins >= "
                         f"{MIN_MARGIN}, a visible scaling and a varied continuation")
    np.savez_compressed(folder / "expected.npz", **{f"logits_{c}": got[c][0].astype(np.float32) for c in got})
    record = {"fixture": name, "family": fixture.family, "style": fixture.style, "rope_type": fixture.rope["rope_type"],
              "seed": seed, "prompts": prompts(), "greedy": {c: got[c][1] for c in got},
              "min_margin": margin, "plain_rope_max_logit_diff": diff,
              "made_by": f"tests/reference/make_hf_fixtures.py, transformers {transformers.__version__}, "
                         f"torch {torch.__version__}"}
    lines = [f" {json.dumps(key)}: {json.dumps(value)}" for key, value in record.items()]
    (folder / "expected.json").write_text("{\n" + ",\n".join(lines) + "\n}\n")
    return record


def build_draft(folder: Path) -> None:
    """A 1-layer llama drafter of the same vocabulary for the speculative tests (no expected outputs)."""
    import transformers

    if folder.exists():
        shutil.rmtree(folder)
    model = transformers.AutoModelForCausalLM.from_config(
        _config("llama", DRAFT_SHAPE, {"rope_type": "default", "rope_theta": 10000.0}, 128, {})).float().eval()
    _randomise(model, 0)
    model.save_pretrained(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument("--only", nargs="*", choices=sorted(FIXTURES), help="Fixtures to remake [default: all].")
    args = parser.parse_args()
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only or FIXTURES:
        record = build(name, args.out / name)
        print(f"{name:24s} seed {record['seed']:2d}  min margin {record['min_margin']:.2e}  "
              f"plain RoPE changes logits by {record['plain_rope_max_logit_diff']:.2f}")
    if not args.only:
        build_draft(args.out / "draft")


if __name__ == "__main__":
    main()
