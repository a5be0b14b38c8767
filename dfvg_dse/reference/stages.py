"""Two stages, two processes: the drafter and the verifier of `speculative.py` run in separate OS
processes (spawned, one core each when the machine has two, BLAS single-threaded), joined by a
pipe that carries 16-byte token records and can emulate a link's latency and bandwidth.

Schedules:
- sequential: the drafter waits for each verdict, then drafts the next tree.
- overlap (DFVG's): right after sending a tree the drafter predicts its outcome (the draft's
  first-choice path accepted, then the draft's own next token as the bonus) and drafts the next
  tree on that guess while the verifier works; a hit sends the ready tree at once, a miss rolls
  the draft cache back to the verified prefix and drafts again.
Greedy runs give the greedy autoregressive tokens under either schedule. Sampled runs are
reproducible for a seed and schedule (guessing depends only on tokens, never on timing); the
overlap drafter also draws for guessed trees, so the two schedules draw different, equally
distributed samples.

The processes are servers: a `TwoStageRuntime` starts them once (weights are sent at spawn) and
runs many jobs, so a benchmark does not pay process start-up per run. Shutdown is clean: a child
exits when its parent dies or its pipe closes, ignores Ctrl-C from its first instruction (it is
spawned with SIGINT blocked, see `interrupts_deferred`; the parent handles it, then terminates and
joins both), and reports any error as one line.

On the numpy engine the speculative speedup stays below 1x on this machine (OpenBLAS runs a
2-16-row product at 2-5x the cost of one row: docs/reference.md); the torch backend in bfloat16
(torch_lm.py, issue 19) makes few-row verification nearly free, and the pair sized for it
(builtin:small) is where speculation pays.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import struct
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

import numpy as np

from dfvg_dse.processes import ignore_interrupts, interrupts_deferred, spawning_quietly
from dfvg_dse.reference.sampling import GREEDY, Sampling, wire_distribution
from dfvg_dse.reference.eagle import FEATURE_DTYPE
from dfvg_dse.reference.speculative import (TOKEN_RECORD, DraftTree, Drafter, Model, Verdict, Verifier, make_model,
                                            trace_record)
from dfvg_dse.reference.tiny_lm import PackedWeights, ReferenceConfig
from dfvg_dse.specs.hardware import LinkSpec

SCHEDULES = ("sequential", "overlap")
HEAD_IN_TURN = ("a draft head reads the target's features of the tokens each verdict accepts, so it drafts in turn: "
                "schedule sequential")
_TREE, _VERDICT, _STOP = 1, 2, 3
_HEADER = struct.Struct("<IIIIdddd")  # kind, records, distributions, vocabulary, sampled, t0, t1, sent at
_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def stage_cpus() -> list[int]:
    """The cores this process may run on, in order: the stages pin to the first two ([] where the
    platform cannot tell)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


@contextmanager
def single_threaded_environment():
    """BLAS and OpenMP set to one thread for processes spawned inside (read at their numpy import)."""
    saved = {name: os.environ.get(name) for name in _THREAD_VARIABLES}
    os.environ.update({name: "1" for name in _THREAD_VARIABLES})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class StageError(RuntimeError):
    """A stage process failed or was interrupted; the message is one line."""


@dataclass(frozen=True)
class LinkEmulation:
    """A message of B bytes arrives latency_s + B / bytes_per_s after it was sent (none: 0 and inf)."""

    latency_s: float = 0.0
    bytes_per_s: float = float("inf")

    @classmethod
    def from_spec(cls, link: LinkSpec) -> "LinkEmulation":
        """A hwdb link: every hop adds its latency and carries the bytes at efficiency x bandwidth;
        the software overhead is paid once per message."""
        return cls(link.hops * link.latency_s + link.software_overhead_s,
                   link.efficiency * link.bandwidth_bytes_per_s / link.hops)

    def delay_s(self, n_bytes: int) -> float:
        return self.latency_s + n_bytes / self.bytes_per_s


@dataclass(frozen=True)
class Job:
    """One decoding run. `rule` is None for autoregressive decoding, else a static tree
    (parents, ranks) or an AdaptRule / Eagle2Rule."""

    prompt: tuple[int, ...]
    max_new_tokens: int
    rule: object = None
    sampling: Sampling = GREEDY
    seed: int = 0
    schedule: str = "sequential"
    trace: bool = False
    features: bool = False  # the drafter is a head: verdicts carry the target's features (set by the runtime)

    def __post_init__(self) -> None:
        if not self.prompt:  # the first forward needs a token to predict from (no implicit BOS here)
            raise ValueError("Job.prompt: needs at least one token")


@dataclass
class RunResult:
    tokens: list[int]
    seconds: float  # first forward to last verdict, in the verify process
    prefill_s: float = 0.0  # of which the prompt's forward
    step_s: list[float] = field(default_factory=list)  # autoregressive: each step's forward, in order
    accept_counts: list[int] = field(default_factory=list)
    trace: list[dict] = field(default_factory=list)
    link_bytes: int = 0
    overlap_hits: int = 0
    overlap_misses: int = 0

    @property
    def rounds(self) -> int:
        return sum(self.accept_counts)


# -- messages on the link ---------------------------------------------------------------------
# header, then 16-byte token records, then (sampled trees) the node ids and q of every sampled parent
def _pack(kind: int, records: np.ndarray, sampled: bool = False, dists: dict | None = None, t0: float = 0.0,
          t1: float = 0.0) -> bytes:
    dists = dists or {}
    nodes = sorted(dists)
    vocab = len(dists[nodes[0]]) if nodes else 0
    head = _HEADER.pack(kind, len(records), len(nodes), vocab, float(sampled), t0, t1, time.perf_counter())
    return b"".join([head, records.tobytes(), np.asarray(nodes, dtype="<i4").tobytes(),
                     *(np.asarray(dists[n], dtype="<f2").tobytes() for n in nodes)])


def _unpack(data: bytes):
    kind, n, n_dists, vocab, sampled, t0, t1, sent = _HEADER.unpack_from(data)
    records = np.frombuffer(data, dtype=TOKEN_RECORD, count=n, offset=_HEADER.size)
    offset = _HEADER.size + records.nbytes
    nodes = np.frombuffer(data, dtype="<i4", count=n_dists, offset=offset)
    dists = np.frombuffer(data, dtype="<f2", count=n_dists * vocab, offset=offset + nodes.nbytes)
    return kind, records, dict(zip(nodes.tolist(), (wire_distribution(d) for d in dists.reshape(n_dists, vocab)))), \
        bool(sampled), t0, t1, sent


def encode_tree(tree: DraftTree, t0: float, t1: float) -> bytes:
    """Draft tokens 1.. as records (the verifier knows the root), drafting start and end times."""
    records = np.zeros(len(tree.tokens) - 1, dtype=TOKEN_RECORD)
    records["token"] = tree.tokens[1:]
    records["parent"] = tree.parents[1:]
    records["confidence"] = tree.confidences[1:]
    records["rank"] = tree.ranks[1:]
    return _pack(_TREE, records, tree.sampled, tree.dists, t0, t1)


def decode_tree(data: bytes, root: int) -> tuple[DraftTree, float, float, float]:
    """(tree, drafting start, drafting end, sent at): absolute perf_counter times."""
    _, records, dists, sampled, t0, t1, sent = _unpack(data)
    tree = DraftTree([root] + records["token"].tolist(), [-1] + records["parent"].tolist(),
                     [0] + records["rank"].tolist(), [1.0] + records["confidence"].astype(float).tolist(),
                     dists, sampled)
    return tree, t0, t1, sent


def encode_verdict(tree: DraftTree | None, verdict: Verdict) -> bytes:
    """One record per accepted draft token (its node in `parent`), then the bonus; for a draft head,
    then the target's features (float16 rows: the root's and the accepted nodes', or the prompt's)."""
    path = list(verdict.path[1:])
    records = np.zeros(len(path) + 1, dtype=TOKEN_RECORD)
    records["token"] = ([tree.tokens[i] for i in path] if tree else []) + [verdict.bonus]
    records["parent"] = path + [-1]
    features = b"" if verdict.features is None else np.asarray(verdict.features, dtype="<f2").tobytes()
    return _pack(_VERDICT, records) + features


def decode_verdict(data: bytes) -> tuple[Verdict, list[int], float]:
    """The verdict (with its features, flat, when it carries any), the accepted tokens then the bonus,
    and when it was sent."""
    _, records, _, _, _, _, sent = _unpack(data)
    offset = _HEADER.size + records.nbytes
    features = np.frombuffer(data, dtype="<f2", offset=offset).astype(FEATURE_DTYPE) if len(data) > offset else None
    return Verdict((0, *records["parent"][:-1].tolist()), int(records["token"][-1]), features), \
        records["token"].tolist(), sent


def _kind(data: bytes) -> int:
    return _HEADER.unpack_from(data)[0]


# -- the stage processes ----------------------------------------------------------------------
def _child_setup(cpu: int | None) -> None:
    ignore_interrupts()
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})


SPIN_S = 0.05  # a pinned stage spins this long for the next message before it blocks


def _receive(conn: Connection, parent_pid: int, spin: bool = False) -> bytes | None:
    """The next message, or None when the parent has died (then the child exits). A stage with a
    core of its own spins first: waking a blocked process costs 50-100 us, a round's budget."""
    if spin:
        deadline = time.perf_counter() + SPIN_S
        while time.perf_counter() < deadline:
            if conn.poll(0):
                return conn.recv_bytes()
    while not conn.poll(0.2):
        if os.getppid() != parent_pid:
            return None
    return conn.recv_bytes()


def _next_job(control: Connection, parent_pid: int) -> Job | None:
    try:
        while not control.poll(0.2):
            if os.getppid() != parent_pid:
                return None
        return control.recv()  # None: the parent asks the stage to exit
    except (EOFError, OSError):  # the parent closed the pipe (a forced close): exit quietly
        return None


def _arrive(sent: float, n_bytes: int, link: LinkEmulation) -> None:
    """Hold a received message until the emulated link would have delivered it."""
    due = sent + link.delay_s(n_bytes)
    remaining = due - time.perf_counter()
    if remaining > 2e-4:
        time.sleep(remaining - 1e-4)  # sleep is coarse: spin the last 0.1 ms
    while time.perf_counter() < due:
        pass


def _verify_job(model: Model, job: Job, peer: Connection, link: LinkEmulation, parent_pid: int,
                spin: bool) -> RunResult:
    verifier = Verifier(model, job.sampling, job.seed, features=job.features)
    clock = time.perf_counter
    origin = clock()
    out = [verifier.start(list(job.prompt))]
    result = RunResult([], 0.0, clock() - origin)
    if job.rule is None:
        while len(out) < job.max_new_tokens:
            step_start = clock()
            out.append(verifier.step(out[-1]))
            result.step_s.append(clock() - step_start)
            if len(out) % 64 == 0 and os.getppid() != parent_pid:
                raise EOFError  # orphaned: stop rather than finish a long job nobody will read
        result.tokens, result.seconds = out[:job.max_new_tokens], clock() - origin
        return result
    message = encode_verdict(None, Verdict((0,), out[0], verifier.prompt_features))
    while len(out) < job.max_new_tokens:
        if os.getppid() != parent_pid:
            raise EOFError  # orphaned: the drafter sees the pipe close and exits too
        peer.send_bytes(message)
        data = _receive(peer, parent_pid, spin)
        if data is None:
            raise EOFError
        tree, t0, t1, sent = decode_tree(data, out[-1])
        _arrive(sent, tree.link_bytes(), link)
        verify_start = clock()
        verdict = verifier.verify(tree)
        verify_end = clock()
        accepted = len(verdict.path) - 1
        result.accept_counts += [0] * (accepted + 1 - len(result.accept_counts))
        result.accept_counts[accepted] += 1
        result.link_bytes += tree.link_bytes() + verdict.link_bytes()
        if job.trace:
            result.trace.append(trace_record(result.rounds - 1, tree, verdict, {
                "draft_start_s": t0 - origin, "draft_end_s": t1 - origin,
                "verify_start_s": verify_start - origin, "verify_end_s": verify_end - origin}))
        out += [tree.tokens[i] for i in verdict.path[1:]] + [verdict.bonus]
        message = encode_verdict(tree, verdict)
    peer.send_bytes(_pack(_STOP, np.zeros(0, dtype=TOKEN_RECORD)))
    result.tokens, result.seconds = out[:job.max_new_tokens], clock() - origin
    return result


def _draft_job(model: Model, job: Job, peer: Connection, link: LinkEmulation, parent_pid: int, spin: bool) -> dict:
    drafter = Drafter(model, job.rule, job.sampling, job.seed + 1)
    if drafter.head and job.schedule == "overlap":
        raise ValueError(HEAD_IN_TURN)
    clock = time.perf_counter
    context = list(job.prompt)
    guess = None  # overlap: (predicted path, predicted bonus, the tree drafted on it, t0, t1)
    hits = misses = 0
    while True:
        data = _receive(peer, parent_pid, spin)
        if data is None:
            raise EOFError
        if _kind(data) == _STOP:
            return {"overlap_hits": hits, "overlap_misses": misses}
        verdict, tokens, sent = decode_verdict(data)
        _arrive(sent, verdict.link_bytes(), link)
        if drafter.head:
            model.add_features(verdict.features)
        if guess is not None and guess[:2] == (verdict.path, verdict.bonus):
            hits += 1
            context += tokens
            tree, t0, t1 = guess[2:]
        else:
            if guess is not None:
                misses += 1  # the cache holds the guessed tree: propose() rolls back to the verified prefix
            else:
                drafter.accept(verdict.path)
            context += tokens
            t0 = clock()
            tree = drafter.propose(context)
            t1 = clock()
        peer.send_bytes(encode_tree(tree, t0, t1))
        guess = None
        if job.schedule == "overlap":
            path = tree.rank0_path()
            guessed = context + [tree.tokens[i] for i in path[1:]]
            drafter.accept(path)
            bonus = drafter.predict_bonus(guessed)
            t0 = clock()
            ahead = drafter.propose(guessed + [bonus])
            guess = (tuple(path), bonus, ahead, t0, clock())


def _stage_main(role: str, weights: PackedWeights, config: ReferenceConfig, control: Connection, peer: Connection,
                link: LinkEmulation, cpu: int | None, parent_pid: int) -> None:
    _child_setup(cpu)
    model = make_model(weights, config)
    run = _verify_job if role == "verify" else _draft_job
    while True:
        job = _next_job(control, parent_pid)
        if job is None:
            return
        try:
            control.send(("ok", run(model.fresh(), job, peer, link, parent_pid, cpu is not None)))
        except (EOFError, BrokenPipeError, ConnectionResetError):
            return
        except Exception as error:  # report, then exit: the parent raises one line
            control.send(("error", f"{role} stage: {type(error).__name__}: {error}"))
            return


class TwoStageRuntime:
    """The verify process and, when a draft is given, the draft process; a context manager."""

    def __init__(self, target: Model, draft: Model | None = None, link: LinkEmulation = LinkEmulation(),
                 pin: bool = True):
        context = multiprocessing.get_context("spawn")
        cpus = stage_cpus()
        place = (lambda i: cpus[i]) if pin and len(cpus) >= 2 else (lambda i: None)
        self.pinned = pin and len(cpus) >= 2
        self.head = getattr(draft, "drafts_from_features", False)
        verify_peer, draft_peer = context.Pipe()
        self._controls, self._processes = [], []
        try:
            # A Ctrl-C while the stages start waits until both are started and tracked, then stops them.
            with single_threaded_environment(), spawning_quietly():
                stages = [("verify", target, verify_peer, 0)] + ([("draft", draft, draft_peer, 1)] if draft else [])
                for role, model, peer, index in stages:
                    mine, theirs = context.Pipe()
                    process = context.Process(target=_stage_main, name=f"dfvg-{role}", daemon=True,
                                              args=(role, model.weights, model.config, theirs, peer, link,
                                                    place(index), os.getpid()))
                    process.start()
                    theirs.close()
                    self._controls.append(mine)
                    self._processes.append(process)
        except BaseException:
            self.close(force=True)
            raise
        finally:
            verify_peer.close()
            draft_peer.close()

    def run(self, job: Job) -> RunResult:
        """One job; raises StageError on a stage's failure and KeyboardInterrupt on Ctrl-C (after
        stopping both processes)."""
        stages = 1 if job.rule is None else len(self._processes)
        if stages < 2 and job.rule is not None:
            raise StageError("speculative decoding needs a draft model")
        if self.head and job.rule is not None and job.schedule == "overlap":
            raise StageError(HEAD_IN_TURN)
        if job.rule is not None and job.features != self.head:
            job = dataclasses.replace(job, features=self.head)
        try:
            for control in self._controls[:stages]:
                control.send(job)
            replies = [self._reply(i) for i in range(stages)]
        except BaseException:
            self.close(force=True)
            raise
        result: RunResult = replies[0]
        if stages == 2:
            result.overlap_hits, result.overlap_misses = replies[1]["overlap_hits"], replies[1]["overlap_misses"]
        return result

    def _reply(self, index: int):
        control, process = self._controls[index], self._processes[index]
        ready = wait([control, process.sentinel])
        if control in ready:
            status, payload = control.recv()
            if status == "ok":
                return payload
            raise StageError(payload)
        raise StageError(f"{process.name} exited with code {process.exitcode}")

    def close(self, force: bool = False) -> None:
        """Stop both processes: a polite request, then terminate, then kill, and wait for each;
        never leaves orphans. A second Ctrl-C meanwhile is deferred until both are gone."""
        with interrupts_deferred():
            for control in self._controls:
                try:
                    if not force:
                        control.send(None)
                    control.close()
                except OSError:
                    pass
            for process in self._processes:
                process.join(timeout=0 if force else 2.0)
                if process.is_alive():
                    process.terminate()
                    process.join(timeout=2.0)
                if process.is_alive():
                    process.kill()
                    process.join()
            self._controls, self._processes = [], []

    def __enter__(self) -> "TwoStageRuntime":
        return self

    def __exit__(self, *exc) -> None:
        self.close(force=exc[0] is not None)
