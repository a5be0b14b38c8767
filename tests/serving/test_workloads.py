"""Workloads: the shipped length summaries against their sources' means, the length laws against
sampling, and bad workload files as one line."""

import math

import numpy as np
import pytest

from cli_checks import one_line_error
from dfvg_dse.specs import SpecError
from dfvg_dse.specs.serving import BatchingSpec, LengthDistribution, LoadSpec

# Published means (tokens): Kwon et al., SOSP 2023 (vLLM), Fig. 11, ShareGPT input 161.31 / output 337.99;
# Qin et al., FAST 2025 (Mooncake), Table 2, Conversation avg input 12035 / output 343.
PUBLISHED_MEANS = {"sharegpt-vllm": (161.31, 337.99), "mooncake-conversation": (12035, 343)}


@pytest.mark.parametrize("name", ["sharegpt-vllm", "azure-conv-2023", "mooncake-conversation"])
def test_shipped_workloads_keep_their_sources_means(catalog, name):
    workload = catalog.workload(name)
    assert workload.source.startswith(("Kwon", "Patel", "Qin"))
    for law, published in zip((workload.prompt, workload.output), PUBLISHED_MEANS.get(name, (None, None))):
        if published is not None:
            assert law.mean == pytest.approx(published, abs=0.5)
        # the quantile table's piecewise-linear law keeps the mean within 4% (19 probabilities)
        assert law.expected() == pytest.approx(law.mean, rel=0.04)
        draws = law.sample(200_000, np.random.default_rng(0))
        assert draws.mean() == pytest.approx(law.expected(), rel=0.01)
        assert draws.min() >= law.values[0] and draws.max() <= law.values[-1]


def test_lognormal_lengths_have_their_mean_and_median():
    law = LengthDistribution("lognormal", 338.0, 271.0)
    draws = law.sample(400_000, np.random.default_rng(1))
    assert np.median(draws) == pytest.approx(271.0, rel=0.01)
    assert draws.mean() == pytest.approx(338.0, rel=0.01)
    assert law.sigma == pytest.approx(math.sqrt(2 * math.log(338 / 271)))


@pytest.mark.parametrize("kwargs,field", [
    ({"kind": "weibull", "mean": 3.0}, "kind"),
    ({"kind": "lognormal", "mean": 10.0, "median": 20.0}, "median"),
    ({"kind": "quantiles", "mean": 5.0, "probabilities": (0.0, 0.5), "values": (1, 9)}, "probabilities"),
    ({"kind": "quantiles", "mean": 5.0, "probabilities": (0.0, 1.0), "values": (9, 1)}, "tokens"),
    ({"kind": "empirical", "mean": 5.0, "values": ()}, "values"),
    ({"kind": "fixed", "mean": 1.4}, "mean"),
])
def test_bad_length_laws_are_refused(kwargs, field):
    with pytest.raises(SpecError) as err:
        LengthDistribution(**kwargs)
    assert err.value.field == field


def test_bad_loads_and_batching_are_refused():
    for bad in (dict(rate_per_s=0.0), dict(rate_per_s=1.0, duration_s=math.inf), dict(rate_per_s=1.0, slo_tpot_s=0.0)):
        with pytest.raises(SpecError):
            LoadSpec(**bad)
    for bad in (dict(max_batch=0), dict(chunk_tokens=-1), dict(kv_fraction=1.5)):
        with pytest.raises(SpecError):
            BatchingSpec(**bad)


_DESIGN = ["serve-sim", "--target", "llama-3.1-8b", "--verify-device", "h100-sxm", "--schedule", "ar",
           "--duration", "5"]


@pytest.mark.parametrize("text,needles", [
    ('name = "w"\nsource = "s"\ntag = "derived"\n[prompt]\nkind = "zipf"\nmean = 3\n[output]\nkind = "fixed"\nmean = 4\n',
     ["prompt.kind", "allowed"]),
    ('name = "w"\nsource = "s"\ntag = "derived"\n[prompt]\nkind = "fixed"\nmean = 3\n', ["output", "required"]),
    ('name = "w"\nsource = ""\ntag = "derived"\n[prompt]\nkind = "fixed"\nmean = 3\n[output]\nkind = "fixed"\nmean = 4\n',
     ["source"]),
    ('name = "w"\nsource = "s"\ntag = "derived"\n[prompt]\nkind = "quantiles"\nmean = 3\nprobabilities = [0, 0.5]\n'
     'tokens = [1, 5]\n[output]\nkind = "fixed"\nmean = 4\n', ["prompt.probabilities"]),
    ('name = "w"\nsource = "s"\ntag = "derived"\n[prompt]\nkind = "lognormal"\nmean = 3\n[output]\nkind = "fixed"\nmean = 4\n',
     ["prompt.median", "required"]),
    ('name = "w"\nsource = "s"\ntag = "derived"\n[trace]\nprompt_tokens = [3, 4]\noutput_tokens = [5]\n',
     ["trace.output_tokens", "pair"]),
    ('name = "w"\nsource = "s"\ntag = "derived"\n[trace]\nprompt_tokens = [3, 0]\noutput_tokens = [5, 6]\n',
     ["trace.prompt_tokens[1]", "whole number"]),
    ('name = "w"\nsource = "s"\ntag = "derived"\n[trace]\nprompt_tokens = [3]\noutput_tokens = [5]\narrival_s = [0]\n',
     ["trace.arrival_s", "unknown"]),
    ('name = "w"\nsource = "s"\ntag = "derived"\n[trace]\nprompt_tokens = [3]\noutput_tokens = [5]\n[prompt]\n'
     'kind = "fixed"\nmean = 3\n', ["prompt", "not both"]),
])
def test_a_bad_workload_file_is_one_line(run, tmp_path, text, needles):
    path = tmp_path / "w.toml"
    path.write_text(text)
    one_line_error(run(*_DESIGN, "--rate", "1", "--workload", str(path)), str(path), *needles)


@pytest.mark.parametrize("text,needles", [
    ("prompt,output\n3,4\n", ["prompt_tokens", "required column"]),
    ("prompt_tokens,output_tokens\n3,4\n5\n", [":3", "cells"]),
    ("prompt_tokens,output_tokens\n3,-4\n", [":2", "output_tokens"]),
    ("prompt_tokens,output_tokens\n3,4.5\n", [":2", "output_tokens", "whole number"]),
    ("prompt_tokens,output_tokens,arrival_s\n3,4,2.0\n3,4,1.0\n", [":3", "arrival_s", "previous"]),
    ("prompt_tokens,output_tokens\n", ["at least one request"]),
])
def test_a_bad_csv_trace_is_one_line(run, tmp_path, text, needles):
    path = tmp_path / "trace.csv"
    path.write_text(text)
    args = [*_DESIGN, "--workload", str(path)] + ([] if "arrival_s" in text else ["--rate", "1"])
    one_line_error(run(*args), str(path), *needles)


def test_a_trace_serves_its_own_arrivals(run, tmp_path):
    import json

    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,100,50\n0.5,200,20\n4.0,50,80\n")
    result = run(*_DESIGN, "--workload", str(path), "--json")
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    assert len(runs) == 1 and runs[0]["requests"] == 3
    one_line_error(run(*_DESIGN, "--workload", str(path), "--rate", "2"), "--rate", "arrival_s")
    one_line_error(run(*_DESIGN, "--workload", "sharegpt"), "unknown workload", "sharegpt-vllm")


# SpecDecode-Bench's profiled requests (github.com/SpecDecode-Bench/simulator @2fdccbd,
# data/llama3.1-8B/combined_*.jsonl): request counts and mean prompt / output tokens computed from
# the files' token-id lists when the workloads were made (models/workloads/sd-bench-*.toml notes)
TRACE_FILES = {"sharegpt": (310, 355.29, 740.18), "gsm8k": (300, 94.48, 165.37), "cnn": (300, 837.54, 322.15),
               "instructcoder": (500, 171.22, 250.33)}


@pytest.mark.parametrize("dataset", sorted(TRACE_FILES))
def test_a_trace_workload_keeps_its_requests_paired(catalog, dataset):
    workload = catalog.workload(f"sd-bench-{dataset}")
    count, prompt, output = TRACE_FILES[dataset]
    assert workload.paired and len(workload.prompt.values) == len(workload.output.values) == count
    assert workload.prompt.mean == pytest.approx(prompt, abs=0.01)
    assert workload.output.mean == pytest.approx(output, abs=0.01)
    assert workload.source.startswith("'Speculative Decoding: Performance or Illusion?'")


def test_a_trace_workload_serves_its_pairs_under_poisson_arrivals(run, tmp_path):
    import json

    path = tmp_path / "pairs.toml"
    path.write_text('name = "pairs"\nsource = "a test"\ntag = "derived"\n[trace]\nprompt_tokens = [100, 3000]\n'
                    'output_tokens = [7, 900]\n')
    document = json.loads(run(*_DESIGN, "--rate", "4", "--workload", str(path), "--json").stdout)
    assert document["workload"]["mean_prompt_tokens"] == 1550 and document["workload"]["mean_output_tokens"] == 453.5
    assert document["runs"][0]["requests"] > 5
