"""Deployment configs for serving engines from a chosen design (pure: dicts in, dicts out).

Field names follow the engines' own code and documentation (vLLM `vllm/config/speculative.py`
`SpeculativeConfig`; SGLang `python/sglang/srt/server_args.py`; transformers `GenerationConfig`;
TensorRT-LLM `tensorrt_llm/llmapi/llm_args.py`): vLLM `speculative_config` with
`num_speculative_tokens` equal to the tree's length and `speculative_token_tree` as a string of
tuples; SGLang's `--speculative-*` flags with `num_draft_tokens` counting the root and forced to
`num_steps + 1` when `eagle_topk` is 1; Hugging Face `generate` keyword arguments; TensorRT-LLM's
draft-target or choices configs. Each export lists what the engine cannot express.
"""

from __future__ import annotations

import re

FORMATS = ("json", "vllm", "sglang", "hf", "trtllm")


def hf_repo(source: str) -> str:
    """'https://huggingface.co/ORG/REPO/blob/main/config.json' -> 'ORG/REPO' (else the source itself)."""
    match = re.search(r"huggingface\.co/([^/]+/[^/]+)", source or "")
    return match.group(1) if match else source


def _choices(parents: list[int], ranks: list[int]) -> list[list[int]]:
    paths: list[list[int]] = [[]]
    for parent, rank in zip(parents[1:], ranks[1:]):
        paths.append(paths[parent] + [rank])
    return paths[1:]


def _is_chain(choices: list[list[int]]) -> bool:
    return all(path == [0] * len(path) for path in choices) and len({len(p) for p in choices}) == len(choices)


def _limits(design: dict, engine: str) -> list[str]:
    notes = []
    if design["draft_kind"] == "fpga":
        notes.append(f"{engine} cannot run the draft on an FPGA ('{design['draft_device']}'); deploy the draft on the "
                     "GPU, or run the FPGA drafter outside the engine")
    elif design["draft_device"] != design["verify_device"]:
        notes.append(f"{engine} runs draft and target in one server; a drafter on '{design['draft_device']}' needs a "
                     "separate process")
    if design["schedule"] != "sequential":
        notes.append(f"{engine} drafts and verifies in turn; the '{design['schedule']}' schedule (drafting during "
                     "verification) is not expressible")
    if design.get("dynamic"):
        notes.append("ADAPT's dynamic tree is not expressible; the expected shape is exported as a static tree")
    return notes


def engine_config(design: dict, fmt: str) -> dict:
    """The config for one engine. `design` holds target/draft names and sources, devices, schedule,
    the tree (parents, ranks) and the expected metrics."""
    choices = _choices(design["parents"], design["ranks"])
    depth = max((len(c) for c in choices), default=0)
    target, draft = hf_repo(design["target_source"]), hf_repo(design["draft_source"])
    if fmt == "json":
        return {"format": "dfvg-dse", **design, "choices": choices}
    if fmt == "vllm":
        spec = {"method": "draft_model", "model": draft, "num_speculative_tokens": len(choices)}
        notes = _limits(design, "vLLM")
        if not _is_chain(choices):
            spec["speculative_token_tree"] = "[" + ", ".join(
                "(" + ", ".join(map(str, c)) + ("," if len(c) == 1 else "") + ")" for c in choices) + "]"
            notes.append("speculative_token_tree needs a vLLM release whose drafter supports trees; check yours")
        return {"engine": "vllm", "target": target, "speculative_config": spec, "unsupported": notes}
    if fmt == "sglang":
        children: dict[int, int] = {}
        for parent in design["parents"][1:]:
            children[parent] = children.get(parent, 0) + 1
        topk = max(children.values(), default=1)
        tokens = depth + 1 if topk == 1 else len(choices) + 1  # topk = 1 forces num_steps + 1 (SGLang docs)
        notes = _limits(design, "SGLang")
        if topk > 1:
            notes.append("SGLang grows its own tree from top-k scores; only depth, top-k and the token budget carry over")
        flags = {"--model-path": target, "--speculative-algorithm": "STANDALONE",
                 "--speculative-draft-model-path": draft, "--speculative-num-steps": depth,
                 "--speculative-eagle-topk": topk, "--speculative-num-draft-tokens": tokens}
        return {"engine": "sglang", "flags": flags,
                "command": "python -m sglang.launch_server " + " ".join(f"{k} {v}" for k, v in flags.items()),
                "unsupported": notes}
    if fmt == "hf":
        notes = _limits(design, "transformers")
        if not _is_chain(choices):
            notes.append(f"assisted generation drafts one chain; the tree is reduced to {depth} tokens")
        return {"engine": "transformers", "model": target,
                "generate_kwargs": {"assistant_model": draft, "num_assistant_tokens": depth,
                                    "num_assistant_tokens_schedule": "constant"},
                "unsupported": notes}
    if fmt == "trtllm":
        notes = _limits(design, "TensorRT-LLM")
        if _is_chain(choices):
            return {"engine": "tensorrt-llm", "model": target, "DraftTargetDecodingConfig": {
                "max_draft_len": depth, "speculative_model": draft}, "unsupported": notes}
        notes.append("trees use Medusa/EAGLE choices, which need heads trained for the target, not a separate draft")
        return {"engine": "tensorrt-llm", "model": target,
                "EagleDecodingConfig": {"max_draft_len": depth, "eagle_choices": choices}, "unsupported": notes}
    raise ValueError(f"unknown format {fmt!r}")
