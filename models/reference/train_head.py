"""Train the shipped EAGLE-style draft head of the tiny reference target (issue 18, Deliver 5).

The head drafts from the target's features, as EAGLE does (Li et al., ICML 2024): at position t it
reads the target's last hidden state f_{t-1} (after the final norm: the LM head's input) and the
embedding of token x_t, concatenated, through `fc` (2d -> d, with a bias), one llama decoder layer
at the target's widths and its own final RMSNorm, and predicts f_t. The target's LM head (its tied
embedding) turns the prediction into next-byte logits. Deeper draft steps feed the head's own
prediction back as the feature. Loss: smooth L1 between predicted and true features plus 0.1 x the
KL divergence from the target's next-byte distribution (EAGLE's regression and classification
terms), with U(-0.1, 0.1) noise on the input features (EAGLE's augmentation, so the head tolerates
its own predictions at depth).

Saved as models/reference/eagle/: config.json (the head's one-layer llama config, `"eagle"` naming
its target), model.safetensors (fc.weight, fc.bias, model.layers.0.*, model.norm.weight; the
embedding and LM head are the target's, not stored), training.json. Seeded; data as train.py.

Needs the optional extra: pip install '.[train]'   (PyTorch CPU + transformers)
Run:   python models/reference/train_head.py --steps 1500 --out models/reference/eagle
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from train import CONTEXT, HELD_OUT_EVERY, batches, corpus  # noqa: E402

TARGET = Path(__file__).parent / "target"
NOISE = 0.1
CLASSIFICATION_WEIGHT = 0.1


def build(target):
    """The head's modules at the target's widths: fc and a one-layer LlamaModel (embeddings unused)."""
    import torch
    import transformers

    t = target.config
    config = transformers.LlamaConfig(vocab_size=t.vocab_size, hidden_size=t.hidden_size,
                                      intermediate_size=t.intermediate_size, num_hidden_layers=1,
                                      num_attention_heads=t.num_attention_heads,
                                      num_key_value_heads=t.num_key_value_heads, head_dim=t.head_dim,
                                      max_position_embeddings=t.max_position_embeddings, rms_norm_eps=t.rms_norm_eps,
                                      rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=None,
                                      eos_token_id=None, pad_token_id=None)
    layer = transformers.LlamaModel(config)
    fc = torch.nn.Linear(2 * t.hidden_size, t.hidden_size, bias=True)
    return config, fc, layer


def head_forward(target, fc, layer, tokens, features):
    """Predicted features (B, T, d) for inputs x_1..x_T and features f_0..f_{T-1}."""
    import torch

    embedded = target.model.embed_tokens(tokens)
    return layer(inputs_embeds=fc(torch.cat([embedded, features], dim=-1))).last_hidden_state


def target_features(target, ids):
    """The target's final-norm hidden states (B, T, d) and next-byte log-probabilities."""
    out = target.model(input_ids=ids)
    hidden = out.last_hidden_state
    return hidden, __import__("torch").log_softmax(target.lm_head(hidden), dim=-1)


def train(steps: int, out: Path, seed: int, batch: int, lr: float, threads: int) -> dict:
    import torch
    import transformers
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    target = transformers.LlamaForCausalLM.from_pretrained(TARGET).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    config, fc, layer = build(target)
    params = [*fc.parameters(), *(p for n, p in layer.named_parameters() if not n.startswith("embed_tokens"))]
    optimiser = torch.optim.AdamW(params, lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    train_data, held_data, _ = corpus()
    stream = batches(train_data, batch, np.random.default_rng(seed))
    noise = torch.Generator().manual_seed(seed + 3)
    start, losses = time.time(), []
    for step in range(steps):
        scale = min(1.0, (step + 1) / 100) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for group in optimiser.param_groups:
            group["lr"] = lr * max(scale, 0.02)
        ids = torch.from_numpy(next(stream))[:, :CONTEXT]
        with torch.no_grad():
            features, soft = target_features(target, ids)
        shaken = features[:, :-1] + (torch.rand(features[:, :-1].shape, generator=noise) * 2 - 1) * NOISE
        predicted = head_forward(target, fc, layer, ids[:, 1:], shaken)
        regression = torch.nn.functional.smooth_l1_loss(predicted, features[:, 1:])
        mine = torch.log_softmax(target.lm_head(predicted), dim=-1)
        classification = torch.nn.functional.kl_div(mine.flatten(0, 1), soft[:, 1:].flatten(0, 1), log_target=True,
                                                    reduction="batchmean")
        loss = regression + CLASSIFICATION_WEIGHT * classification
        optimiser.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimiser.step()
        losses.append((loss.item(), regression.item(), classification.item()))
        if step % 100 == 0:
            last = np.mean(losses[-50:], axis=0)
            print(f"head step {step} loss {last[0]:.4f} (l1 {last[1]:.4f}, kl {last[2]:.3f}) "
                  f"({time.time() - start:.0f} s)", flush=True)
    held = batches(held_data, 16, np.random.default_rng(seed + 1))
    agree, kl = [], []
    with torch.no_grad():
        for _ in range(20):
            ids = torch.from_numpy(next(held))[:, :CONTEXT]
            features, soft = target_features(target, ids)
            mine = torch.log_softmax(target.lm_head(head_forward(target, fc, layer, ids[:, 1:], features[:, :-1])),
                                     dim=-1)
            agree.append((mine.argmax(-1) == soft[:, 1:].argmax(-1)).float().mean().item())
            kl.append(torch.nn.functional.kl_div(mine.flatten(0, 1), soft[:, 1:].flatten(0, 1), log_target=True,
                                                 reduction="batchmean").item())
    out.mkdir(parents=True, exist_ok=True)
    tensors = {"fc.weight": fc.weight, "fc.bias": fc.bias,
               **{f"model.{n}": p for n, p in layer.named_parameters() if not n.startswith("embed_tokens")}}
    save_file({k: v.detach().contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"))
    document = {**json.loads(config.to_json_string()), "architectures": ["EagleHead"],
                "eagle": {"target": "../target", "feature": "final-norm hidden state of the last layer",
                          "fc_bias": True}}
    (out / "config.json").write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    card = {"role": "eagle head", "parameters": sum(p.numel() for p in params), "steps": steps, "batch": batch,
            "context": CONTEXT, "lr": lr, "seed": seed, "noise": NOISE, "classification_weight": CLASSIFICATION_WEIGHT,
            "threads": threads, "seconds": round(time.time() - start, 1),
            "train_loss_last_100": [float(x) for x in np.mean(losses[-100:], axis=0)],
            "held_out_top1_agreement_teacher_forced": float(np.mean(agree)), "held_out_kl": float(np.mean(kl)),
            "python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "data": f"top-level *.py of the Python {platform.python_version()} standard library, "
                    f"every {HELD_OUT_EVERY}th file held out"}
    (out / "training.json").write_text(json.dumps(card, indent=2) + "\n")
    return card


def main() -> None:
    parser = argparse.ArgumentParser(description="Train the tiny target's EAGLE-style draft head.")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    print(json.dumps(train(args.steps, args.out, args.seed, args.batch, args.lr, args.threads), indent=2))


if __name__ == "__main__":
    main()
