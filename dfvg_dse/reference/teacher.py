"""The draft teacher-forced along the target's own text (issues 6 and 7): greedy token acceptance,
and the per-position ranks and probabilities that a replayed acceptance trace is made of."""

from __future__ import annotations

import numpy as np

from dfvg_dse.reference.eagle import FEATURE_DTYPE
from dfvg_dse.reference.sampling import GREEDY, Sampling, distribution, wire_distribution
from dfvg_dse.reference.speculative import Model, generate_ar


def forced_draft_logits(target: Model, draft, text: list[int]) -> np.ndarray:
    """The draft's logits along `text`, teacher-forced; a draft head reads the target's features of
    the text (as the link carries them, float16), so the target runs it first (its cache is refilled)."""
    if getattr(draft, "drafts_from_features", False):
        target.cache.keep(0, [])
        _, hidden = target.run(text, np.arange(len(text)), with_features=True)
        draft.add_features(hidden.astype(FEATURE_DTYPE))
    return draft.run(text, np.arange(len(text)))


def greedy_agreement(target: Model, draft: Model, prompt: list[int], max_new_tokens: int) -> tuple[int, int]:
    """(positions where the draft's argmax equals the target's, positions compared) along the
    target's own greedy continuation of `prompt`, teacher-forced: the per-token acceptance of
    greedy speculative decoding. Both models must have empty caches; they are left filled."""
    continuation = generate_ar(target, prompt, max_new_tokens)
    full = prompt + continuation[:-1]  # every token whose next token the target chose
    target.cache.keep(0, [])
    wanted = np.argmax(target.run(full, np.arange(len(full))), axis=-1)[len(prompt) - 1:]
    guessed = np.argmax(forced_draft_logits(target, draft, full), axis=-1)[len(prompt) - 1:]
    return int(np.sum(wanted == guessed)), len(wanted)


def draft_ranks(logits: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Rank of tokens[i] in row i of `logits` as the drafter orders children: descending, ties to
    the lower id (a stable argsort of -logits)."""
    chosen = logits[np.arange(len(tokens)), tokens][:, None]
    ids = np.arange(logits.shape[1])[None, :]
    return ((logits > chosen) | ((logits == chosen) & (ids < tokens[:, None]))).sum(axis=1)


TOP_PROBS = 16  # the draft's largest probabilities kept per position: enough for a dynamic rule's per-level cap


def teacher_forced_acceptance(target: Model, draft: Model, prompt: list[int], new_tokens: int,
                              sampling: Sampling = GREEDY, seed: int = 0) -> dict[str, list]:
    """How the draft treats the target's own continuation of `prompt` (`new_tokens` tokens, greedy
    or sampled with `seed`), position by position, given the target's tokens before each: the
    inputs of a replayed acceptance trace (specs.AcceptanceTrace). Greedy: {"ranks", "top_probs"
    (positions x TOP_PROBS, decreasing)}; sampled:
    {"accept_probs": sum_x min(p, q), "bonus_probs": p(argmax q)}. Position 0, the prefill's token,
    holds -1 / 0. Both models must have empty caches; they are left filled."""
    continuation = generate_ar(target, prompt, new_tokens, sampling, seed)
    text = prompt + continuation[:-1]  # every token whose successor the target chose
    first = len(prompt) - 1  # the row that predicts continuation[0]
    draft_logits = forced_draft_logits(target, draft, text)[first:]
    if sampling.greedy:
        ranks = draft_ranks(draft_logits, np.asarray(continuation))
        probs = np.exp(draft_logits - draft_logits.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        top = -np.sort(-probs, axis=1)[:, :TOP_PROBS]
        top[0] = 0.0
        return {"ranks": [-1] + [int(r) for r in ranks[1:]], "top_probs": top.astype(float)}
    target.cache.keep(0, [])
    target_logits = target.run(text, np.arange(len(text)))[first:]
    accept, bonus = [0.0], [0.0]
    for t in range(1, len(continuation)):
        p = distribution(target_logits[t], sampling)
        q = wire_distribution(distribution(draft_logits[t], sampling))
        accept.append(float(np.minimum(p, q).sum()))
        bonus.append(float(p[int(np.argmax(q))]))
    return {"accept_probs": accept, "bonus_probs": bonus}
