"""Draft heads (issue 18): parameter counts against the tensors their checkpoints hold, enumerated
name by name as the heads' own code builds them, and the head files' one-line errors."""

import dataclasses
import math

import pytest

from dfvg_dse.catalog import Catalog, CatalogError
from dfvg_dse.costs.heads import features_up_bytes, head_param_counts
from dfvg_dse.costs.work import param_counts


def _llama_layer(prefix: str, d: int, heads: int, kv: int, head_dim: int, ffn: int, qkv_in: int,
                 input_norm: bool = True) -> dict:
    """The tensors of one llama decoder layer (transformers' names), q/k/v reading `qkv_in` values."""
    tensors = {f"{prefix}.self_attn.q_proj.weight": (heads * head_dim, qkv_in),
               f"{prefix}.self_attn.k_proj.weight": (kv * head_dim, qkv_in),
               f"{prefix}.self_attn.v_proj.weight": (kv * head_dim, qkv_in),
               f"{prefix}.self_attn.o_proj.weight": (d, heads * head_dim),
               f"{prefix}.mlp.gate_proj.weight": (ffn, d), f"{prefix}.mlp.up_proj.weight": (ffn, d),
               f"{prefix}.mlp.down_proj.weight": (d, ffn),
               f"{prefix}.post_attention_layernorm.weight": (d,)}
    if input_norm:
        tensors[f"{prefix}.input_layernorm.weight"] = (d,)
    return tensors


def _count(tensors: dict) -> int:
    return sum(math.prod(shape) for shape in tensors.values())


@pytest.fixture(scope="module")
def catalog():
    return Catalog.open()


def test_eagle3_llama_3_1_8b_counts_its_checkpoint_tensors(catalog):
    """EAGLE-3's head (SafeAILab/EAGLE cnets.py; vLLM llama_eagle3.py): fc fuses three 4096-wide
    features, the midlayer's q/k/v read [embedding; fused] (8192), hidden_norm beside input_layernorm,
    a final norm and an lm_head over the 32,000-token draft vocabulary. d2t/t2d are index buffers
    (not parameters); the embedding is the target's."""
    d = 4096
    tensors = {"fc.weight": (d, 3 * d), **_llama_layer("midlayer", d, 32, 8, 128, 14336, qkv_in=2 * d),
               "midlayer.hidden_norm.weight": (d,), "norm.weight": (d,), "lm_head.weight": (32000, d)}
    counts = head_param_counts(catalog.head("eagle3-llama-3.1-8b"))
    assert counts.stored == _count(tensors) == 424_689_664
    assert counts.own_head == 32000 * d and counts.shared_head == 0
    assert counts.matmul_per_step == _count({k: v for k, v in tensors.items() if len(v) == 2})
    assert counts.feature_values == 3 * d  # the "3 x d_model x 2 bytes per accepted token"
    assert features_up_bytes(catalog.head("eagle3-llama-3.1-8b"), 4) == 4 * 3 * d * 2


def test_eagle_vicuna_7b_counts_its_checkpoint_tensors(catalog):
    """EAGLE-1's head: fc = Linear(2d, d) with a bias, one layer without input_layernorm (index 0),
    no final norm and no LM head of its own: 0.24B, as the EAGLE README lists it."""
    d = 4096
    tensors = {"fc.weight": (d, 2 * d), "fc.bias": (d,),
               **_llama_layer("layers.0", d, 32, 32, 128, 11008, qkv_in=d, input_norm=False)}
    head = catalog.head("eagle-vicuna-7b")
    counts = head_param_counts(head)
    assert counts.stored == _count(tensors) == 235_937_792
    assert round(counts.stored / 1e9, 2) == 0.24
    target = param_counts(catalog.model("vicuna-7b"))
    assert counts.shared_head == target.head and counts.own_head == 0  # drafts through Vicuna's lm_head
    assert counts.matmul_per_step == 2 * d * d + 4 * d * d + 3 * d * 11008 + target.head


def test_medusa_vicuna_7b_counts_its_checkpoint_tensors(catalog):
    """Medusa-1 (FasterDecoding/Medusa medusa_model.py): five heads, each a ResBlock (Linear d -> d with
    a bias) and a Linear(d, 32000) without one."""
    d, tensors = 4096, {}
    for i in range(5):
        tensors |= {f"{i}.0.linear.weight": (d, d), f"{i}.0.linear.bias": (d,), f"{i}.1.weight": (32000, d)}
    head = catalog.head("medusa-vicuna-7b")
    counts = head_param_counts(head)
    assert counts.stored == _count(tensors) == 739_266_560
    assert features_up_bytes(head, 7) == d * 2  # the last position's hidden state, once a round


def test_deepseek_v3_mtp_is_the_models_own_module(catalog):
    """The MTP head's stored count is the module `models show deepseek-v3` counts (13.46B with its
    copies of the embedding and head: the card's 14B); every step multiplies by the shared head."""
    target = catalog.model("deepseek-v3")
    counts = head_param_counts(catalog.head("deepseek-v3-mtp"))
    assert counts.stored == param_counts(target).mtp == 13_463_426_304
    assert counts.shared_head == 129280 * 7168 and counts.feature_values == 7168
    moe = target.moe  # one token's weights: eh_proj, MLA attention, router, 1 shared + 8 routed experts, head
    experts = (moe.n_shared + moe.experts_per_token) * 3 * 7168 * moe.d_expert
    assert counts.matmul_per_step > 2 * 7168 ** 2 + experts + counts.shared_head


@pytest.mark.parametrize("edit, message", [
    (("kind = \"eagle3\"", "kind = \"eagle9\""), "drafter.kind' = 'eagle9': allowed: eagle, eagle3, medusa, mtp"),
    (("target = \"llama-3.1-8b-instruct\"", "target = \"llama-9b\""), "drafter.target: unknown model 'llama-9b'"),
    (("hidden_size = 4096", "hidden_size = 2048"), "must equal the target's hidden size"),
    (("vocab_size = 128256", "vocab_size = 32000"), "config.vocab_size' = 32000: must equal the target's"),
    (("feature_layers = 3", "feature_layers = 40"), "feature_layers' = 40: must be in 1..32"),
    (("feature_layers = 3", "feature_layers = \"3\""), "drafter.feature_layers' = '3': must be an integer"),
    (("[drafter]", "[drafter]\nlayers = 2"), "drafter.layers' = 2: unknown key"),
    (("draft_vocab_size = 32000", "draft_vocab_size = 0"), "config.draft_vocab_size' = 0: must be an integer >= 1"),
])
def test_a_bad_head_file_is_one_line(models_copy, edit, message):
    path = models_copy / "heads" / "eagle3-llama-3.1-8b.toml"
    path.write_text(path.read_text().replace(*edit))
    with pytest.raises(CatalogError) as err:
        Catalog.open(models_dir=models_copy).head("eagle3-llama-3.1-8b")
    text = str(err.value)
    assert "\n" not in text and str(path) in text and message in text, text


def test_an_mtp_head_needs_a_target_with_a_module(models_copy):
    path = models_copy / "heads" / "deepseek-v3-mtp.toml"
    path.write_text(path.read_text().replace('target = "deepseek-v3"', 'target = "qwen3-8b"'))
    with pytest.raises(CatalogError, match="has no multi-token-prediction module"):
        Catalog.open(models_dir=models_copy).head("deepseek-v3-mtp")


def test_models_heads_and_show_from_the_command_line(run):
    listed = run("models", "heads", "--json")
    assert listed.exit_code == 0, listed.output
    import json
    records = {r["name"]: r for r in json.loads(listed.stdout)}
    assert {"eagle3-llama-3.1-8b", "eagle-vicuna-7b", "medusa-vicuna-7b", "deepseek-v3-mtp"} <= set(records)
    assert records["eagle3-llama-3.1-8b"]["features_up_bytes_per_accepted_token"] == 3 * 4096 * 2
    assert records["eagle3-llama-3.1-8b"]["weight_bytes_per_draft_step"] == 424_673_280 * 2
    shown = run("models", "show", "eagle3-qwen3-8b")
    assert shown.exit_code == 0 and "eagle3 head for qwen3-8b" in shown.stdout
    missing = run("models", "show", "eagle3-nope")
    assert missing.exit_code == 2 and "unknown model 'eagle3-nope'" in missing.output


# -- heads priced as drafts ---------------------------------------------------------------------

@pytest.mark.parametrize("name", ["eagle3-llama-3.1-8b", "eagle-vicuna-7b", "eagle3-qwen3-8b", "deepseek-v3-mtp",
                                  "medusa-vicuna-7b"])
def test_a_head_as_a_model_multiplies_by_the_weights_its_tensors_hold(catalog, name):
    """The cost model's view of a head (HeadSpec.as_model) multiplies every drafted token by exactly
    the weights the tensor enumerations above count: its layer, its input projections, its LM head
    (own or the target's); MoE heads by one token's share."""
    head = catalog.head(name)
    counts = param_counts(head.as_model())
    assert counts.active_matmul == head_param_counts(head).matmul_per_step
    assert head.as_model().feature_bytes_per_token == head_param_counts(head).feature_values * 2


@pytest.mark.parametrize("name", ["eagle3-llama-3.1-8b", "eagle-vicuna-7b", "eagle3-qwen3-8b", "medusa-vicuna-7b"])
def test_a_head_stores_its_own_tensors_beside_the_target_and_the_shared_ones_away(catalog, name):
    """Memory a head needs: on its target's GPU, exactly its own tensors (the enumerations above, at
    2 bytes; the target holds the embedding and any LM head they share); on another device, a copy of
    the shared tables too. The priced layer is a target layer, so vectors of d values differ (Medusa's
    five ResBlock biases, EAGLE-3's hidden_norm, EAGLE-1's missing input norm and its fc bias): within
    5 x 4096 parameters of the checkpoint."""
    from dfvg_dse.costs.work import stored_weight_bytes
    head = catalog.head(name)
    counts, model = head_param_counts(head), head.as_model()
    target = param_counts(catalog.model(head.target.name))
    shared = target.embedding * (name != "medusa-vicuna-7b") + counts.shared_head
    for stored, params in ((stored_weight_bytes(model, beside_target=True), counts.stored),
                           (stored_weight_bytes(model), counts.stored + shared)):
        assert abs(stored / 2 - params) <= 5 * 4096, (stored / 2, params)
    assert stored_weight_bytes(model) - stored_weight_bytes(model, beside_target=True) == 2 * shared


def test_medusa_drafts_a_round_in_one_forward(catalog):
    """Medusa's heads all read the root's hidden state: a round of any depth costs one forward over one
    token, where an EAGLE head pays one forward per level; Medusa-1 drafts at most 5 positions."""
    from dfvg_dse.costs.stages import tree_draft_time_s
    import numpy as np
    gpu = catalog.device("rtx-4090")
    medusa, eagle = catalog.head("medusa-vicuna-7b").as_model(), catalog.head("eagle-vicuna-7b").as_model()
    one, four = (tree_draft_time_s(medusa, gpu, np.array(w, dtype=float), 512)[0] for w in ([1.0], [1.0] * 4))
    assert float(four) == pytest.approx(float(one), rel=1e-12) and float(one) > 0
    e_one, e_four = (tree_draft_time_s(eagle, gpu, np.array(w, dtype=float), 512)[0] for w in ([1.0], [1.0] * 4))
    assert float(e_four) > 3.9 * float(e_one)
    assert medusa.max_draft_depth == 5 and eagle.max_draft_depth == 0


def test_a_feature_head_starts_each_round_over_the_tokens_it_accepted(catalog):
    """EAGLE's first draft step runs the tokens the last verification accepted (their target features
    arrive with the verdict): a forward of tau rows, then one per level; a draft model has cached its own
    accepted drafts and Medusa reads one hidden state, so theirs stay one row (docs/cost-model.md)."""
    from dfvg_dse.costs.forward import device_forward_cost
    from dfvg_dse.costs.stages import rereads_accepted_tokens, tree_draft_time_s
    import numpy as np
    for device in (catalog.device("rtx-4090"), catalog.device("v80")):
        eagle = catalog.head("eagle3-qwen3-8b").as_model()
        widths = np.array([1.0, 2.0, 2.0])
        priced = float(tree_draft_time_s(eagle, device, widths, 512, 1, 4.0)[0])
        by_hand = sum(float(device_forward_cost(eagle, device, rows, 512 + i, 1).time_s)
                      for i, rows in enumerate([4.0, 1.0, 2.0])) + device.draft_round_overhead_s
        assert priced == pytest.approx(by_hand, rel=1e-12)
        assert priced >= float(tree_draft_time_s(eagle, device, widths, 512, 1, 1.0)[0])
    assert rereads_accepted_tokens(catalog.head("deepseek-v3-mtp").as_model())
    for other in (catalog.model("qwen3-0.6b"), catalog.head("medusa-vicuna-7b").as_model()):
        assert not rereads_accepted_tokens(other)
        gpu = catalog.device("rtx-4090")
        assert float(tree_draft_time_s(other, gpu, [1.0, 2.0], 512, 1, 4.0)[0]) == \
            float(tree_draft_time_s(other, gpu, [1.0, 2.0], 512, 1, 1.0)[0])


def test_medusa_from_the_command_line(run):
    """Medusa is estimated on the GPU beside Vicuna (its optimal tree capped at its five heads), and
    refuses in one line a deeper tree or a dynamic rule (nothing to steer level by level)."""
    import json
    args = ["estimate", "--target", "vicuna-7b", "--draft", "medusa-vicuna-7b", "--verify-device", "rtx-4090",
            "--acceptance", "0.8"]
    best = run(*args, "--json")
    assert best.exit_code == 0, best.output
    record = json.loads(best.stdout)
    assert len(record["tree"]["parents"]) - 1 <= 5 and record["speedup_vs_ar"] > 1
    published = run(*args, "--tree", "published:medusa-mc-sim-7b-63", "--json")
    assert published.exit_code == 0 and json.loads(published.stdout)["speedup_vs_ar"] > 1
    for extra, message in ((["--tree", "chain:6"], "drafts at most 5 positions a round"),
                           (["--dynamic", "adapt"], "give a static tree")):
        refused = run(*args, *extra)
        assert refused.exit_code == 2 and refused.output.count("\n") == 1 and message in refused.output, refused.output


def test_a_head_streams_its_weights_once_per_draft_step(catalog):
    """Bytes one step of the EAGLE-3 head streams: its matmul tensors (enumerated above) and norms
    at the target's 2 bytes, never its embedding table (rows are gathered)."""
    from dfvg_dse.costs.work import streamed_weight_bytes
    head = catalog.head("eagle3-llama-3.1-8b")
    streamed = float(streamed_weight_bytes(head.as_model(), 1))
    assert streamed == pytest.approx(2 * head_param_counts(head).matmul_per_step, rel=1e-4)


def test_estimate_prices_a_head_and_sends_its_features_up_the_link(run):
    """EAGLE-3 for Qwen3-8B drafting on the V80: every accepted token sends 3 x 4096 x 2 B of target
    features up (plus its 16-byte record); drafting on the GPU itself, nothing crosses a link."""
    import json
    args = ["estimate", "--target", "qwen3-8b", "--draft", "eagle3-qwen3-8b", "--verify-device", "rtx-4090",
            "--acceptance", "0.8", "--tree", "chain:5", "--json"]
    fpga = json.loads(run(*args, "--draft-device", "v80").stdout)
    tokens = fpga["expected_tokens_per_round"]
    assert fpga["link"]["up_bytes"] == pytest.approx(tokens * (16 + 3 * 4096 * 2), rel=1e-9)
    assert fpga["link"]["down_bytes"] == pytest.approx(5 * 16)
    gpu = json.loads(run(*args, "--draft-device", "rtx-4090").stdout)
    assert gpu["link"] is None and gpu["expected_tokens_per_round"] == pytest.approx(tokens)
    assert not any("vocabular" in w for w in gpu["warnings"])  # a 32,000-row draft vocabulary is the head's own
    wrong = run("estimate", "--target", "qwen3-8b", "--draft", "eagle3-llama-3.1-8b", "--verify-device", "rtx-4090",
                "--acceptance", "0.8")
    assert wrong.exit_code == 2 and "drafts for llama-3.1-8b-instruct, not qwen3-8b" in wrong.output


def test_the_simulator_sends_the_same_features(catalog):
    """The discrete-event simulator's link traffic for a head agrees with the closed form."""
    from dfvg_dse.pipeline import estimate
    from dfvg_dse.sim import simulate
    from dfvg_dse.specs import AcceptanceProfile, DecodeConfig, SystemSpec
    from dfvg_dse.tree import parse_tree_spec
    target = catalog.model("qwen3-8b")
    draft = catalog.draft("eagle3-qwen3-8b", "qwen3-8b")
    system = SystemSpec(catalog.device("v80"), catalog.device("rtx-4090"), catalog.link("pcie-gen4-x16-host-staged"))
    config = DecodeConfig(target, system, draft, AcceptanceProfile("a", (0.8,)), tree=parse_tree_spec("chain:4"))
    closed, simulated = estimate(config), simulate(config, rounds=20000, seed=3)
    assert simulated.tokens_per_s == pytest.approx(closed.tokens_per_s, rel=0.01)
    no_features = DecodeConfig(target, system, dataclasses.replace(draft, feature_bytes_per_token=0),
                               AcceptanceProfile("a", (0.8,)), tree=parse_tree_spec("chain:4"))
    assert estimate(no_features).link["up_bytes"] < closed.link["up_bytes"] / 100


def test_a_search_drafts_with_a_head_and_exports_it_by_the_engines_own_method(run, tmp_path):
    """A head searched like a draft model (on the GPU and the V80) exports as the engines run heads:
    vLLM's method 'eagle3' with the head's repository, SGLang's EAGLE3 (hwdb/engine-support
    head_methods, read from the 0.33.0 and 0.5.23 wheels); an engine without a head method refuses in
    one line and writes nothing, never a draft-model config."""
    import json
    searched = run("search", "--target", "qwen3-8b", "--draft", "eagle3-qwen3-8b", "--acceptance", "0.8",
                   "--verify-device", "rtx-4090", "--draft-device", "rtx-4090", "--draft-device", "v80",
                   "--results-dir", str(tmp_path), "--run-id", "h", "--json")
    assert searched.exit_code == 0, searched.output
    picks = json.loads(searched.stdout)["recommended"]
    assert {p["draft_device"] for p in picks.values()} <= {"rtx-4090", "v80"}
    vllm = json.loads(run("export", str(tmp_path / "h"), "--pick", "knee", "--format", "vllm", "--json").stdout)
    spec = vllm["llm_kwargs"]["speculative_config"]
    assert spec["method"] == "eagle3" and spec["model"] == "Tengyunw/qwen3_8b_eagle3"
    sglang = json.loads(run("export", str(tmp_path / "h"), "--pick", "knee", "--format", "sglang", "--json").stdout)
    assert sglang["server_args"]["speculative_algorithm"] == "EAGLE3"
    refused = run("export", str(tmp_path / "h"), "--pick", "knee", "--format", "hf")
    assert refused.exit_code == 2 and "eagle3 head 'eagle3-qwen3-8b'" in refused.output
    assert not list((tmp_path / "h").glob("export-knee.hf*"))
    ours = run("export", str(tmp_path / "h"), "--pick", "knee", "--format", "json", "--json")
    assert ours.exit_code == 0 and json.loads(ours.stdout)["drafter"] == "eagle3"


def test_an_mtp_head_exports_without_a_draft_model(run, tmp_path):
    """DeepSeek-V3's MTP module is the target's own: vLLM's 'mtp' and SGLang's NEXTN take no draft path."""
    import json
    searched = run("search", "--target", "deepseek-v3", "--draft", "deepseek-v3-mtp", "--acceptance", "0.8",
                   "--verify-device", "8xh200", "--draft-device", "8xh200", "--results-dir", str(tmp_path),
                   "--run-id", "m", "--json")
    assert searched.exit_code == 0, searched.output
    vllm = json.loads(run("export", str(tmp_path / "m"), "--format", "vllm", "--json").stdout)
    assert vllm["llm_kwargs"]["speculative_config"]["method"] == "mtp"
    assert "model" not in vllm["llm_kwargs"]["speculative_config"]
    sglang = json.loads(run("export", str(tmp_path / "m"), "--format", "sglang", "--json").stdout)["server_args"]
    assert sglang["speculative_algorithm"] == "NEXTN" and "speculative_draft_model_path" not in sglang
    trtllm = json.loads(run("export", str(tmp_path / "m"), "--format", "trtllm", "--json").stdout)
    # llm_args.py MTPDecodingConfig: num_nextn_predict_layers sets max_draft_len; the module is the target's
    assert json.loads(trtllm["yaml"])["speculative_config"] == {"decoding_type": "MTP",
                                                                 "num_nextn_predict_layers": trtllm["realised"]["depth"]}


@pytest.mark.parametrize("methods, message", [
    ('{ eagle4 = "eagle4" }', "head_methods.eagle4' = 'eagle4': kinds: eagle, eagle3, medusa, mtp, ngram"),
    ('{ eagle3 = 3 }', "must be a table of head kind"),
    ('"eagle3"', "must be a table of head kind"),
])
def test_a_bad_head_method_is_one_line(hwdb_copy, methods, message):
    path = hwdb_copy / "engine-support" / "vllm.toml"
    text = path.read_text()
    start = text.index("head_methods = ")
    path.write_text(text[:start] + f"head_methods = {methods}" + text[text.index("\n", start):])
    with pytest.raises(CatalogError) as err:
        Catalog.open(hwdb_dir=hwdb_copy).engine_support("vllm", None)
    assert "\n" not in str(err.value) and message in str(err.value) and str(path) in str(err.value), str(err.value)


def test_drafters_places_each_drafter_and_agrees_with_compare(run):
    """`drafters` is compare's sps, amusd and dfvg rows for each drafter, side by side: the same numbers
    as `compare` for that drafter, and the winner is the fastest feasible placement."""
    import json
    table = json.loads(run("drafters", "--target", "qwen3-8b", "--drafter", "qwen3-0.6b=0.8",
                           "--drafter", "eagle3-qwen3-8b=0.8", "--json").stdout)
    rows = {r["drafter"]: r for r in table["drafters"]}
    for name, row in rows.items():
        compared = {s["name"]: s for s in json.loads(run("compare", "--target", "qwen3-8b", "--draft", name,
                                                         "--acceptance", "0.8", "--json").stdout)["scenarios"]}
        for placement in ("sps", "amusd", "dfvg"):
            assert row[placement]["tokens_per_s"] == pytest.approx(compared[placement]["tokens_per_s"], rel=1e-9)
        speeds = {p: row[p]["tokens_per_s"] for p in ("sps", "amusd", "dfvg")}
        assert row["fastest"] == max(speeds, key=speeds.get)
    assert rows["eagle3-qwen3-8b"]["kind"] == "eagle3" and rows["qwen3-0.6b"]["kind"] == "lm"
    # a one-layer head on the GPU beats the 28-layer model there, at equal acceptance
    assert rows["eagle3-qwen3-8b"]["sps"]["tokens_per_s"] > rows["qwen3-0.6b"]["sps"]["tokens_per_s"]
    bad = run("drafters", "--target", "qwen3-8b", "--drafter", "=0.8")
    assert bad.exit_code == 2 and "give NAME or NAME=ACCEPTANCE" in bad.output


def test_the_speculative_checks_price_eagle_heads_in_their_published_layout(catalog):
    """validate --anchors prices an EAGLE-3 row's head as the shipped head file counts it (the tensors
    enumerated above), and an EAGLE-2 row's as EAGLE-1's layout over Vicuna's widths."""
    from dfvg_dse.validation.fidelity import head_model
    eagle3 = head_model(catalog.model("llama-3.1-8b"), "eagle3")
    assert param_counts(eagle3).matmul == head_param_counts(catalog.head("eagle3-llama-3.1-8b")).matmul_per_step
    eagle2 = head_model(catalog.model("vicuna-7b"), "eagle2")
    assert param_counts(eagle2).matmul == head_param_counts(catalog.head("eagle-vicuna-7b")).matmul_per_step


# -- what the review of issue 18's first increments found -----------------------------------------

def test_a_head_never_drafts_during_verification(run, tmp_path):
    """A head conditions on the features of the tokens a verification accepts: overlap is refused in
    estimate, infeasible in a sweep, and compare's overlapped placements run a head in turn."""
    import json
    refused = run("estimate", "--target", "qwen3-8b", "--draft", "eagle3-qwen3-8b", "--verify-device", "rtx-4090",
                  "--draft-device", "v80", "--acceptance", "0.8", "--schedule", "overlap")
    assert refused.exit_code == 2 and "drafts after verification" in refused.output
    swept = run("sweep", "--target", "qwen3-8b", "--draft", "eagle3-qwen3-8b", "--acceptance", "0.8",
                "--results-dir", str(tmp_path), "--run-id", "s", "--save-grid", "--json")
    assert swept.exit_code == 0, swept.output
    import pandas as pd
    grid = pd.read_csv(tmp_path / "s" / "grid.csv")
    overlapped = grid["schedule"] != "sequential"
    assert overlapped.any() and not grid.loc[overlapped, "feasible"].any()
    assert grid.loc[overlapped, "reason"].str.contains("drafts after verification").all()
    rows = {s["name"]: s for s in json.loads(run("compare", "--target", "qwen3-8b", "--draft", "eagle3-qwen3-8b",
                                                 "--acceptance", "0.8", "--json").stdout)["scenarios"]}
    assert rows["amusd"]["schedule"] == "sequential" and rows["dfvg"]["schedule"] == "sequential"


def test_review_refusals_are_one_line(run, tmp_path):
    varied = run("sensitivity", "--vary", "target", "--pair", "qwen3-8b/eagle3-qwen3-8b", "--acceptance", "0.8",
                 "--values", "qwen3-8b,llama-3.1-8b")
    assert varied.exit_code == 2 and "drafts only for its own target" in varied.output
    empty = run("drafters", "--target", "qwen3-8b", "--drafter", "qwen3-0.6b=")
    assert empty.exit_code == 2 and "NAME=ACCEPTANCE" in empty.output
    unfit = run("drafters", "--target", "qwen3-8b", "--drafter", "qwen3-0.6b=0.8", "--batch", "4096")
    assert unfit.exit_code == 0 and "AR infeasible" in unfit.stdout
    import json
    assert run("search", "--target", "qwen3-8b", "--draft", "eagle3-qwen3-8b", "--acceptance", "0.8",
               "--results-dir", str(tmp_path), "--run-id", "h").exit_code == 0
    every = run("export", str(tmp_path / "h"), "--pick", "knee", "--format", "all")
    assert every.exit_code == 0 and "Hugging Face transformers run no method for eagle3 heads" in every.stderr
    assert {p.name for p in (tmp_path / "h").glob("export-knee*")} == {
        "export-knee.vllm.json", "export-knee.sglang.json", "export-knee.trtllm.json", "export-knee.trtllm.yaml"}
    eagle = json.loads((tmp_path / "h" / "export-knee.trtllm.yaml").read_text())["speculative_config"]
    assert eagle["decoding_type"] == "Eagle" and eagle["eagle3_one_model"] is True  # llm_args.py EagleDecodingConfig
    assert eagle["speculative_model"] == "Tengyunw/qwen3_8b_eagle3"
    trial = int(json.loads((tmp_path / "h" / "recommended.json").read_text())["knee"]["trial"])
    by_trial = json.loads(run("export", str(tmp_path / "h"), "--trial", str(trial), "--format", "vllm",
                              "--json").stdout)
    assert by_trial["llm_kwargs"]["speculative_config"]["method"] == "eagle3"
    manifest = tmp_path / "h" / "manifest.json"
    document = json.loads(manifest.read_text())
    document["space"]["cost"] = ["x"]
    manifest.write_text(json.dumps(document))
    broken = run("pareto", str(tmp_path / "h"))
    assert broken.exit_code == 2 and "space.cost" in broken.output and broken.output.count("\n") == 1


def test_a_searched_head_keeps_its_targets_dtypes(run, tmp_path):
    """DeepSeek-V3's MTP module is FP8 like its target: a sweep prices it as `estimate` does."""
    import json
    study = tmp_path / "mtp.toml"
    study.write_text('[models]\ntarget = "deepseek-v3"\ndraft = "deepseek-v3-mtp"\nacceptance = "0.8"\n'
                     '[hardware]\nverify_devices = ["8xh200"]\ndraft_devices = ["8xh200"]\n'
                     '[space]\nfamilies = ["chain"]\ndepths = [6]\nbatches = [1]\n')
    swept = json.loads(run("sweep", "--study", str(study), "--results-dir", str(tmp_path), "--json").stdout)
    estimated = json.loads(run("estimate", "--target", "deepseek-v3", "--draft", "deepseek-v3-mtp", "--verify-device",
                               "8xh200", "--acceptance", "0.8", "--tree", "chain:6", "--json").stdout)
    assert swept["max_tokens_per_s_per_sequence"] == pytest.approx(estimated["tokens_per_s"], rel=1e-9)
