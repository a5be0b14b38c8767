"""Fitting profiles from traces recovers the profile that generated them."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from dfvg_dse.acceptance import check_round, fit_profile
from dfvg_dse.cli import cli
from dfvg_dse.specs import ConfidenceModel, InputError
from dfvg_dse.tree import kary

TRUE = ConfidenceModel(top1_mean=(0.75, 0.65), concentration=3.0, tail_shares=(0.5, 0.25))


def synthetic_trace(rounds: int, seed: int, model: ConfidenceModel = TRUE, calibrate=lambda q: q) -> list[dict]:
    """Draft a full 3-ary tree of depth 3 per round; the target picks child r with prob g(q_r)."""
    rng = np.random.default_rng(seed)
    tree = kary(3, 3)
    depths = tree.depths
    out = []
    for _ in range(rounds):
        conf = [1.0] * tree.n_nodes
        pick = {}
        for node in range(tree.n_nodes):
            kids = [i for i in range(tree.n_nodes) if tree.parents[i] == node]
            if not kids:
                continue
            q = model.sample(np.array(depths[node] + 1), rng)
            for kid in kids:
                conf[kid] = float(q[tree.ranks[kid]])
            g = calibrate(q)
            u, cum = rng.random(), np.cumsum(g)
            pick[node] = int(np.argmax(u < cum)) if u < cum[-1] else None
        path, node = [0], 0
        while pick.get(node) is not None:
            node = next(i for i in range(tree.n_nodes) if tree.parents[i] == node and tree.ranks[i] == pick[node])
            path.append(node)
        out.append({"parents": list(tree.parents), "ranks": list(tree.ranks), "confidences": conf, "accepted": path})
    return out


def test_fit_recovers_rank_vector_depth_rank_and_confidence():
    rounds = [check_round(r, i) for i, r in enumerate(synthetic_trace(3000, 0), 1)]
    result = fit_profile(rounds, "synthetic", "test", bootstrap=400, seed=1)
    p = result.profile
    # depth 1: E[q_1] = 0.75, E[q_2] = 0.25 x 0.5, E[q_3] = 0.25 x 0.25 (calibrated draft)
    expected_depth1 = np.array([0.75, 0.125, 0.0625])
    np.testing.assert_allclose(p.depth_rank[0], expected_depth1, atol=0.025)
    np.testing.assert_allclose(p.depth_rank[1], [0.65, 0.175, 0.0875], atol=0.03)
    assert np.all(result.ci_low <= np.array(p.rank_probs) + 1e-12)
    assert np.all(np.array(p.rank_probs) <= result.ci_high + 1e-12)
    assert result.ci_high[0] - result.ci_low[0] < 0.05
    c = p.confidence
    assert c.top1_mean[0] == pytest.approx(0.75, abs=0.02) and c.top1_mean[1] == pytest.approx(0.65, abs=0.02)
    assert c.concentration == pytest.approx(3.0, rel=0.25)
    np.testing.assert_allclose(c.tail_shares, [0.5, 0.25], atol=0.03)
    # calibrated draft: the isotonic fit of P(accept | q) stays near the diagonal
    grid = np.linspace(0.1, 0.9, 9)
    assert np.max(np.abs(c.accept_prob(grid) - grid)) < 0.12


def test_overconfident_draft_is_seen_by_the_calibration():
    raw = synthetic_trace(2000, 3, calibrate=lambda q: q * 0.6)
    fit = fit_profile([check_round(r, i) for i, r in enumerate(raw, 1)], "over", "test", bootstrap=10)
    assert fit.profile.confidence.accept_prob(0.8) == pytest.approx(0.48, abs=0.08)


def test_estimates_held_at_a_bound_are_named_in_the_warnings():
    # rank 0 accepted whenever it was drafted, rank 1 too (drafted alone): p_0 + p_1 = 2 is rescaled;
    # every top-1 confidence is 1: the Beta's moments give no concentration, the mean sits on 1
    alone = [{"parents": [-1, 0], "ranks": [0, r], "accepted": [0, 1]} for r in (0, 1)] * 20
    fit = fit_profile([check_round(r, i) for i, r in enumerate(alone, 1)], "edge", "test", bootstrap=10)
    assert sum(fit.profile.rank_probs) == pytest.approx(1.0)
    assert any(w.startswith("edge: rank vector sums to 2.0000") for w in fit.warnings)
    assert any("confidence concentration = 0.05 at its lower bound" in w for w in fit.warnings)
    assert fit_profile([check_round(r, i) for i, r in enumerate(synthetic_trace(400, 3), 1)], "ok", "test",
                       bootstrap=10).warnings == ()


def test_a_rescaled_rank_vector_keeps_intervals_that_hold_it(tmp_path):
    # p_0 = 10/11, p_1 = 1/1 sum past 1 and are rescaled: intervals of the raw ratios would not hold
    # the rescaled p_0, and the profile reader refuses such an interval (the file would not read back)
    rounds = [{"parents": [-1, 0], "ranks": [0, 0], "accepted": [0, 1]}] * 10
    rounds.append({"parents": [-1, 0, 0], "ranks": [0, 0, 1], "accepted": [0, 2]})
    fit = fit_profile([check_round(r, i) for i, r in enumerate(rounds, 1)], "few", "test", bootstrap=200)
    p = np.array(fit.profile.rank_probs)
    assert p.sum() == pytest.approx(1.0) and np.all(fit.ci_low <= p) and np.all(p <= fit.ci_high)
    trace = tmp_path / "few.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rounds))
    result = CliRunner().invoke(cli, ["acceptance", "fit", str(trace), "-o", str(tmp_path / "few.toml"),
                                      "--bootstrap", "200"])
    assert result.exit_code == 0, result.stderr
    shown = CliRunner().invoke(cli, ["acceptance", "show", str(tmp_path / "few.toml"), "--json"])
    assert shown.exit_code == 0 and json.loads(shown.stdout)["rank_probs"] == pytest.approx(list(p))


@pytest.mark.parametrize("raw, message", [
    ({"parents": [-1, 0], "ranks": [0, 0]}, "needs parents, ranks, accepted"),
    ({"parents": [-1, 2, 0], "ranks": [0, 0, 0], "accepted": [0]}, "parents must point to earlier nodes"),
    ({"parents": [-1, 0], "ranks": [0, 0], "accepted": [1]}, "accepted must be a root-first path"),
    ({"parents": [-1, 0], "ranks": [0, 0], "accepted": [0], "confidences": [1, 2]}, "confidences must lie in"),
])
def test_bad_trace_lines(raw, message):
    with pytest.raises(InputError, match=message):
        check_round(raw, 7)


def test_acceptance_fit_command_round_trip(tmp_path):
    trace = tmp_path / "run.jsonl"
    trace.write_text("\n".join(json.dumps(r) for r in synthetic_trace(400, 5)) + "\n")
    out = tmp_path / "fitted.toml"
    runner = CliRunner()
    result = runner.invoke(cli, ["acceptance", "fit", str(trace), "-o", str(out), "--bootstrap", "50", "--json"])
    assert result.exit_code == 0, result.stderr
    fitted = json.loads(result.stdout)
    assert fitted["rounds"] == 400 and fitted["ci_low"][0] <= fitted["rank_probs"][0] <= fitted["ci_high"][0]
    shown = json.loads(runner.invoke(cli, ["acceptance", "show", str(out), "--json"]).stdout)
    assert shown["rank_probs"] == fitted["rank_probs"]
    expected = runner.invoke(cli, ["tree", "expected", "--acceptance", str(out), "--tree", "kary:3x3", "--json"])
    assert json.loads(expected.stdout)["expected_tokens"] > 1
    again = runner.invoke(cli, ["acceptance", "fit", str(trace), "-o", str(out)])
    assert again.exit_code == 2 and "already exists" in again.stderr
    trace.write_text('{"parents": [-1]}\nnot json\n')
    bad = runner.invoke(cli, ["acceptance", "fit", str(trace), "-o", str(tmp_path / "x.toml")])
    assert bad.exit_code == 2 and "run.jsonl:2: not valid JSON" in bad.stderr
