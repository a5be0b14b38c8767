"""Exports against the engines' own code (issue 15), marker `engines`: vLLM's and SGLang's argument
parsers and config objects built from the exported commands and keyword arguments (models replaced
by tiny checkpoints that transformers saves here), and SGLang's own draft-tree selection run on the
CPU with the exported steps, top-k and token budget.

The designs are those the issue names: the three picks and 20 random feasible trials of the
500-trial default search. Versions checked: vLLM 0.33.0 and SGLang 0.5.23 (hwdb/engine-support),
installed with `--no-deps` over CPU torch (.ci/run installs them when they fit in its time); each
test skips where its engine is not installed."""

import os
import shlex

import pytest

from dfvg_dse.catalog import Catalog
from dfvg_dse.pipeline.realise import topk_pool_tree
from dfvg_dse.specs import AcceptanceProfile
from dfvg_dse.specs.deploy import pool_size

pytestmark = pytest.mark.engines
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Tiny random Qwen3 target and draft (same vocabulary) saved by transformers: engines read only
    their configs here, so the exported Hugging Face names are swapped for these folders."""
    folder = tmp_path_factory.mktemp("tiny")
    for name, layers in (("target", 2), ("draft", 1)):
        config = transformers.Qwen3Config(vocab_size=256, hidden_size=64, intermediate_size=128,
                                          num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                          head_dim=16, max_position_embeddings=4096)
        torch.manual_seed(0)
        transformers.Qwen3ForCausalLM(config).save_pretrained(folder / name)
    return {"Qwen/Qwen3-8B": str(folder / "target"), "Qwen/Qwen3-0.6B": str(folder / "draft")}


def _local(argv: list[str], tiny: dict) -> list[str]:
    """The command with the Hugging Face names (also inside its JSON values) swapped for local folders."""
    for name, folder in tiny.items():
        argv = [a.replace(name, folder) for a in argv]
    return argv


def test_vllm_builds_its_configs_from_every_export(default_exports, tiny, monkeypatch):
    monkeypatch.setenv("VLLM_TARGET_DEVICE", "cpu")  # vLLM's CPU platform: this machine has no GPU
    pytest.importorskip("vllm")
    from vllm.config import ParallelConfig
    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    for name, export in default_exports["vllm"]:
        argv = shlex.split(export["command"])
        assert argv[:2] == ["vllm", "serve"], name
        args = parser.parse_args(_local(argv[2:], tiny))
        args.model = args.model_tag
        from_command = EngineArgs.from_cli_args(args)
        kwargs = {k: tiny.get(v, v) for k, v in export["llm_kwargs"].items() if k != "speculative_config"}
        spec = {k: tiny.get(v, v) for k, v in export["llm_kwargs"]["speculative_config"].items()}
        from_kwargs = EngineArgs(**kwargs, speculative_config=spec)  # what LLM(**llm_kwargs) builds
        realised = export["realised"]
        for engine_args in (from_command, from_kwargs):
            engine_args.skip_tokenizer_init = True
            model = engine_args.create_model_config()
            speculative = engine_args.create_speculative_config(model, ParallelConfig())
            assert speculative.method == "draft_model" and speculative.num_speculative_tokens == realised["depth"], name
            assert engine_args.max_num_seqs == realised["batch"] and model.max_model_len == export["llm_kwargs"][
                "max_model_len"], name
            assert str(model.dtype) == "torch." + export["llm_kwargs"]["dtype"], name
            assert str(speculative.draft_model_config.dtype) == "torch." + realised["draft_dtype"], name


def test_sglang_resolves_every_launch_command(default_exports, tiny):
    pytest.importorskip("sglang")
    from sglang.srt.arg_groups.model_override_base import resolved_view
    from sglang.srt.arg_groups.pipeline import run_resolution_pipeline
    from sglang.srt.server_args import prepare_server_args

    for name, export in default_exports["sglang"]:
        argv = shlex.split(export["command"])
        assert argv[:3] == ["python", "-m", "sglang.launch_server"], name
        server_args = prepare_server_args(_local(argv[3:], tiny) + ["--device", "cpu"])  # this machine has no GPU
        run_resolution_pipeline(server_args)  # SGLang's own checks and adjustments, as at launch
        view, realised = resolved_view(server_args), export["realised"]
        assert (view.speculative_num_steps, view.speculative_eagle_topk, view.speculative_num_draft_tokens) == \
            (realised["depth"], realised["topk"], realised["draft_tokens"] + 1), name
        assert view.max_running_requests == realised["batch"] and view.context_length == \
            export["server_args"]["context_length"], name


def sglang_selection(profile, steps: int, topk: int, verify_tokens: int) -> list[float]:
    """SGLang's draft-tree selection (select_top_k_tokens per step, then organize_draft_results) on
    the CPU, with the profile's rank probabilities as the draft's top-k probabilities; the scores
    of the draft tokens it verifies."""
    from sglang.srt.speculative.eagle_utils import organize_draft_results
    from sglang.srt.speculative.spec_utils import select_top_k_tokens

    probs = torch.tensor(profile.matrix(steps, topk), dtype=torch.float64)
    scores, hidden, trees = None, None, []
    for step in range(steps):
        rows = 1 if step == 0 else topk
        topk_p = probs[step].expand(rows, topk).clone()
        topk_index = torch.arange(rows * topk).view(rows, topk) + 1000 * step  # distinct token ids
        _, hidden, scores, tree_info = select_top_k_tokens(step, topk_p, topk_index, hidden, scores, topk)
        trees.append(tree_info)
    score_list, token_list, parents_list = zip(*trees)
    _, index, _ = organize_draft_results(list(score_list), list(token_list), list(parents_list), verify_tokens)
    pool = torch.cat(list(score_list), dim=1).flatten(1)
    return sorted(pool[0, index[0]].tolist())


def test_sglangs_own_selection_picks_the_tree_the_export_prices(default_exports):
    pytest.importorskip("sglang")
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # SGLang compiles a step function; CPU needs no compile
    profile = Catalog.open().acceptance("pair:qwen3-8b/qwen3-0.6b")
    trees = [c["realised"] for _, c in default_exports["sglang"] if c["realised"]["topk"] > 1]
    assert trees, "the default search's exports hold no SGLang tree"
    for realised in trees:
        steps, topk, tokens = realised["depth"], realised["topk"], realised["draft_tokens"]
        assert tokens <= pool_size(steps, topk)
        ours = _scores(profile, realised["parents"], realised["ranks"])
        assert sglang_selection(profile, steps, topk, tokens + 1) == pytest.approx(sorted(ours), abs=1e-12)
    with pytest.raises(RuntimeError):  # past the pool, SGLang's selection fails (issue 15's T15 export)
        sglang_selection(profile, 5, 2, pool_size(5, 2) + 2)


def _scores(profile, parents, ranks) -> list[float]:
    """Each draft token's path probability under the profile (the score SGLang ranks it by)."""
    depth, score = [0] * len(parents), [1.0] * len(parents)
    matrix = profile.matrix(max(1, len(parents)), max(ranks) + 1)
    for i in range(1, len(parents)):
        depth[i] = depth[parents[i]] + 1
        score[i] = score[parents[i]] * matrix[depth[i] - 1, ranks[i]]
    return score[1:]


RANKED = AcceptanceProfile("ranked", (0.55, 0.2, 0.1, 0.05), ((0.6, 0.2, 0.1, 0.05), (0.5, 0.25, 0.12, 0.04)))


@pytest.mark.parametrize("steps, topk, tokens", [(2, 2, 6), (3, 2, 7), (4, 3, 20), (5, 2, 18), (6, 4, 40)])
def test_sglangs_own_selection_equals_the_rule_we_price(steps, topk, tokens):
    pytest.importorskip("sglang")
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
    tree = topk_pool_tree(RANKED, steps, topk, tokens)
    assert sglang_selection(RANKED, steps, topk, tokens + 1) == pytest.approx(
        sorted(_scores(RANKED, list(tree.parents), list(tree.ranks))), abs=1e-12)


@pytest.fixture(scope="module")
def head_export(tmp_path_factory, tiny):
    """The knee of a search drafting with the EAGLE-3 head of Qwen3-8B, exported for vLLM and SGLang,
    and a tiny EAGLE-3 head folder (its config, llama layout, the tiny target's widths) for its repository."""
    import json
    from click.testing import CliRunner
    from dfvg_dse.cli import cli
    runs = tmp_path_factory.mktemp("head-runs")
    runner = CliRunner()
    assert runner.invoke(cli, ["search", "--target", "qwen3-8b", "--draft", "eagle3-qwen3-8b", "--acceptance", "0.8",
                               "--results-dir", str(runs), "--run-id", "h"]).exit_code == 0
    exports = {f: json.loads(runner.invoke(cli, ["export", str(runs / "h"), "--format", f, "--json"]).stdout)
               for f in ("vllm", "sglang")}
    head = tmp_path_factory.mktemp("tiny-head")
    (head / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "vocab_size": 256, "draft_vocab_size": 128, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16", "tie_word_embeddings": False}))
    return exports, {**tiny, "Tengyunw/qwen3_8b_eagle3": str(head)}


def test_vllm_builds_an_eagle3_config_from_a_head_export(head_export, monkeypatch):
    monkeypatch.setenv("VLLM_TARGET_DEVICE", "cpu")
    pytest.importorskip("vllm")
    from vllm.config import ParallelConfig
    from vllm.engine.arg_utils import EngineArgs

    exports, local = head_export
    export = exports["vllm"]
    kwargs = {k: local.get(v, v) for k, v in export["llm_kwargs"].items() if k != "speculative_config"}
    spec = {k: local.get(v, v) for k, v in export["llm_kwargs"]["speculative_config"].items()}
    engine_args = EngineArgs(**kwargs, speculative_config=spec)
    engine_args.skip_tokenizer_init = True
    speculative = engine_args.create_speculative_config(engine_args.create_model_config(), ParallelConfig())
    assert speculative.method == "eagle3" and speculative.num_speculative_tokens == export["realised"]["depth"]


def test_sglang_resolves_an_eagle3_launch_command(head_export):
    pytest.importorskip("sglang")
    from sglang.srt.arg_groups.model_override_base import resolved_view
    from sglang.srt.arg_groups.pipeline import run_resolution_pipeline
    from sglang.srt.server_args import prepare_server_args

    exports, local = head_export
    export = exports["sglang"]
    server_args = prepare_server_args(_local(shlex.split(export["command"])[3:], local) + ["--device", "cpu"])
    run_resolution_pipeline(server_args)
    view, realised = resolved_view(server_args), export["realised"]
    assert str(view.speculative_algorithm).upper().endswith("EAGLE3")
    assert (view.speculative_num_steps, view.speculative_eagle_topk) == (realised["depth"], realised["topk"])


@pytest.fixture(scope="module")
def lookup_exports(tmp_path_factory):
    """The knee of a search drafting Qwen3-8B by prompt lookup, exported for vLLM and SGLang."""
    import json
    from click.testing import CliRunner
    from dfvg_dse.cli import cli
    runs = tmp_path_factory.mktemp("lookup-runs")
    runner = CliRunner()
    assert runner.invoke(cli, ["search", "--target", "qwen3-8b", "--draft", "prompt-lookup", "--acceptance", "0.4",
                               "--results-dir", str(runs), "--run-id", "n"]).exit_code == 0
    return {f: json.loads(runner.invoke(cli, ["export", str(runs / "n"), "--format", f, "--json"]).stdout)
            for f in ("vllm", "sglang")}


def test_vllm_builds_an_ngram_config_from_a_lookup_export(lookup_exports, tiny, monkeypatch):
    monkeypatch.setenv("VLLM_TARGET_DEVICE", "cpu")
    pytest.importorskip("vllm")
    from vllm.config import ParallelConfig
    from vllm.engine.arg_utils import EngineArgs

    export = lookup_exports["vllm"]
    kwargs = {k: tiny.get(v, v) for k, v in export["llm_kwargs"].items() if k != "speculative_config"}
    engine_args = EngineArgs(**kwargs, speculative_config=dict(export["llm_kwargs"]["speculative_config"]))
    engine_args.skip_tokenizer_init = True
    speculative = engine_args.create_speculative_config(engine_args.create_model_config(), ParallelConfig())
    assert speculative.method == "ngram" and speculative.num_speculative_tokens == export["realised"]["depth"]
    lookup = Catalog.open().lookup_entry("prompt-lookup").spec
    assert (speculative.prompt_lookup_min, speculative.prompt_lookup_max) == (lookup.min_ngram, lookup.max_ngram)


def test_sglang_resolves_an_ngram_launch_command(lookup_exports, tiny):
    pytest.importorskip("sglang")
    from sglang.srt.arg_groups.model_override_base import resolved_view
    from sglang.srt.arg_groups.pipeline import run_resolution_pipeline
    from sglang.srt.server_args import prepare_server_args

    export = lookup_exports["sglang"]
    server_args = prepare_server_args(_local(shlex.split(export["command"])[3:], tiny) + ["--device", "cpu"])
    run_resolution_pipeline(server_args)
    view, realised = resolved_view(server_args), export["realised"]
    assert str(view.speculative_algorithm).upper().endswith("NGRAM")
    # SGLang's draft-token count includes the root; breadth 1 makes its trie walk a chain.
    assert view.speculative_num_draft_tokens == realised["depth"] + 1
    assert view.speculative_eagle_topk == 1


def test_vllm_builds_a_suffix_config_from_a_suffix_lookup_export(tmp_path, tiny, monkeypatch):
    """vLLM's own SpeculativeConfig (its suffix validation included) takes the exported suffix-decoding
    fields; arctic-inference, which vLLM imports only to run the proposer, is not installed here."""
    import json
    from click.testing import CliRunner
    from dfvg_dse.cli import cli

    monkeypatch.setenv("VLLM_TARGET_DEVICE", "cpu")
    pytest.importorskip("vllm")
    import vllm.config.speculative as speculative_module
    from vllm.config import ParallelConfig
    from vllm.engine.arg_utils import EngineArgs

    runner = CliRunner()
    assert runner.invoke(cli, ["search", "--target", "qwen3-8b", "--draft", "suffix-decoding", "--acceptance", "0.6",
                               "--results-dir", str(tmp_path), "--run-id", "s"]).exit_code == 0
    export = json.loads(runner.invoke(cli, ["export", str(tmp_path / "s"), "--format", "vllm", "--json"]).stdout)
    monkeypatch.setattr(speculative_module, "has_arctic_inference", lambda: True)
    kwargs = {k: tiny.get(v, v) for k, v in export["llm_kwargs"].items() if k != "speculative_config"}
    engine_args = EngineArgs(**kwargs, speculative_config=dict(export["llm_kwargs"]["speculative_config"]))
    engine_args.skip_tokenizer_init = True
    speculative = engine_args.create_speculative_config(engine_args.create_model_config(), ParallelConfig())
    lookup = Catalog.open().lookup_entry("suffix-decoding").spec
    assert speculative.method == "suffix" and speculative.num_speculative_tokens == export["realised"]["depth"]
    assert (speculative.suffix_decoding_max_tree_depth, speculative.suffix_decoding_max_spec_factor,
            speculative.suffix_decoding_min_token_prob) == (lookup.max_tree_depth, lookup.max_spec_factor,
                                                            lookup.min_token_prob)
    # the shipped parameters are vLLM's own defaults
    defaults = speculative_module.SpeculativeConfig.__dataclass_fields__
    assert defaults["suffix_decoding_max_tree_depth"].default == lookup.max_tree_depth
    assert defaults["suffix_decoding_max_spec_factor"].default == lookup.max_spec_factor
    assert defaults["suffix_decoding_min_token_prob"].default == lookup.min_token_prob
