"""The two-process runtime: messages on the link, both schedules against in-process decoding, link
emulation, errors as one line, and clean shutdown (Ctrl-C, a killed parent: no orphans)."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from dfvg_dse.catalog import Catalog
from dfvg_dse.costs.link import link_time
from dfvg_dse.reference import (TOKEN_RECORD_BYTES, Drafter, Model, ReferenceConfig, Sampling, Verifier,
                                generate_ar, generate_speculative, random_weights)
from dfvg_dse.reference.stages import (Job, LinkEmulation, StageError, TwoStageRuntime, decode_tree, decode_verdict,
                                       encode_tree, encode_verdict)
from dfvg_dse.specs import ModelSpec
from dfvg_dse.specs.decoding import AdaptRule

TARGET = ModelSpec(name="t", family="llama", n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, head_dim=8, d_ffn=64,
                   vocab_size=24, max_positions=512)
DRAFT = ModelSpec(name="d", family="llama", n_layers=1, d_model=16, n_heads=2, n_kv_heads=2, head_dim=8, d_ffn=32,
                  vocab_size=24, max_positions=512)
CHAIN = ((-1, 0, 1, 2), (0, 0, 0, 0))
KARY = ((-1, 0, 0, 1, 1, 2, 2), (0, 0, 1, 0, 1, 0, 1))


@pytest.fixture(scope="module")
def pair():
    return (Model(random_weights(TARGET, seed=1, scale=0.3), ReferenceConfig(TARGET)),
            Model(random_weights(DRAFT, seed=2, scale=0.3), ReferenceConfig(DRAFT)))


@pytest.fixture(scope="module")
def runtime(pair):
    with TwoStageRuntime(*pair) as rt:
        yield rt


def test_tree_and_verdict_messages_round_trip(pair):
    target, draft = pair
    sampling = Sampling(temperature=0.8, top_p=0.9)
    tree = Drafter(draft.fresh(), KARY, sampling, seed=4).propose([3, 1, 4])
    back, t0, t1, sent = decode_tree(encode_tree(tree, 1.5, 2.5), tree.tokens[0])
    assert (t0, t1) == (1.5, 2.5) and sent > 0
    assert back.tokens == tree.tokens and back.parents == tree.parents and back.ranks == tree.ranks
    np.testing.assert_allclose(back.confidences, tree.confidences, rtol=1e-6)  # float32 on the wire
    assert back.sampled and sorted(back.dists) == sorted(tree.dists) == [0, 1, 2]
    for node in tree.dists:  # the drafter sampled from the float16 q the link carries: identical
        np.testing.assert_array_equal(back.dists[node], tree.dists[node])
    # 16-byte records: 6 draft tokens, plus q (float16 x vocabulary) for each of 3 sampled parents
    assert tree.link_bytes() == 6 * TOKEN_RECORD_BYTES + 3 * 2 * 24
    verdict = Verifier(target.fresh(), sampling, seed=5)
    verdict.start([3, 1, 4])
    v = verdict.verify(tree)
    got, tokens, _ = decode_verdict(encode_verdict(tree, v))
    assert got == v and tokens == [tree.tokens[i] for i in v.path[1:]] + [v.bonus]
    assert v.link_bytes() == TOKEN_RECORD_BYTES * len(v.path)


def test_link_emulation_matches_the_analytical_link_time():
    catalog = Catalog.open()
    for name in ("pcie-gen4-x16-p2p", "pcie-gen3-x8-host-staged", "ethernet-100g-rdma"):
        spec = catalog.link(name)
        for n_bytes in (16, 4096, 10**6):
            assert LinkEmulation.from_spec(spec).delay_s(n_bytes) == pytest.approx(
                float(link_time(spec, n_bytes).time_s), rel=1e-9)


@pytest.mark.parametrize("rule", [CHAIN, KARY, AdaptRule(threshold=0.05, k_max=2, budget=5, min_depth=2)])
@pytest.mark.parametrize("schedule", ["sequential", "overlap"])
def test_two_processes_decode_greedy_exactly(runtime, pair, rule, schedule):
    target, _ = pair
    for prompt in ([1, 2, 3], [7], [5, 9, 11, 2, 2]):
        result = runtime.run(Job(tuple(prompt), 20, rule, schedule=schedule, trace=True))
        assert result.tokens == generate_ar(target.fresh(), prompt, 20)
        assert len(result.trace) == result.rounds and result.seconds > 0
        if schedule == "overlap":
            assert result.overlap_hits + result.overlap_misses == result.rounds - 1
        for record in result.trace:  # stages in order within a round
            assert record["draft_start_s"] <= record["draft_end_s"] <= record["verify_start_s"] \
                <= record["verify_end_s"]


def test_autoregressive_job_runs_in_the_verify_process(runtime, pair):
    result = runtime.run(Job((4, 4, 2), 15))
    assert result.tokens == generate_ar(pair[0].fresh(), [4, 4, 2], 15) and result.rounds == 0


def test_sampled_sequential_run_is_the_in_process_run(runtime, pair):
    sampling = Sampling(temperature=1.0, top_p=0.9)
    target, draft = pair
    expected, counts = generate_speculative(target.fresh(), draft.fresh(), [2, 3], 30, *KARY, sampling=sampling,
                                            seed=9)
    result = runtime.run(Job((2, 3), 30, KARY, sampling, seed=9))
    assert result.tokens == expected and result.accept_counts == counts[:len(result.accept_counts)].tolist()
    again = runtime.run(Job((2, 3), 30, KARY, sampling, seed=9, schedule="overlap"))
    assert again.tokens == runtime.run(Job((2, 3), 30, KARY, sampling, seed=9, schedule="overlap")).tokens


def test_emulated_latency_delays_every_message(pair):
    latency = 0.003
    with TwoStageRuntime(*pair, link=LinkEmulation(latency_s=latency)) as rt:
        result = rt.run(Job((1, 2, 3), 12, CHAIN, trace=True))
    for record in result.trace:  # the tree reached the verifier no sooner than the link allows
        assert record["verify_start_s"] - record["draft_end_s"] >= latency * 0.95
    assert result.seconds >= result.rounds * 2 * latency * 0.95  # a tree and a verdict per round


def test_a_failing_stage_is_one_line_and_leaves_no_process(pair):
    rt = TwoStageRuntime(*pair)
    processes = list(rt._processes)
    with pytest.raises(StageError) as error:
        rt.run(Job((1, 999), 5, CHAIN))  # token 999 is outside the vocabulary: the stages fail
    assert "\n" not in str(error.value) and "stage" in str(error.value)
    rt.close(force=True)
    assert not any(p.is_alive() for p in processes)


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _start_long_generation() -> tuple[subprocess.Popen, list[int]]:
    process = subprocess.Popen([sys.executable, "-m", "dfvg_dse", "reference", "generate", "--prompt", "import os\n",
                                "--max-new-tokens", "100000", "--schedule", "overlap", "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while len([c for c in _children(process.pid) if _alive(c)]) < 2 and time.time() < deadline:
        time.sleep(0.1)  # the resource tracker is a child too: wait for both stages
    time.sleep(1.0)
    return process, _children(process.pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_stops_both_stages_without_a_traceback():
    process, children = _start_long_generation()
    assert len(children) >= 2
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130 and "Traceback" not in stderr
    assert stderr.count("\n") == 1 and "interrupted" in stderr  # one line, no blank line before it
    time.sleep(0.5)
    assert not any(_alive(c) for c in children)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_stages_exit_when_their_parent_is_killed():
    process, children = _start_long_generation()
    process.kill()
    process.wait(timeout=10)
    deadline = time.time() + 10
    while any(_alive(c) for c in children) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(_alive(c) for c in children)
