"""Published serving measurements with and without speculation (issue 20, "Checked") against the
serving simulator: the rows' requests served as their source served them, the published acceptance
as input, nothing fitted."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from dfvg_dse.cli.engines import GENERIC, fit_inputs
from dfvg_dse.validation.engines import POOLED
from dfvg_dse.validation.fidelity import Budgets, verdicts
from dfvg_dse.validation.serving_anchors import batched_requests, served_subset, serving_prediction, serving_report


@pytest.fixture(scope="module")
def records(catalog):
    profiles = {e: catalog.engine(e) for e in catalog.engine_names()[1:]}
    profiles[POOLED] = profiles[GENERIC]
    inputs = fit_inputs(catalog)
    workloads = {r.workload: catalog.workload(r.workload) for s in inputs.sources if s.kind == "serving" for r in s.rows}
    return serving_report(inputs, profiles, workloads)


def test_the_subset_spreads_over_the_trace_and_each_request_is_served_batch_times(catalog):
    trace = catalog.workload("sd-bench-gsm8k")
    subset = served_subset(trace, 5)
    at = [0, 75, 150, 224, 299]  # rint(linspace(0, 299, 5))
    assert subset.prompt.values == tuple(trace.prompt.values[i] for i in at)
    assert subset.output.values == tuple(trace.output.values[i] for i in at)
    requests = batched_requests(subset, 3)
    assert list(requests.prompt_tokens[:6]) == [subset.prompt.values[0]] * 3 + [subset.prompt.values[1]] * 3
    assert not requests.arrival_s.any() and len(requests.output_tokens) == 15
    assert served_subset(trace, 10_000).prompt.values == trace.prompt.values  # never more than the trace


def test_every_serving_row_is_predicted_from_its_published_acceptance(records, catalog):
    rows = [r for s in catalog.measurements("serving") for r in s.rows]
    assert len(records) == len(rows) >= 16 and {r["batch"] for r in records} >= {1, 16, 64, 128}
    for r in records:
        # with a chain of 3 at i.i.d. alpha, tau = (1 - a^4) / (1 - a) (Leviathan et al., Eq. 1)
        a = r["alpha"]
        assert (1 - a ** 4) / (1 - a) == pytest.approx(r["mean_accepted_tokens"], abs=1e-4)
        # a round yields tau tokens at most once per verify: the speedup stays below tau, and above 0
        assert 0 < r["predicted_speedup"] < r["mean_accepted_tokens"]
        assert r["error"] == pytest.approx(r["predicted_speedup"] / r["published_speedup"] - 1)
    # the published curves fall with the batch, and so do the predicted ones (same workload)
    for workload in {r["workload"] for r in records}:
        mine = sorted((r for r in records if r["workload"] == workload), key=lambda r: r["batch"])
        assert [r["published_speedup"] for r in mine] == sorted((r["published_speedup"] for r in mine), reverse=True)
        predicted = [r["predicted_speedup"] for r in mine]
        assert predicted[0] > predicted[-1]


def test_the_check_is_the_serving_simulator_that_serve_sim_runs(run, catalog, tmp_path):
    """One row predicted two ways: through the anchors' code, and through `serve-sim` on a CSV trace of
    the same requests (each 16 times, all at time 0) with the acceptance alpha the row's tau gives."""
    row = next(r for s in catalog.measurements("serving") for r in s.rows if r.batch == 16)
    plain = catalog.with_engine("roofline")
    gpu = dataclasses.replace(plain.device(row.device), engine=catalog.engine(row.engine))
    predicted = serving_prediction(row, plain.model(row.target), None, gpu, catalog.workload(row.workload))
    subset = served_subset(catalog.workload(row.workload), row.requests)
    requests = batched_requests(subset, row.batch)
    trace = tmp_path / "trace.csv"
    trace.write_text("prompt_tokens,output_tokens,arrival_s\n" + "".join(
        f"{p},{o},0\n" for p, o in zip(requests.prompt_tokens, requests.output_tokens)))
    result = run("serve-sim", "--engine", row.engine, "--target", row.target, "--draft", "eagle3-llama-3.1-8b",
                 "--verify-device", row.device, "--tree", "chain:3", "--acceptance", f"{predicted['alpha']:.6f}",
                 "--workload", str(trace), "--max-batch", str(row.batch), "--baseline", "ar", "--json")
    assert result.exit_code == 0, result.output
    runs = {r["design"]: r for r in json.loads(result.stdout)["runs"]}
    cli = runs["design"]["throughput_tokens_per_s"] / runs["ar"]["throughput_tokens_per_s"]
    # the shipped head (models/heads, its checkpoint's shapes) and the anchors' published-layout head
    # differ only in small ways: the two speedups agree closely
    assert cli == pytest.approx(predicted["predicted_speedup"], rel=0.03)
    assert runs["ar"]["throughput_tokens_per_s"] == pytest.approx(predicted["ar_tokens_per_s"], rel=1e-6)


def test_the_serving_budget_gates(records):
    median = float(np.median([abs(r["error"]) for r in records]))
    assert not [b for b in verdicts([], [], Budgets(serving_median=median + 0.01), serving=records) if "serving" in b]
    broken = verdicts([], [], Budgets(serving_median=median - 0.01), serving=records)
    assert broken == [f"serving speedups under load: median |error| {median:.1%} > {median - 0.01:.0%}"]
