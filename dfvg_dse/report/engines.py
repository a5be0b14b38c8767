"""Deployment artefacts for serving engines from a realised design (pure: data in, dicts out).

Field names and flags are those of the engines' own code at the release named in
hwdb/engine-support (vLLM `SpeculativeConfig` and `EngineArgs`; SGLang `ServerArgs`; transformers'
`AssistedCandidateGenerator`, which reads the assistant's own generation config; TensorRT-LLM's
`DraftTargetDecodingConfig` and `trtllm-serve`). Each export carries a command for people, the
keyword arguments for programs, the realised design and its price next to the searched one, and
what the engine cannot express.
"""

from __future__ import annotations

import json
import re
import shlex

from dfvg_dse.specs.model import LOOKUP_KINDS

FORMATS = ("json", "vllm", "sglang", "hf", "trtllm")
PROMPT = "def fibonacci(n):"  # the transformers snippet's example prompt


def hf_repo(source: str) -> str:
    """'https://huggingface.co/ORG/REPO/blob/main/config.json' -> 'ORG/REPO' (else the source itself)."""
    match = re.search(r"huggingface\.co/([^/]+/[^/]+)", source or "")
    return match.group(1) if match else source


def choices(parents: list[int], ranks: list[int]) -> list[list[int]]:
    """Medusa/EAGLE-style paths of a tree's draft tokens (root excluded)."""
    paths: list[list[int]] = [[]]
    for parent, rank in zip(parents[1:], ranks[1:]):
        paths.append(paths[parent] + [rank])
    return paths[1:]


def limits(design: dict, engine: str) -> list[str]:
    """What of the searched design no engine server expresses: a drafter elsewhere, overlap, ADAPT."""
    notes = []
    if design["draft_kind"] == "fpga":
        notes.append(f"{engine} cannot run the draft on an FPGA ('{design['draft_device']}'): the realised design "
                     f"drafts on the target's GPU ('{design['verify_device']}')")
    elif design["draft_device"] != design["verify_device"]:
        notes.append(f"{engine} runs draft and target in one server: the drafter on '{design['draft_device']}' moves "
                     f"to '{design['verify_device']}'")
    if design["schedule"] != "sequential":
        notes.append(f"{engine} drafts and verifies in turn: the '{design['schedule']}' schedule (drafting during "
                     "verification) becomes sequential")
    if design.get("dynamic"):
        notes.append("ADAPT's dynamic tree is not expressible: its expected shape stands in for it")
    return notes


def lookup_limits(engine: str, lookup: dict | None) -> list[str]:
    """How an engine's n-gram drafting differs from the searched lookup (matched sizes, the corpus)."""
    if not lookup:
        return []
    notes = {"sglang": "SGLang's NGRAM drafts from a trie of every request's recent tokens (up to 18 deep), not "
                       "only this sequence's last n-gram: priced with the lookup's acceptance profile",
             "trtllm": "TensorRT-LLM's NGram keeps a pool of pattern matches shared by the requests "
                       "(is_public_pool): priced with the lookup's acceptance profile"}
    if lookup.get("kind") == "suffix":
        notes = {"vllm": "vLLM's suffix proposer also keeps a global tree of past requests' outputs "
                         "(suffix_decoding_max_cached_requests, 10000 by default) and drafts a chain of its own "
                         "length each round, up to num_speculative_tokens: priced as the chain with the lookup's "
                         "acceptance profile"}
    out = [notes[engine]] if engine in notes else []
    if engine == "hf" and lookup.get("kind") == "ngram" and lookup["min_ngram"] > 1:
        out.append(f"transformers matches the last {lookup['max_ngram']} down to 1 token: the lookup's "
                   f"min_ngram {lookup['min_ngram']} becomes 1")
    return out


# The activation dtypes the engines' --dtype takes; narrower weights (a checkpoint stored in FP8) load
# with "auto", the dtype and quantisation coming from the checkpoint's own config.
ENGINE_DTYPES = ("float16", "bfloat16", "float32")


def engine_dtype(target_dtype: str) -> str:
    """The --dtype an engine is given for weights stored as `target_dtype`."""
    return target_dtype if target_dtype in ENGINE_DTYPES else "auto"


def _vllm(names: dict, settings: dict, realised: dict) -> dict:
    spec = {"method": names["method"] or "draft_model", **({"model": names["draft"]} if names["draft"] else {}),
            "num_speculative_tokens": realised["depth"]}
    lookup = names["lookup"] or {}
    if lookup.get("kind") == "ngram":  # vLLM's ngram proposer: the longest match of min..max tokens, its earliest occurrence
        spec |= {"prompt_lookup_min": lookup["min_ngram"], "prompt_lookup_max": lookup["max_ngram"]}
    if lookup.get("kind") == "suffix":  # vLLM's suffix proposer (Arctic Inference's trees): its suffix_decoding_* fields
        spec |= {f"suffix_decoding_{key}": lookup[key] for key in ("max_tree_depth", "max_spec_factor", "min_token_prob")}
    kwargs = {"model": names["target"], "dtype": settings["dtype"], "max_model_len": settings["max_len"],
              "max_num_seqs": realised["batch"], "tensor_parallel_size": settings["tensor_parallel"],
              "speculative_config": spec}
    command = ["vllm", "serve", names["target"], "--dtype", settings["dtype"], "--max-model-len",
               str(settings["max_len"]), "--max-num-seqs", str(realised["batch"]), "--tensor-parallel-size",
               str(settings["tensor_parallel"])]
    if settings.get("pipeline_parallel", 1) > 1:
        kwargs["pipeline_parallel_size"] = settings["pipeline_parallel"]
        command += ["--pipeline-parallel-size", str(settings["pipeline_parallel"])]
    if settings.get("expert_parallel", 1) > 1:  # vLLM spreads the experts over TP x DP ranks
        kwargs["enable_expert_parallel"] = True
        command += ["--enable-expert-parallel"]
    command += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    return {"command": shlex.join(command), "llm_kwargs": kwargs}


def _sglang(names: dict, settings: dict, realised: dict) -> dict:
    args = {"model_path": names["target"], "dtype": settings["dtype"], "context_length": settings["max_len"],
            "max_running_requests": realised["batch"], "tp_size": settings["tensor_parallel"],
            "speculative_algorithm": names["method"] or "STANDALONE",
            **({"speculative_draft_model_path": names["draft"]} if names["draft"] else {}),
            "speculative_num_steps": realised["depth"], "speculative_eagle_topk": realised["topk"],
            "speculative_num_draft_tokens": realised["draft_tokens"] + 1}  # SGLang counts the root
    if names["lookup"]:  # NGRAM sets topk to the BFS breadth and num_steps from the draft tokens itself
        del args["speculative_num_steps"], args["speculative_eagle_topk"]
        args |= {"speculative_ngram_min_bfs_breadth": 1, "speculative_ngram_max_bfs_breadth": 1}  # one chain
    if settings.get("pipeline_parallel", 1) > 1:
        args["pp_size"] = settings["pipeline_parallel"]
    if settings.get("expert_parallel", 1) > 1:
        args["ep_size"] = settings["expert_parallel"]
    command = ["python", "-m", "sglang.launch_server"]
    for key, value in args.items():
        command += ["--" + key.replace("_", "-"), str(value)]
    return {"command": shlex.join(command), "server_args": args}


def _hf_target_line(settings: dict) -> str:
    """The line loading the target: its dtype, on one GPU, or spread over a parallel verifier's GPUs
    by device_map="auto" (transformers places the layers)."""
    dtype = 'dtype="auto"' if settings["dtype"] == "auto" else f"dtype=torch.{settings['dtype']}"
    if settings.get("tensor_parallel", 1) * settings.get("pipeline_parallel", 1) > 1:
        return f'target = AutoModelForCausalLM.from_pretrained(TARGET, {dtype}, device_map="auto")'
    return f"target = AutoModelForCausalLM.from_pretrained(TARGET, {dtype}).to(DEVICE)"


def _hf_lookup(names: dict, settings: dict, realised: dict) -> dict:
    """Prompt lookup: no assistant; generate() drafts by matching the last 1..max_matching_ngram_size
    tokens (transformers' PromptLookupCandidateGenerator, longest first)."""
    generate = {"prompt_lookup_num_tokens": realised["depth"], "max_matching_ngram_size": names["lookup"]["max_ngram"],
                "do_sample": False, "max_new_tokens": settings["max_new_tokens"]}
    lines = ["import torch",
             "from transformers import AutoModelForCausalLM, AutoTokenizer",
             "",
             f"TARGET = {names['target']!r}",
             'DEVICE = "cuda" if torch.cuda.is_available() else "cpu"',
             "tokenizer = AutoTokenizer.from_pretrained(TARGET)",
             _hf_target_line(settings),
             f"inputs = tokenizer([{PROMPT!r}], return_tensors=\"pt\").to(DEVICE)  # one sequence: prompt lookup "
             "runs at batch 1",
             "output = target.generate(**inputs, " + ", ".join(f"{k}={v!r}" for k, v in generate.items()) + ")",
             "print(tokenizer.decode(output[0], skip_special_tokens=True))"]
    return {"python": "\n".join(lines) + "\n", "generate_kwargs": generate, "models": {"target": names["target"]}}


def _hf(names: dict, settings: dict, realised: dict) -> dict:
    if names["lookup"]:
        return _hf_lookup(names, settings, realised)
    assistant = {"num_assistant_tokens": realised["depth"], "num_assistant_tokens_schedule": "constant",
                 "assistant_confidence_threshold": 0.0}
    generate = {"do_sample": False, "max_new_tokens": settings["max_new_tokens"]}
    lines = ["import torch",
             "from transformers import AutoModelForCausalLM, AutoTokenizer",
             "",
             f"TARGET, DRAFT = {names['target']!r}, {names['draft']!r}",
             'DEVICE = "cuda" if torch.cuda.is_available() else "cpu"',
             "tokenizer = AutoTokenizer.from_pretrained(TARGET)",
             _hf_target_line(settings),
             f"assistant = AutoModelForCausalLM.from_pretrained(DRAFT, dtype=torch.{realised['draft_dtype']}).to(DEVICE)",
             "# assisted generation reads these from the assistant's own generation config, not from generate()"]
    lines += [f"assistant.generation_config.{k} = {v!r}" for k, v in assistant.items()]
    lines += [f"inputs = tokenizer([{PROMPT!r}], return_tensors=\"pt\").to(DEVICE)  # one sequence: assisted "
              "generation runs at batch 1",
              "output = target.generate(**inputs, assistant_model=assistant, "
              + ", ".join(f"{k}={v!r}" for k, v in generate.items()) + ")",
              "print(tokenizer.decode(output[0], skip_special_tokens=True))"]
    return {"python": "\n".join(lines) + "\n", "assistant_generation_config": assistant, "generate_kwargs": generate,
            "models": {"target": names["target"], "assistant": names["draft"]}}


def _trtllm_spec(names: dict, depth: int) -> dict:
    """TensorRT-LLM's speculative_config by its decoding_type (tensorrt_llm/llmapi/llm_args.py): a draft
    model (Draft_Target), an EAGLE-3 head run inside the target's engine (Eagle, one model), the
    target's own MTP layers (MTP: num_nextn_predict_layers sets max_draft_len) or n-gram matching."""
    method = names["method"] or "Draft_Target"
    if method == "Eagle3":
        return {"decoding_type": "Eagle", "max_draft_len": depth, "speculative_model": names["draft"],
                "eagle3_one_model": True}
    if method == "MTP":
        return {"decoding_type": "MTP", "num_nextn_predict_layers": depth}
    if method == "NGram":
        return {"decoding_type": "NGram", "max_draft_len": depth,
                "max_matching_ngram_size": names["lookup"]["max_ngram"]}
    return {"decoding_type": method, "max_draft_len": depth, "speculative_model": names["draft"]}


def _trtllm(names: dict, settings: dict, realised: dict) -> dict:
    spec = _trtllm_spec(names, realised["depth"])
    options = {"dtype": settings["dtype"], "max_batch_size": realised["batch"], "max_seq_len": settings["max_len"],
               "tensor_parallel_size": settings["tensor_parallel"], "speculative_config": spec}
    command = ["trtllm-serve", names["target"], "--backend", "pytorch", "--max_batch_size", str(realised["batch"]),
               "--max_seq_len", str(settings["max_len"]), "--tp_size", str(settings["tensor_parallel"])]
    if settings.get("pipeline_parallel", 1) > 1:
        options["pipeline_parallel_size"] = settings["pipeline_parallel"]
        command += ["--pp_size", str(settings["pipeline_parallel"])]
    if settings.get("expert_parallel", 1) > 1:
        options["moe_expert_parallel_size"] = settings["expert_parallel"]
        command += ["--ep_size", str(settings["expert_parallel"])]
    command += ["--extra_llm_api_options", settings["options_file"]]
    # JSON is YAML (1.2; PyYAML's safe_load reads it): the options file needs no YAML writer
    return {"command": shlex.join(command), "yaml": json.dumps(options, indent=2) + "\n",
            "options_file": settings["options_file"],
            "llm_kwargs": {"model": names["target"], **options}}


WRITERS = {"vllm": _vllm, "sglang": _sglang, "hf": _hf, "trtllm": _trtllm}


def engine_config(design: dict, fmt: str, support=None, realised: dict | None = None,
                  settings: dict | None = None) -> dict:
    """The export of one design. `json`: the design as searched. An engine: its artefacts for the
    realised design (`realised`: tree, depth, topk, draft_tokens, batch, draft_dtype, changes and
    its price), with the searched design's price beside it; `support` is the engine release."""
    if fmt == "json":
        return {"format": "dfvg-dse", **design, "choices": choices(design["parents"], design["ranks"])}
    if fmt not in WRITERS:
        raise ValueError(f"unknown format {fmt!r}")
    kind = design.get("drafter", "lm")  # a draft model, a draft head's kind or a lookup's (issue 18)
    # an MTP module is the target's own (the engines load it from the target's checkpoint); a lookup has none
    names = {"target": hf_repo(design["target_source"]),
             "draft": None if kind == "mtp" or kind in LOOKUP_KINDS else hf_repo(design["draft_source"]),
             "method": None if kind == "lm" else support.head_method(kind), "lookup": design.get("lookup")}
    artefacts = WRITERS[fmt](names, settings, realised)
    return {"engine": fmt, "engine_version": support.version, "display_name": support.display_name,
            "checked": support.checked, "checked_source": support.source, **artefacts,
            "searched": {"trial": design.get("trial"), "draft_device": design["draft_device"],
                         "verify_device": design["verify_device"], "schedule": design["schedule"],
                         "batch": design["batch"], "family": design["family"], "depth": design["depth"],
                         "draft_tokens": len(design["parents"]) - 1, **design.get("expected", {})},
            "realised": {k: v for k, v in realised.items() if k != "changes"},
            "changes": limits(design, support.display_name) + lookup_limits(fmt, names["lookup"])
            + list(realised["changes"])}


def realised_record(realised, est, cost_profile: str) -> dict:
    """A realised design (pipeline.realise.Realised) and its Estimate as the export's `realised` block."""
    tree = realised.tree
    record = {"family": "chain" if realised.topk == 1 else "sglang-topk", "depth": tree.depth, "topk": realised.topk,
              "draft_tokens": tree.budget, "parents": list(tree.parents), "ranks": list(tree.ranks),
              "batch": realised.batch, "draft_dtype": realised.draft_dtype, "draft_device": "same GPU",
              "schedule": "sequential", "cost_profile": cost_profile, "feasible": bool(est.feasible),
              "reason": est.reason, "warnings": list(est.warnings), "changes": list(realised.changes)}
    if est.feasible:
        record.update({"tokens_per_s": est.tokens_per_s, "tokens_per_s_per_sequence": est.tokens_per_s / realised.batch,
                       "j_per_token": est.energy.j_per_token, "usd_per_mtoken": est.energy.usd_per_mtoken,
                       "speedup_vs_ar": est.speedup_vs_ar, "expected_tokens_per_round": est.expected_tokens_per_round, "round_time_s": est.round_time_s})
    return record
