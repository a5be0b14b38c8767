"""Issue 12: inputs that used to be ignored, defaulted or mangled silently now get one line and exit 2, a
warning, or a correct answer. Every case here was reproduced on the code before the fix."""

import json
import os
import stat
from pathlib import Path

import pytest

from dfvg_dse.acceptance import acceptance_warnings, expected_tokens
from dfvg_dse.specs import AcceptanceProfile
from dfvg_dse.tree import parse_tree_spec

from cli_checks import one_line_error as _one_line_error

CONFIGS = Path(__file__).parent / "catalog"
ESTIMATE = ["estimate", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--verify-device", "rtx-4090",
            "--draft-device", "v80"]



@pytest.mark.parametrize("option", ["--acceptance", "--tree", "--link", "--draft-device"])
def test_an_empty_option_is_refused_not_defaulted(run, option):
    args = [a for a in ESTIMATE if a not in ("--draft-device", "v80")] if option == "--draft-device" else ESTIMATE
    _one_line_error(run(*args, option, ""), option, "empty value")


def test_an_empty_argument_or_root_option_is_refused(run):
    _one_line_error(run("hw", "show", ""), "empty value")
    _one_line_error(run("--models-dir", "", "models", "list"), "--models-dir", "empty value")


def test_whitespace_is_a_value_not_an_empty_one(run):
    result = run("tree", "expected", "--acceptance", " 0.8", "--tree", "chain:2", "--json")
    assert result.exit_code == 0, result.stderr


def test_options_a_mode_does_not_read_are_refused(run):
    _one_line_error(run(*ESTIMATE, "--schedule", "ar", "--tree", "chain:4"), "--tree", "--schedule ar")
    _one_line_error(run(*ESTIMATE, "--tree", "chain:3", "--threshold", "0.2"), "--threshold", "--tree")
    _one_line_error(run(*ESTIMATE, "--dynamic", "eagle2", "--gamma", "4"), "--gamma", "--dynamic eagle2")
    _one_line_error(run("reference", "generate", "--mode", "ar", "--tree", "chain:4", "--prompt", "ab"),
                    "--tree", "--mode ar")
    _one_line_error(run("compare", "--preset", "dfvg-paper", "--target", "llama-2-7b"), "--target", "--preset")


def test_the_options_a_mode_reads_still_work(run):
    result = run(*ESTIMATE, "--dynamic", "eagle2", "--top-k", "4", "--rounds", "500", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["dynamic"]["top_k"] == 4


def test_bench_refuses_more_prompts_than_it_has(run):
    _one_line_error(run("reference", "bench", "--count", "1000"), "--count 1000", "32 prompts")


def test_cost_warns_when_the_model_does_not_fit(run):
    result = run("cost", "--model", "llama-2-70b", "--device", "rtx-4090", "--json")
    record = json.loads(result.stdout)
    assert not record["memory_fit"]["fits"]
    assert any("does not fit rtx-4090" in w for w in record["warnings"]), record["warnings"]
    fits = json.loads(run("cost", "--model", "llama-2-7b", "--device", "rtx-4090", "--json").stdout)
    assert fits["memory_fit"]["fits"] and fits["warnings"] == []


def test_an_empty_study_is_refused(run, tmp_path):
    study = tmp_path / "empty.toml"
    study.write_text("")
    _one_line_error(run("search", "--study", str(study), "--trials", "2"), "empty study")


def test_import_does_not_silently_shadow_a_shipped_model(run):
    config = str(CONFIGS / "config_qwen2_tiny.json")
    _one_line_error(run("models", "import", config, "--name", "qwen3-8b"), "--name qwen3-8b", "--force")
    assert run("models", "show", "qwen3-8b", "--json").exit_code == 0
    assert json.loads(run("models", "show", "qwen3-8b", "--json").stdout)["spec"]["n_layers"] == 36
    forced = run("models", "import", config, "--name", "qwen3-8b", "--force")
    assert forced.exit_code == 0, forced.stderr
    assert json.loads(run("models", "show", "qwen3-8b", "--json").stdout)["spec"]["family"] == "qwen2"


@pytest.mark.parametrize("command", [["compare", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--gpu", "v80"],
                                     ["sensitivity", "--vary", "batch", "--gpu", "v80"],
                                     ["compare", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--cpu", "rtx-4090"]])
def test_a_device_of_the_wrong_kind_is_refused(run, command):
    _one_line_error(run(*command), "not a")


def test_sensitivity_names_targets_that_do_not_fit_apart_from_losses(run):
    result = run("sensitivity", "--vary", "target", "--values", "qwen3-8b,qwen3-32b", "--rounds", "200", "--json")
    document = json.loads(result.stdout)
    assert set(document["infeasible"]) == {"qwen3-32b"} and "GB" in document["infeasible"]["qwen3-32b"]
    assert "infeasible at qwen3-32b" in document["crossover"] and "not at qwen3-32b" not in document["crossover"]
    text = run("sensitivity", "--vary", "target", "--values", "qwen3-8b,qwen3-32b", "--rounds", "200")
    assert "qwen3-32b: infeasible: target needs" in text.stdout


def test_sensitivity_keeps_the_estimates_warnings(run, hwdb_copy):
    """A verifier without a bf16 peak is costed at its fp16 rate; sensitivity says so, as estimate does."""
    gpu = hwdb_copy / "gpu" / "rtx-4090.toml"
    gpu.write_text("\n".join(line for line in gpu.read_text().splitlines() if not line.startswith("peak_bf16")))
    document = json.loads(run("--hwdb-dir", str(hwdb_copy), "sensitivity", "--vary", "batch", "--values", "1",
                              "--rounds", "200", "--json").stdout)
    assert any("rtx-4090 has no bf16 peak" in w for w in document["warnings"]), document["warnings"]
    assert json.loads(run("sensitivity", "--vary", "batch", "--values", "1", "--rounds", "200", "--json").stdout)[
        "warnings"] == []


def test_acceptance_warnings_are_printed_and_in_json(run):
    result = run("tree", "expected", "--acceptance", "0.7", "--tree", "kary:2x2", "--json")
    warnings = json.loads(result.stdout)["warnings"]
    assert len(warnings) == 1 and "4 of the tree's 6 draft tokens" in warnings[0]
    text = run("tree", "expected", "--acceptance", "0.1,0.5", "--tree", "chain:3")
    assert "rank 2 (0.5) is likelier than rank 1 (0.1)" in text.stderr
    estimate = json.loads(run(*ESTIMATE, "--acceptance", "0.7", "--tree", "kary:2x2", "--json").stdout)
    assert any("scalar acceptance" in w for w in estimate["warnings"])
    clean = json.loads(run(*ESTIMATE, "--acceptance", "0.6,0.2,0.1", "--tree", "kary:2x2", "--json").stdout)
    assert clean["warnings"] == []


@pytest.mark.parametrize("tree", ["kary:2x2", "kary:3x3", "seq:4x3", "choices:[[0],[1],[1,0],[1,0,0],[0,0]]"])
def test_a_scalar_acceptance_scores_a_tree_as_its_rank_one_chain(tree):
    """What the warning claims, checked by an independent computation: F(T) under alpha equals F of
    the tree's rank-0 path, and the warning counts exactly the nodes off that path."""
    spec = parse_tree_spec(tree)
    alpha = AcceptanceProfile("alpha 0.7", (0.7,))
    on_path = [i == 0 or (spec.ranks[i] == 0) for i in range(spec.n_nodes)]
    for i in range(1, spec.n_nodes):
        on_path[i] = on_path[i] and on_path[spec.parents[i]]
    depth = max((d for d, keep in zip(_depths(spec), on_path) if keep), default=0)
    assert expected_tokens(spec, alpha) == pytest.approx(expected_tokens(parse_tree_spec(f"chain:{depth}"), alpha))
    (warning,) = acceptance_warnings(alpha, spec)
    assert f"{spec.n_nodes - sum(on_path)} of the tree's {spec.budget} draft tokens" in warning


def _depths(spec):
    depths = [0] * spec.n_nodes
    for i in range(1, spec.n_nodes):
        depths[i] = depths[spec.parents[i]] + 1
    return depths


def test_a_missing_default_pair_says_pass_acceptance(run):
    result = run("estimate", "--target", "llama-2-13b", "--draft", "llama-160m", "--verify-device", "a100-80gb")
    _one_line_error(result, "no acceptance profile for llama-2-13b/llama-160m", "pass --acceptance")


def test_unknown_names_are_short_and_values_are_not_python_reprs(run):
    _one_line_error(run("hw", "show", "nope"), "unknown hardware entry 'nope'", "in all")
    result = run(*ESTIMATE, "--dynamic", "adapt", "--threshold", "1.5")
    _one_line_error(result, "threshold=1.5")
    assert "AdaptRule(" not in result.stderr


@pytest.mark.parametrize("plot", ["x.bmp", "x"])
def test_an_unsupported_plot_format_is_refused_before_the_work(run, tmp_path, plot):
    result = run("compare", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--plot", str(tmp_path / plot))
    _one_line_error(result, "unsupported format", ".png, .svg, .pdf")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_output_folders_are_created_and_files_follow_the_umask(run, tmp_path, umask):
    old = os.umask(umask)
    try:
        plot = tmp_path / "new" / "deeper" / "bars.svg"
        result = run("sensitivity", "--vary", "batch", "--values", "1,2", "--rounds", "200", "--plot", str(plot))
        assert result.exit_code == 0, result.stderr
        run_folder = tmp_path / "runs"
        assert run("sweep", "--results-dir", str(run_folder), "--run-id", "s").exit_code == 0
    finally:
        os.umask(old)
    written = [plot, run_folder / "s" / "manifest.json", run_folder / "s" / "pareto.csv", run_folder / "s" / "pareto.png"]
    for path in written:
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path
    assert not [p for p in plot.parent.iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_unwritable_places_are_one_line(run, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    _one_line_error(run("search", "--trials", "2", "--results-dir", str(afile)), "not a folder")
    _one_line_error(run("sweep", "--results-dir", "/dev/null"), "not a folder")
    _one_line_error(run("sweep", "--results-dir", str(afile / "sub")), "cannot create")
    _one_line_error(run("sensitivity", "--vary", "batch", "--plot", str(afile / "x.png")), "is not a folder")


def test_pareto_reads_a_sweep_and_export_says_why_it_cannot(run, tmp_path):
    assert run("sweep", "--results-dir", str(tmp_path), "--run-id", "s").exit_code == 0
    result = run("pareto", str(tmp_path / "s"), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["pareto_size"] >= 1
    _one_line_error(run("export", str(tmp_path / "s")), "a sweep run", "dfvg-dse search")


def test_depth_rows_are_checked_at_their_own_depth_and_measured_rises_pass():
    """depth_rank replaces rank_probs in the model, so a tree is checked against each depth's own row;
    a measured profile whose ranks rise (Sequoia's demo, p_9 > p_8) is not called a typo."""
    profile = AcceptanceProfile("two rows", (0.5, 0.3, 0.1), depth_rank=((0.6,), (0.6,)), source="a fit")
    (warning,) = acceptance_warnings(profile, parse_tree_spec("kary:3x1"))
    assert "2 of the tree's 3 draft tokens" in warning
    measured = AcceptanceProfile("measured", (0.6, 0.01, 0.02), source="a paper")
    assert acceptance_warnings(measured) == []
    typed = AcceptanceProfile("rank vector 0.3,0.1,0.2", (0.3, 0.1, 0.2), source="command line")
    assert "rank 3 (0.2) is likelier than rank 2 (0.1)" in acceptance_warnings(typed)[0]


def test_estimate_refuses_values_past_what_it_searches(run):
    _one_line_error(run(*ESTIMATE, "--budget", "128"), "--budget 128", "up to 64")
    _one_line_error(run(*ESTIMATE, "--dynamic", "eagle2", "--max-depth", "40"), "--max-depth 40", "up to 16")
    _one_line_error(run(*ESTIMATE, "--dynamic", "adapt", "--min-depth", "10", "--max-depth", "8"), "--min-depth 10")
    assert run(*ESTIMATE, "--budget", "32", "--max-depth", "8", "--json").exit_code == 0


def test_every_drafting_command_refuses_another_rules_options(run):
    _one_line_error(run("tree", "dynamic", "--acceptance", "0.8", "--rule", "eagle2", "--threshold", "0.1"),
                    "--threshold", "--rule eagle2")
    _one_line_error(run("reference", "generate", "--prompt", "ab", "--tree", "chain:3", "--top-k", "9"),
                    "--top-k", "a static tree")
    result = run("tree", "dynamic", "--acceptance", "0.8", "--rule", "eagle2", "--top-k", "4", "--rounds", "200",
                 "--json")
    assert result.exit_code == 0, result.stderr


def test_sensitivity_pair_messages(run):
    _one_line_error(run("sensitivity", "--vary", "batch", "--pair", "qwen3-8b"), "expected TARGET/DRAFT")
    _one_line_error(run("sensitivity", "--vary", "batch", "--pair", "llama-2-7b/qwen3-0.6b"), "choose a --pair")
    _one_line_error(run("sensitivity", "--vary", "batch", "--values", "1,2.5"), "expected integers")


def test_a_failed_forced_rerun_neither_loses_the_run_nor_blocks_the_next(run, tmp_path):
    assert run("sweep", "--results-dir", str(tmp_path), "--run-id", "s").exit_code == 0
    failed = run("sweep", "--results-dir", str(tmp_path), "--run-id", "s", "--force", "--compare", str(tmp_path / "x"))
    _one_line_error(failed, "no manifest.json")
    assert (tmp_path / "s" / "manifest.json").is_file()  # refused before the old run was touched
    (tmp_path / ".s.replaced").mkdir()  # as a rerun that died half-way leaves it: the last good run set aside
    again = run("sweep", "--results-dir", str(tmp_path), "--run-id", "s", "--force", "--json")
    assert again.exit_code == 0, again.stderr
    assert (tmp_path / "s" / "manifest.json").is_file() and not (tmp_path / ".s.replaced").exists()
    _one_line_error(run("sweep", "--results-dir", str(tmp_path), "--run-id", "t", "--compare", str(tmp_path / "s")),
                    "sweep --compare reads search runs")


def test_import_elsewhere_shadows_nothing(run, tmp_path):
    result = run("models", "import", str(CONFIGS / "config_qwen2_tiny.json"), "--name", "qwen3-8b", "--out-dir",
                 str(tmp_path))
    assert result.exit_code == 0, result.stderr
    assert json.loads(run("models", "show", "qwen3-8b", "--json").stdout)["spec"]["n_layers"] == 36


# Issue 13, items 9 and 10: seeds, non-finite floats and devices of the wrong kind are one line naming the option.
@pytest.mark.parametrize("command", [
    ESTIMATE + ["--tree", "chain:2"],
    ["tree", "dynamic", "--acceptance", "0.8", "--rounds", "100"],
    ["acceptance", "fit", "nosuch.jsonl", "-o", "out.toml"],
    ["reference", "generate", "--prompt", "ab", "--max-new-tokens", "2"],
    ["reference", "bench", "--count", "1", "--max-new-tokens", "2"],
], ids=lambda c: " ".join(c[:2]))
@pytest.mark.parametrize("seed", ["-1", str(2**32)])
def test_every_seed_is_0_to_2_32_minus_1(run, command, seed):
    _one_line_error(run(*command, "--seed", seed), "'--seed'", seed, "0<=x<=4294967295")


def test_the_largest_seed_works(run):
    result = run("tree", "dynamic", "--acceptance", "0.8", "--rounds", "100", "--seed", str(2**32 - 1), "--json")
    assert result.exit_code == 0, result.stderr


ADAPT = ESTIMATE + ["--dynamic", "adapt", "--rounds", "200"]
GENERATE = ["reference", "generate", "--prompt", "ab", "--max-new-tokens", "2"]


@pytest.mark.parametrize("command, option", [
    (["tree", "dynamic", "--acceptance", "0.8", "--rounds", "100"], "--threshold"),
    (["tree", "dynamic", "--acceptance", "0.8", "--rounds", "100"], "--temperature"),
    (ADAPT, "--threshold"), (ADAPT, "--temperature"),
    (ESTIMATE, "--attention-efficiency"), (ESTIMATE, "--sync-us"),
    (GENERATE, "--temperature"), (GENERATE, "--top-p"),
    (GENERATE + ["--dynamic", "adapt"], "--threshold"), (GENERATE + ["--dynamic", "adapt"], "--gumbel-temperature"),
    (["reference", "bench", "--count", "1"], "--temperature"),
], ids=lambda x: x if isinstance(x, str) else " ".join(x[:2]))
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_every_float_option_refuses_non_finite_values(run, command, option, value):
    _one_line_error(run(*command, option, value), f"'{option}'", value)


def test_every_float_option_is_finite_checked():
    """The float options of the command line all use the finite type (a new one cannot forget it)."""
    from dfvg_dse.cli import load_all_commands, cli
    from dfvg_dse.cli._base import FiniteFloatRange

    load_all_commands()
    commands = list(cli.commands.values())
    floats = []
    while commands:
        command = commands.pop()
        commands += list(getattr(command, "commands", {}).values())
        floats += [(command.name, p.name, p.type) for p in command.params if p.type.name in ("float", "float range")]
    assert len(floats) >= 10 and all(isinstance(kind, FiniteFloatRange) for _, _, kind in floats), floats


@pytest.mark.parametrize("command, option", [(["tree", "dynamic", "--acceptance", "0.8", "--rounds", "100"],
                                              "--temperature"), (GENERATE, "--temperature"),
                                             (GENERATE + ["--dynamic", "adapt"], "--gumbel-temperature")])
def test_a_temperature_too_small_to_divide_by_is_refused(run, command, option):
    """1e-320 divided into logits overflows: the answer was silently wrong (no draft token accepted)."""
    _one_line_error(run(*command, option, "1e-320"), f"'{option}'", "use 0 or at least 1e-05")
    assert run(*command, option, "1e-05").exit_code == 0


def test_sync_us_past_a_second_is_refused_and_a_second_is_infeasible_only_if_it_is(run):
    _one_line_error(run(*ESTIMATE, "--sync-us", "1e300"), "'--sync-us'", "0<=x<=1000000")
    result = json.loads(run(*ESTIMATE, "--tree", "chain:4", "--sync-us", "1e6", "--json").stdout)
    assert result["feasible"] and 0 < result["tokens_per_s"] < 5


@pytest.mark.parametrize("command, needles", [
    (["compare", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--cpu", "v80"],
     ["--cpu v80", "an FPGA", "not a CPU"]),
    (["compare", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--second-gpu", "v80"],
     ["--second-gpu v80", "an FPGA", "not a GPU"]),
    (["compare", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--fpga", "xeon-silver-4310"],
     ["--fpga xeon-silver-4310", "a CPU", "not an FPGA"]),
    (["estimate", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--verify-device", "v80"],
     ["--verify-device v80", "an FPGA", "not a GPU or CPU"]),
])
def test_a_device_in_the_wrong_role_names_option_device_and_kinds(run, command, needles):
    _one_line_error(run(*command), *needles)


# Issue 13 review: a byte that is not UTF-8 in a free-text option reached the file being written and
# the error named that file. Python hands such bytes over as lone surrogates (surrogateescape).
@pytest.mark.parametrize("args, option", [
    (["models", "import", str(CONFIGS / "config_llama_tiny.json"), "--name", "zz", "--source", "bad\udcffsrc"], "--source"),
    (["acceptance", "fit", "t.jsonl", "-o", "x.toml", "--name", "n\udcff"], "--name"),
    (["estimate", "--target", "q\udcff", "--verify-device", "rtx-4090", "--tree", "chain:2"], "--target"),
])
def test_text_that_is_not_utf8_is_refused_naming_the_option(run, tmp_path, args, option):
    args = [str(tmp_path / "out") if a == "x.toml" else a for a in args] + (
        ["--out-dir", str(tmp_path)] if args[0] == "models" else [])
    _one_line_error(run(*args), f"'{option}'", "is not UTF-8 text", "\\xff")
    assert list(tmp_path.iterdir()) == []


def test_a_file_name_that_is_not_utf8_is_read_and_written_as_text(run, tmp_path):
    config = tmp_path / "c\udcff.json"
    config.write_bytes((CONFIGS / "config_llama_tiny.json").read_bytes())
    result = run("models", "import", str(config), "--name", "zz", "--out-dir", str(tmp_path / "out"))
    assert result.exit_code == 0, result.stderr
    assert "c\ufffd.json" in (tmp_path / "out" / "zz.toml").read_text(encoding="utf-8")
