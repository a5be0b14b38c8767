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
# chunks; past this (about ten minutes of CPU) a run is refused up front
MAX_ITERATIONS = 20_000_000
DRAW_BLOCK = 1 << 16  # pool indices drawn at once


class Requests(NamedTuple):
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray  # int64
    output_tokens: np.ndarray


class Outcome(NamedTuple):
    """Per request: first token and finish times (s); per emission: the gap and how many sequences saw it."""

    requests: Requests
    first_token_s: np.ndarray
    finish_s: np.ndarray
    gap_s: np.ndarray  # the iteration each decoding sequence waited for its next tokens
    gap_count: np.ndarray
    end_s: float
    verify_busy_s: float
    draft_busy_s: float
    energy_j: float
    decode_iterations: int
    speculative_iterations: int
    prefill_tokens: int


def draw_requests(workload: Workload, load: LoadSpec) -> Requests:
    """Poisson arrivals at the load's rate over its duration (or the trace's arrivals), lengths drawn
    from the workload (a paired trace: one request's prompt and output together). Seeded."""
    rng = np.random.default_rng(np.random.SeedSequence(load.seed, spawn_key=(1,)))
    if workload.arrivals_s:
        arrivals = np.asarray(workload.arrivals_s, dtype=float)
        return Requests(arrivals, np.asarray(workload.prompt.values, dtype=np.int64),
                        np.asarray(workload.output.values, dtype=np.int64))
    expected = load.rate_per_s * load.duration_s
    if expected > MAX_REQUESTS:
        raise InputError(f"serving: {load.rate_per_s:g} requests/s x {load.duration_s:g} s = {expected:,.0f} requests, "
                         f"past the {MAX_REQUESTS:,} limit: shorten --duration")
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


def run(config: DecodeConfig, costs: IterationCosts, requests: Requests, batching: BatchingSpec,
        seed: int = 0) -> Outcome:
    """Serve every request to its last token (module docstring)."""
    arrival, prompt, output = requests
    n = len(arrival)
    need = (prompt + output + costs.verify_tokens).astype(float)
    if n and need.max() > costs.kv_capacity_tokens:
        worst = int(np.argmax(need))
        raise InputError(f"serving: a request of {prompt[worst]:,} prompt + {output[worst]:,} output tokens needs more KV "
                         f"cache than '{config.system.verify.name}' holds ({costs.kv_capacity_tokens:,.0f} tokens of "
                         f"{config.target.name}): shorten the lengths or use more GPUs")
    bound = float(output.sum()) + (float(np.ceil(prompt / batching.chunk_tokens).sum()) if batching.chunk_tokens else n)
    if bound > MAX_ITERATIONS:
        raise InputError(f"serving: {n:,} requests may take up to {bound:,.0f} iterations, past the "
                         f"{MAX_ITERATIONS:,} limit (about ten minutes): shorten --duration, lower --rate or raise "
                         "--chunk-tokens")
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(2,)))
    pool, contexts = costs.token_pool, costs.contexts
    draws, cursor = rng.integers(0, len(pool), DRAW_BLOCK), 0
    first, finish, generated = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n)
    waiting: deque = deque()
    prefilling: list[list[int]] = []  # [request, prompt tokens done], in admission order
    running = np.zeros(0, dtype=np.int64)
    t = kv_used = ctx_sum = verify_busy = draft_busy = energy = 0.0
    nxt = decode_iters = spec_iters = prefill_tokens = 0
    gaps: list[float] = []
    counts: list[int] = []
    while True:
        while nxt < n and arrival[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        while waiting and len(running) + len(prefilling) < batching.max_batch and \
                kv_used + need[waiting[0]] <= costs.kv_capacity_tokens:
            r = waiting.popleft()
            prefilling.append([r, 0])
            kv_used += need[r]
        b = len(running)
        if not b and not prefilling:
            if nxt >= n:
                break
            energy += costs.idle_power_w * (arrival[nxt] - t)
            t = float(arrival[nxt])
            continue
        spec, dt, e, v_busy, d_busy, v_tok, fill = False, 0.0, 0.0, 0.0, 0.0, 1, 0.0
        context = ctx_sum / b if b else 0.0
        prefill_only = batching.chunk_tokens == 0 and bool(prefilling)
        if b and not prefill_only:
            cycle = _row_value(costs.spec_cycle_s[b - 1], contexts, context) if costs.speculative else np.nan
            spec = bool(np.isfinite(cycle))
            if spec:
                dt, v_tok = cycle, costs.verify_tokens
                e = _row_value(costs.spec_energy_j[b - 1], contexts, context)
                v_busy = _row_value(costs.spec_verify_busy_s[b - 1], contexts, context)
                d_busy = _row_value(costs.spec_draft_busy_s[b - 1], contexts, context)
                fill = _row_value(costs.spec_fill_tokens[b - 1], contexts, context)
            else:
                dt = v_busy = _row_value(costs.ar_step_s[b - 1], contexts, context)
                e = _row_value(costs.ar_energy_j[b - 1], contexts, context)
        completed: list[int] = []
        if prefilling:
            if prefill_only:
                parts = [(int(prompt[r]), 0, 1) for r, _ in prefilling]
                completed = [r for r, _ in prefilling]
                prefilling = []
                extra = forward_s(config, parts)
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
                extra = (forward_s(config, decode + parts) - forward_s(config, decode) if decode else
                         forward_s(config, parts)) if parts else 0.0
            prefill_tokens += sum(k for k, _, _ in parts)
            v_busy += extra
            e += extra * costs.busy_power_w
            if costs.draft_prefills and parts:  # the drafter fills its cache with the same chunks
                draft = draft_prefill_s(config, parts)
                e += draft * costs.draft_prefill_power_w
                if costs.draft_on_verifier:  # one device: the draft's forwards follow the target's
                    extra += draft
                    v_busy += draft
                else:  # its own device, beside the target's chunk
                    extra = max(extra, draft)
                    d_busy += draft
            dt += extra
        t_next = t + dt
        if b and not prefill_only:
            decode_iters += 1
            spec_iters += spec
            if spec:
                if cursor + b > len(draws):
                    draws, cursor = rng.integers(0, len(pool), DRAW_BLOCK), 0
                tokens = pool[draws[cursor:cursor + b]] + fill
                cursor += b
            else:
                tokens = np.ones(b)
            before = generated[running]
            after = np.minimum(before + tokens, output[running])
            generated[running] = after
            ctx_sum += float(np.sum(after - before))
            gaps.append(dt)
            counts.append(b)
            done = after >= output[running]
            if done.any():
                ended = running[done]
                finish[ended] = t_next
                kv_used -= float(need[ended].sum())
                ctx_sum -= float(np.sum(prompt[ended] + generated[ended]))
                running = running[~done]
        for r in completed:
            first[r] = t_next
            generated[r] = 1.0
            if output[r] <= 1:
                finish[r] = t_next
                kv_used -= need[r]
            else:
                running = np.append(running, r)
                ctx_sum += float(prompt[r] + 1)
        verify_busy += v_busy
        draft_busy += d_busy
        energy += e
        t = t_next
    return Outcome(requests, first, finish, np.asarray(gaps), np.asarray(counts, dtype=np.int64), t, verify_busy,
                   draft_busy, energy, decode_iters, spec_iters, prefill_tokens)
