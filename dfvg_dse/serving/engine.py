"""The engine's loop, iteration by iteration (docs/serving.md, "The engine's loop").

Each iteration: arrivals join the queue; queued requests are admitted first come, first served
while a slot is free (max_batch counts decoding and prefilling sequences) and the verifier's KV
cache holds the request's prompt, its whole output and one round's tree; then one forward runs.
Chunked prefill (chunk_tokens > 0): the decodes first (each sequence's verify tokens count
against the budget), then prompt chunks in admission order fill what is left; the chunks' cost is
their marginal cost in the mixed forward (costs.mixed_forward_cost: FLOPs and KV traffic add, the
weights stream once). Without chunking, queued prompts are prefilled together in an iteration of
their own before the decodes resume. A prompt's last chunk gives the request its first token. A
decoding iteration speculates when the table has a round for that batch and context (feasible and
within speculate_max_batch), else it is one autoregressive step; each sequence takes its own
draw of tokens per round (and the verifier's fill tokens), capped at its output length.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

import numpy as np

from dfvg_dse.serving.costs import IterationCosts, draft_prefill_s, forward_s
from dfvg_dse.specs import DecodeConfig, InputError
from dfvg_dse.specs.serving import BatchingSpec, LoadSpec, Workload

MAX_REQUESTS = 2_000_000
# iterations a run may need at most: every output token in an iteration of its own, every prompt in
# chunks; past this (minutes of CPU: 10-180 us an iteration) a run is refused up front
MAX_ITERATIONS = 5_000_000
DRAW_BLOCK = 1 << 16  # pool indices drawn at once


class Requests(NamedTuple):
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray  # int64
    output_tokens: np.ndarray


class Outcome(NamedTuple):
    """Per request: first token and finish times (s; nan for a request refused as larger than the KV
    cache); per emission: the gap a decoding sequence waited for it."""

    requests: Requests
    first_token_s: np.ndarray
    finish_s: np.ndarray
    rejected: np.ndarray  # bool per request: it alone needs more KV cache than the verifier holds
    itl_s: np.ndarray  # one per emission of a decoding sequence (a speculative round's tokens come at once)
    decode_s: float  # time spent in decoding iterations
    decode_batch_s: float  # the sum over decoding iterations of batch x duration
    end_s: float
    verify_busy_s: float
    draft_busy_s: float
    energy_j: float
    decode_iterations: int
    speculative_iterations: int


def check_request_count(load: LoadSpec) -> None:
    """Refuse, before any work, a load of more than MAX_REQUESTS expected requests."""
    expected = load.rate_per_s * load.duration_s
    if expected > MAX_REQUESTS:
        raise InputError(f"serving: {load.rate_per_s:g} requests/s x {load.duration_s:g} s = {expected:,.0f} requests, "
                         f"past the {MAX_REQUESTS:,} limit: shorten --duration")


def draw_requests(workload: Workload, load: LoadSpec) -> Requests:
    """Poisson arrivals at the load's rate over its duration (or the trace's arrivals), lengths drawn
    from the workload (a paired trace: one request's prompt and output together). Seeded."""
    rng = np.random.default_rng(np.random.SeedSequence(load.seed, spawn_key=(1,)))
    if workload.arrivals_s:
        arrivals = np.asarray(workload.arrivals_s, dtype=float)
        return Requests(arrivals, np.asarray(workload.prompt.values, dtype=np.int64),
                        np.asarray(workload.output.values, dtype=np.int64))
    check_request_count(load)
    expected = load.rate_per_s * load.duration_s
    gaps = rng.exponential(1.0 / load.rate_per_s, int(expected + 10 * np.sqrt(expected) + 10))
    arrivals = np.cumsum(gaps)
    arrivals = arrivals[arrivals < load.duration_s]
    n = len(arrivals)
    if workload.paired:
        pick = rng.integers(0, len(workload.prompt.values), n)
        return Requests(arrivals, np.asarray(workload.prompt.values, dtype=np.int64)[pick],
                        np.asarray(workload.output.values, dtype=np.int64)[pick])
    return Requests(arrivals, workload.prompt.sample(n, rng), workload.output.sample(n, rng))


def _row_value(costs_row: np.ndarray, contexts: np.ndarray, context: float) -> float:
    return float(np.interp(context, contexts, costs_row))


def iteration_bound(requests: Requests, batching: BatchingSpec) -> float:
    """The most iterations serving `requests` can take: every output token in an iteration of its own,
    every prompt in chunks (or alone)."""
    _, prompt, output = requests
    chunks = np.ceil(prompt / batching.chunk_tokens).sum() if batching.chunk_tokens else len(prompt)
    return float(output.sum()) + float(chunks)


def check_iterations(requests: Requests, batching: BatchingSpec) -> None:
    """Refuse, before any work, a run past MAX_ITERATIONS."""
    bound = iteration_bound(requests, batching)
    if bound > MAX_ITERATIONS:
        raise InputError(f"serving: {len(requests.arrival_s):,} requests may take up to {bound:,.0f} iterations, past the "
                         f"{MAX_ITERATIONS:,} limit (minutes to an hour of CPU): shorten --duration, lower --rate or "
                         "raise --chunk-tokens")


def _prefill_charge(costs: IterationCosts, target_s: float, draft_s: float) -> tuple[float, float, float, float]:
    """(duration, energy, verifier busy, drafter busy) of prompt chunks: the target's forward, and the
    drafter's beside it on its own device (the longer sets the time) or after it on the verifier."""
    if draft_s <= 0.0:
        return target_s, target_s * (costs.verify_busy_w + costs.draft_idle_w), target_s, 0.0
    if costs.draft_on_verifier:
        total = target_s + draft_s
        return total, total * costs.verify_busy_w, total, 0.0
    total = max(target_s, draft_s)
    energy = (target_s * costs.verify_busy_w + (total - target_s) * costs.verify_idle_w
              + draft_s * costs.draft_busy_w + (total - draft_s) * costs.draft_idle_w)
    return total, energy, target_s, draft_s


def run(config: DecodeConfig, costs: IterationCosts, requests: Requests, batching: BatchingSpec,
        seed: int = 0) -> Outcome:
    """Serve every request to its last token (module docstring); a request that alone needs more KV
    cache than the verifier holds is refused, as engines refuse a prompt past their context."""
    arrival, prompt, output = requests
    n = len(arrival)
    need = (prompt + output + costs.verify_tokens).astype(float)
    rejected = need > costs.kv_capacity_tokens
    check_iterations(requests, batching)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(2,)))
    pool, contexts = costs.token_pool, costs.contexts
    draws, cursor = rng.integers(0, len(pool), DRAW_BLOCK), 0
    first, finish, generated, last = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n), np.full(n, np.nan)
    waiting: deque = deque()
    prefilling: list[list[int]] = []  # [request, prompt tokens done], in admission order
    running = np.zeros(0, dtype=np.int64)  # decoding, in admission order (a token budget serves the first)
    t = kv_used = verify_busy = draft_busy = energy = decode_s = decode_batch_s = 0.0
    nxt = decode_iters = spec_iters = 0
    gaps: list[np.ndarray] = []
    budget_cap = batching.chunk_tokens or None
    while True:
        while nxt < n and arrival[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        while waiting and len(running) + len(prefilling) < batching.max_batch:
            r = waiting[0]
            if rejected[r]:
                waiting.popleft()
                continue
            if kv_used + need[r] > costs.kv_capacity_tokens:
                break
            waiting.popleft()
            prefilling.append([r, 0])
            kv_used += need[r]
        if not len(running) and not prefilling:
            if nxt >= n:
                break
            energy += costs.idle_power_w * (arrival[nxt] - t)
            t = float(arrival[nxt])
            continue
        spec, dt, e, v_busy, d_busy, v_tok, fill, b = False, 0.0, 0.0, 0.0, 0.0, 1, 0.0, 0
        prefill_only = batching.chunk_tokens == 0 and bool(prefilling)
        if len(running) and not prefill_only:
            # the decodes go first; under a token budget only the first sequences that fit are scheduled
            b = min(len(running), budget_cap // costs.verify_tokens) if budget_cap else len(running)
            context = float(np.mean(prompt[running[:b]] + generated[running[:b]])) if b else 0.0
            cycle = _row_value(costs.spec_cycle_s[b - 1], contexts, context) if costs.speculative and b else np.nan
            spec = bool(np.isfinite(cycle))
            if spec:
                dt, v_tok = cycle, costs.verify_tokens
                e = _row_value(costs.spec_energy_j[b - 1], contexts, context)
                v_busy = _row_value(costs.spec_verify_busy_s[b - 1], contexts, context)
                d_busy = _row_value(costs.spec_draft_busy_s[b - 1], contexts, context)
                fill = _row_value(costs.spec_fill_tokens[b - 1], contexts, context)
            else:
                b = min(len(running), budget_cap) if budget_cap else len(running)
                context = float(np.mean(prompt[running[:b]] + generated[running[:b]]))
                dt = v_busy = _row_value(costs.ar_step_s[b - 1], contexts, context)
                e = _row_value(costs.ar_energy_j[b - 1], contexts, context)
        completed: list[int] = []
        if prefilling:
            if prefill_only:
                parts = [(int(prompt[r]), 0, 1) for r, _ in prefilling]
                completed = [r for r, _ in prefilling]
                prefilling = []
                target_s = forward_s(config, parts)
            else:
                budget = batching.chunk_tokens - b * v_tok
                parts, decode = [], [(v_tok, int(round(context)), b)] if b else []
                for item in prefilling:
                    k = min(int(prompt[item[0]]) - item[1], budget)
                    if k <= 0:
                        break
                    parts.append((k, item[1], 1))
                    item[1] += k
                    budget -= k
                    if item[1] >= prompt[item[0]]:
                        completed.append(item[0])
                prefilling = [item for item in prefilling if item[1] < prompt[item[0]]]
                target_s = (forward_s(config, decode + parts) - forward_s(config, decode) if decode else
                            forward_s(config, parts)) if parts else 0.0
            draft_s = draft_prefill_s(config, parts) if costs.draft_prefills and parts else 0.0
            extra, extra_e, extra_v, extra_d = _prefill_charge(costs, target_s, draft_s)
            dt, e, v_busy, d_busy = dt + extra, e + extra_e, v_busy + extra_v, d_busy + extra_d
        t_next = t + dt
        if b:
            decoding = running[:b]
            decode_iters += 1
            spec_iters += spec
            decode_s += dt
            decode_batch_s += b * dt
            if spec:
                if cursor + b > len(draws):
                    draws, cursor = rng.integers(0, len(pool), DRAW_BLOCK), 0
                tokens = pool[draws[cursor:cursor + b]] + fill
                cursor += b
            else:
                tokens = np.ones(b)
            after = np.minimum(generated[decoding] + tokens, output[decoding])
            generated[decoding] = after
            gaps.append(t_next - last[decoding])  # a sequence the budget or a prefill held waited longer
            last[decoding] = t_next
            done = after >= output[decoding]
            if done.any():
                ended = decoding[done]
                finish[ended] = t_next
                kv_used -= float(need[ended].sum())
                running = np.concatenate([decoding[~done], running[b:]])
        for r in completed:
            first[r] = last[r] = t_next
            generated[r] = 1.0
            if output[r] <= 1:
                finish[r] = t_next
                kv_used -= need[r]
            else:
                running = np.append(running, r)
        verify_busy += v_busy
        draft_busy += d_busy
        energy += e
        t = t_next
    return Outcome(requests, first, finish, rejected, np.concatenate(gaps) if gaps else np.zeros(0), decode_s,
                   decode_batch_s, t, verify_busy, draft_busy, energy, decode_iters, spec_iters)
