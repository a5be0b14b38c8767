"""Train the shipped tiny reference pair (issue 6): a llama-family byte-level target and draft,
saved as Hugging Face checkpoint folders (config.json + model.safetensors) that the numpy
reference engine reads.

Data: the top-level *.py files of the running Python's standard library, sorted by name; every
8th file is held out (prompts and the held-out loss come from those). Nothing is downloaded.
Seeded: the same Python version, steps and seeds give the same weights on the same machine.

Needs the optional extra: pip install '.[train]'   (PyTorch CPU + transformers)
Run:   python models/reference/train.py --role target --steps 1100 --batch 16 --lr 3e-3 --out models/reference/target
       python models/reference/train.py --role draft --steps 2500 --batch 16 --lr 3e-3 --out models/reference/draft
       python models/reference/train.py --role draft --steps 1800 --batch 16 --lr 1e-3 --init models/reference/draft \
           --distil-from models/reference/target --out models/reference/draft   (distillation, see the card)
       python models/reference/train.py --role draft --steps 2000 --batch 16 --lr 1e-3 --init models/reference/draft \
           --distil-from models/reference/target --on-policy 4096 --out models/reference/draft
       python models/reference/train.py --prompts models/reference/prompts.jsonl
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import platform
import sysconfig
import time
from pathlib import Path

import numpy as np

SHAPES = {  # the feasibility study: a 4 x 256 target, a 1 x 128 draft
    "target": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=4),
    "draft": dict(hidden_size=128, intermediate_size=344, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=2),
    # issue 19: a target whose bfloat16 verify is memory-bound on a CPU (14.3M parameters, 28.6 MB
    # in 16 bits), for the torch backend's pair `builtin:small`; its draft is the `draft` shape
    "target-small": dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=8, num_attention_heads=6,
                         num_key_value_heads=6),
    "draft-small": dict(hidden_size=128, intermediate_size=344, num_hidden_layers=2, num_attention_heads=2,
                        num_key_value_heads=2),  # its draft: the `draft` shape, two layers
}
CONTEXT = 128
HELD_OUT_EVERY = 8


def corpus() -> tuple[bytes, bytes, list[str]]:
    files = sorted(glob.glob(str(Path(sysconfig.get_paths()["stdlib"]) / "*.py")))
    train = b"".join(Path(f).read_bytes() for i, f in enumerate(files) if i % HELD_OUT_EVERY)
    held = [f for i, f in enumerate(files) if i % HELD_OUT_EVERY == 0]
    return train, b"".join(Path(f).read_bytes() for f in held), held


def batches(data: bytes, batch: int, rng: np.random.Generator):
    array = np.frombuffer(data, dtype=np.uint8)
    while True:
        starts = rng.integers(0, len(array) - CONTEXT - 1, size=batch)
        yield np.stack([array[s:s + CONTEXT + 1] for s in starts]).astype(np.int64)


def on_policy_windows(teacher, data: bytes, count: int, seed: int) -> np.ndarray:
    """`count` windows of CONTEXT + 1 bytes: a 64-byte prompt from the data, then the teacher's own
    greedy continuation (DistillSpec, Zhou et al. 2023: a draft is judged on the target's text)."""
    import torch

    array = np.frombuffer(data, dtype=np.uint8)
    rng = np.random.default_rng(seed)
    prompt, windows = 64, []
    with torch.no_grad():
        for first in range(0, count, 64):
            starts = rng.integers(0, len(array) - prompt, size=min(64, count - first))
            ids = torch.from_numpy(np.stack([array[s:s + prompt] for s in starts]).astype(np.int64))
            out = teacher.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                   max_new_tokens=CONTEXT + 1 - prompt, pad_token_id=0)
            windows.append(out[:, :CONTEXT + 1].numpy())
    return np.concatenate(windows)


def train(role: str, steps: int, out: Path, seed: int, batch: int, lr: float, init: Path | None = None,
          teacher: Path | None = None, on_policy: int = 0, bf16: bool = False) -> dict:
    """Train (or, from `init`, fine-tune) one model. With a `teacher` checkpoint the loss is the
    KL divergence from the teacher's next-byte distribution (distillation): a draft is only useful
    where it agrees with its target, and soft labels teach that agreement faster than the data.
    With `on_policy` > 0, half of every batch comes from that many teacher-written windows. With
    `bf16`, forwards run under torch.autocast in bfloat16 (weights and optimiser stay float32):
    about 2.7x faster on a CPU with avx512_bf16."""
    import torch
    import transformers

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    if init is not None:
        model = transformers.LlamaForCausalLM.from_pretrained(init, dtype=torch.float32)
    else:
        config = transformers.LlamaConfig(vocab_size=256, max_position_embeddings=1024, rms_norm_eps=1e-6,
                                          rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=None,
                                          eos_token_id=None, pad_token_id=None, **SHAPES[role])
        model = transformers.LlamaForCausalLM(config)
    guide = None if teacher is None else transformers.LlamaForCausalLM.from_pretrained(teacher, dtype=torch.float32).eval()
    params = sum(p.numel() for p in model.parameters())
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    train_data, held_data, _ = corpus()
    stream = batches(train_data, batch, np.random.default_rng(seed))
    start, losses = time.time(), []
    written = on_policy_windows(guide, train_data, on_policy, seed) if guide is not None and on_policy else None
    pick = np.random.default_rng(seed + 2)
    for step in range(steps):
        scale = min(1.0, (step + 1) / 100) * 0.5 * (1 + math.cos(math.pi * step / steps))  # warm-up, cosine
        for group in optimiser.param_groups:
            group["lr"] = lr * max(scale, 0.02)
        x = torch.from_numpy(next(stream))
        if written is not None:  # half natural text, half the teacher's own continuations
            x[batch // 2:] = torch.from_numpy(written[pick.integers(0, len(written), size=batch - batch // 2)])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            if guide is None:
                loss = model(input_ids=x[:, :-1], labels=x[:, :-1]).loss  # transformers shifts the labels
            else:
                with torch.no_grad():
                    soft = torch.log_softmax(guide(input_ids=x[:, :-1]).logits.float(), dim=-1)
                mine = torch.log_softmax(model(input_ids=x[:, :-1]).logits.float(), dim=-1)
                loss = torch.nn.functional.kl_div(mine.flatten(0, 1), soft.flatten(0, 1), log_target=True,
                                                  reduction="batchmean")
        optimiser.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        losses.append(loss.item())
        if step % 250 == 0:
            print(f"{role} step {step} loss {np.mean(losses[-50:]):.3f} ({time.time() - start:.0f} s)", flush=True)
    model.eval()
    held_stream = batches(held_data, 16, np.random.default_rng(seed + 1))
    with torch.no_grad():
        held_loss = float(np.mean([model(input_ids=(x := torch.from_numpy(next(held_stream)))[:, :-1],
                                         labels=x[:, :-1]).loss.item() for _ in range(20)]))
    model.save_pretrained(out, safe_serialization=True)
    card = {"role": role, "parameters": params, "steps": steps, "batch": batch, "context": CONTEXT, "lr": lr,
            "seed": seed, "init": None if init is None else str(init),
            "distilled_from": None if teacher is None else str(teacher), "on_policy_windows": on_policy,
            "bf16_autocast": bf16,
            "seconds": round(time.time() - start, 1), "train_loss_last_100": float(np.mean(losses[-100:])),
            "held_out_bits_per_byte": held_loss / math.log(2), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "data": f"top-level *.py of the Python {platform.python_version()} standard library, "
                    f"every {HELD_OUT_EVERY}th file held out"}
    (out / "training.json").write_text(json.dumps(card, indent=2) + "\n")
    return card


def to_float16(folder: Path) -> None:
    """Re-save a checkpoint's weights in float16 (half the bytes; numpy reads float16, not bfloat16),
    noting it in its training.json: the shipped weights are the float16-rounded ones."""
    import torch
    import transformers

    model = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32)
    largest = max(float(p.abs().max()) for p in model.parameters())
    if largest >= 65504:
        raise SystemExit(f"{folder}: a weight of {largest} does not fit float16")
    model.to(torch.float16).save_pretrained(folder, safe_serialization=True)
    card = json.loads((folder / "training.json").read_text())
    card["saved_as"] = "float16 (rounded from the float32 weights trained)"
    (folder / "training.json").write_text(json.dumps(card, indent=2) + "\n")


def prompts(path: Path, count: int, seed: int, length: int = 96) -> None:
    """Prompts cut from held-out files at line starts: the first half calibrates, the second is held out."""
    _, _, held = corpus()
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(count):
        text = Path(held[i % len(held)]).read_bytes()
        starts = [j + 1 for j in range(len(text) - length - 1) if text[j] == 10 and text[j + 1] not in b"\n#"]
        start = int(starts[rng.integers(len(starts))])
        snippet = text[start:start + length].decode("utf-8", "replace")
        lines.append({"id": i, "split": "calibration" if i < count // 2 else "held-out",
                      "source": Path(held[i % len(held)]).name, "text": snippet})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def main() -> None:
    parser = argparse.ArgumentParser(description="Train the shipped tiny reference pair.")
    parser.add_argument("--role", choices=list(SHAPES))
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--init", type=Path, help="start from this checkpoint folder (fine-tune)")
    parser.add_argument("--distil-from", type=Path, help="teacher checkpoint: train on its soft labels (KL)")
    parser.add_argument("--on-policy", type=int, default=0,
                        help="with --distil-from: teacher-written windows making up half of every batch")
    parser.add_argument("--bf16", action="store_true", help="forwards under bfloat16 autocast (CPUs with avx512_bf16)")
    parser.add_argument("--prompts", type=Path, help="write the prompt set instead of training")
    parser.add_argument("--to-float16", type=Path, help="re-save this checkpoint folder in float16 instead of training")
    parser.add_argument("--count", type=int, default=64)
    args = parser.parse_args()
    if args.prompts:
        prompts(args.prompts, args.count, args.seed)
    elif args.to_float16:
        to_float16(args.to_float16)
    else:
        print(json.dumps(train(args.role, args.steps, args.out, args.seed, args.batch, args.lr,
                                    args.init, args.distil_from, args.on_policy, args.bf16), indent=2))


if __name__ == "__main__":
    main()
