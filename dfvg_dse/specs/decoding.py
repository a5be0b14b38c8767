"""Frozen specifications of decoding: token trees, acceptance profiles and draft-confidence models."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dfvg_dse.specs.hardware import InputError, SpecError, describe

@dataclass(frozen=True)
class TreeSpec:
    """A token tree as data: node 0 is the root (the last accepted token), then the draft tokens.

    `parents[i]` is the index of node i's parent (-1 for the root) and always below i, so the order
    is topological (ancestors first, which is also TreeSort's order). `ranks[i]` is node i's 0-based
    rank among its siblings: the draft's i-th most likely child. Depth counts levels below the
    root: a chain of 4 draft tokens has depth 4 and 5 nodes; `budget` counts draft tokens.
    """

    parents: tuple[int, ...]
    ranks: tuple[int, ...]
    name: str = ""

    def __post_init__(self) -> None:
        if not self.parents or self.parents[0] != -1:
            raise SpecError("parents", list(self.parents[:3]), "must start with -1 (the root)")
        if len(self.ranks) != len(self.parents):
            raise SpecError("ranks", len(self.ranks), f"must have one rank per node ({len(self.parents)})")
        seen: set[tuple[int, int]] = set()
        for i, (parent, rank) in enumerate(zip(self.parents, self.ranks)):
            if i and not (0 <= parent < i):
                raise SpecError(f"parents[{i}]", parent, f"must be an earlier node, 0..{i - 1} (ancestors first)")
            if rank < 0 or (i and (parent, rank) in seen):
                raise SpecError(f"ranks[{i}]", rank, "must be >= 0 and distinct among siblings")
            seen.add((parent, rank))

    @property
    def n_nodes(self) -> int:
        """Nodes including the root."""
        return len(self.parents)

    @property
    def budget(self) -> int:
        """Draft tokens: nodes without the root."""
        return len(self.parents) - 1

    @property
    def depths(self) -> tuple[int, ...]:
        """Depth of every node; the root has depth 0."""
        depth = [0] * len(self.parents)
        for i in range(1, len(self.parents)):
            depth[i] = depth[self.parents[i]] + 1
        return tuple(depth)

    @property
    def depth(self) -> int:
        """Levels below the root."""
        return max(self.depths)

    def rank0_path(self) -> tuple[int, ...]:
        """Nodes along the first choices from the root (root included): the overlap schedule's guess."""
        child = {(p, r): i for i, (p, r) in enumerate(zip(self.parents, self.ranks)) if i}
        path = [0]
        while (path[-1], 0) in child:
            path.append(child[(path[-1], 0)])
        return tuple(path)

    def level_widths(self) -> tuple[int, ...]:
        """Nodes per level 1..depth."""
        counts = [0] * (self.depth + 1)
        for d in self.depths[1:]:
            counts[d] += 1
        return tuple(counts[1:])


@dataclass(frozen=True)
class ConfidenceModel:
    """Draft confidences of a node's ranked children and P(accept | confidence) (docs/acceptance-and-trees.md, "Dynamic drafting").

    At depth d (1-based; rows past the last reuse it) the top-1 child's confidence q_1 follows
    Beta(m c, (1 - m) c) with mean m = top1_mean[d-1] and concentration c; rank r >= 2 gets
    q_r = (1 - q_1) x tail_shares[r-2]. Calibration: P(accept | q) is piecewise linear through
    (calibration_q, calibration_accept), non-decreasing; empty means calibrated, g(q) = q. Accept
    events of siblings are exclusive (the target picks one token).
    """

    top1_mean: tuple[float, ...]
    concentration: float
    tail_shares: tuple[float, ...]
    calibration_q: tuple[float, ...] = ()
    calibration_accept: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if not self.top1_mean or not all(0.0 < m < 1.0 for m in self.top1_mean):
            raise SpecError("top1_mean", list(self.top1_mean), "needs values in (0, 1), one per depth")
        if not (isinstance(self.concentration, (int, float)) and 0 < self.concentration < 1e6):
            raise SpecError("concentration", self.concentration, "must be a positive number")
        if any(not 0.0 <= s <= 1.0 for s in self.tail_shares) or sum(self.tail_shares) > 1.0 + 1e-6:
            raise SpecError("tail_shares", list(self.tail_shares), "must be shares in [0, 1] summing to <= 1")
        q, a = self.calibration_q, self.calibration_accept
        if len(q) != len(a) or any(not 0.0 <= x <= 1.0 for x in (*q, *a)):
            raise SpecError("calibration", [list(q), list(a)], "needs equal-length lists of values in [0, 1]")
        if any(y < x for x, y in zip(q, q[1:])) or any(y < x - 1e-9 for x, y in zip(a, a[1:])):
            raise SpecError("calibration", [list(q), list(a)], "must be non-decreasing (isotonic)")

    @property
    def ranks(self) -> int:
        return 1 + len(self.tail_shares)

    def accept_prob(self, q) -> np.ndarray:
        """g(q) = P(a child of confidence q is accepted | its parent was)."""
        q = np.asarray(q, dtype=float)
        if not self.calibration_q:
            return q
        return np.interp(q, self.calibration_q, self.calibration_accept)

    def sample(self, depth, rng: np.random.Generator) -> np.ndarray:
        """Children confidences by rank, shape depth.shape + (ranks,). The model fixes the mean shares,
        not the order: for a very unsure top-1 a lower rank can draw a larger confidence."""
        depth = np.asarray(depth)
        mean = np.asarray(self.top1_mean)[np.minimum(depth, len(self.top1_mean)) - 1]
        top1 = np.asarray(rng.beta(mean * self.concentration, (1.0 - mean) * self.concentration))
        return np.concatenate([top1[..., None], (1.0 - top1)[..., None] * np.asarray(self.tail_shares)], axis=-1)

    def mean_rank_probs(self, depth: int = 1) -> np.ndarray:
        """E[g(q_r)] at a depth, by quadrature over the Beta law of q_1: the implied rank vector."""
        from scipy import stats

        mean = self.top1_mean[min(depth, len(self.top1_mean)) - 1]
        law = stats.beta(mean * self.concentration, (1.0 - mean) * self.concentration)
        grid = (np.arange(4000) + 0.5) / 4000  # midpoint rule on q_1
        weights = law.pdf(grid)
        weights /= weights.sum()
        children = np.concatenate([grid[:, None], (1 - grid)[:, None] * np.asarray(self.tail_shares)], axis=1)
        return weights @ self.accept_prob(children)


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: it holds thousands of positions
class AcceptanceTrace:
    """Teacher-forced acceptance along text the target wrote itself (docs/acceptance-and-trees.md, "Trace replay"): one entry per run,
    a prompt's continuation of at least `run_tokens` new tokens (more, so a last round can accept
    past the end, as a real run does). Position 0 is the prefill's token; position t >= 1 says how
    the draft, given the target's tokens before t, treats the target's token t:
    - `ranks[run][t]`: its rank in the draft's ranking (0: the draft's first choice), greedy runs;
    - `accept_probs[run][t]`: sum_x min(p_t(x), q_t(x)), the probability that one token drafted
      there is accepted, and `bonus_probs[run][t]`: p_t(argmax q_t), the probability that the
      target's token there is the draft's first choice (sampled runs).
    - `top_probs[run]` (optional, greedy): a (positions, K) array of the draft's K largest
      probabilities there, in decreasing order — what a dynamic rule ranks candidates by.
    Entries at t = 0 are unused (rank -1, probability 0)."""

    name: str
    run_tokens: int
    ranks: tuple[tuple[int, ...], ...] = ()
    accept_probs: tuple[tuple[float, ...], ...] = ()
    bonus_probs: tuple[tuple[float, ...], ...] = ()
    source: str = ""
    top_probs: tuple = ()  # of numpy arrays

    def __post_init__(self) -> None:
        runs = self.ranks or self.accept_probs
        if self.run_tokens < 2 or not runs or any(len(run) < self.run_tokens for run in runs):
            raise SpecError("acceptance trace", self.name, f"needs run_tokens >= 2 and runs of at least run_tokens = "
                            f"{self.run_tokens} positions (ranks for greedy, accept_probs for sampled)")
        if self.accept_probs and len(self.bonus_probs) != len(self.accept_probs):
            raise SpecError("acceptance trace", self.name, "bonus_probs must give one run per accept_probs run")
        if self.top_probs and (len(self.top_probs) != len(self.ranks)
                               or any(len(t) != len(r) for t, r in zip(self.top_probs, self.ranks))):
            raise SpecError("acceptance trace", self.name, "top_probs must give one row per rank position, every run")

    @property
    def greedy(self) -> bool:
        return bool(self.ranks)


@dataclass(frozen=True)
class AcceptanceProfile:
    """Acceptance statistics of a draft/target pair (docs/acceptance-and-trees.md, "Conventions").

    `rank_probs[r]`: P(the (r+1)-th ranked child is accepted | its parent was), Sequoia's p_k,
    unconditional over siblings so the sum is <= 1. A scalar alpha is the vector (alpha,).
    `depth_rank[d][r]`: the same at depth d+1; rows past the last reuse the last row.
    """

    name: str
    rank_probs: tuple[float, ...]
    depth_rank: tuple[tuple[float, ...], ...] | None = None
    confidence: ConfidenceModel | None = None
    source: str = ""
    trace: AcceptanceTrace | None = None  # when set, static trees replay it (acceptance/replay.py)

    def __post_init__(self) -> None:
        rows = [self.rank_probs] + list(self.depth_rank or [])
        for d, row in enumerate(rows):
            field = "rank_probs" if d == 0 else f"depth_rank[{d - 1}]"
            if not row:
                raise SpecError(field, list(row), "needs at least one probability")
            for r, value in enumerate(row):
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0.0 <= value <= 1.0):
                    raise SpecError(f"{field}[{r}]", value, "must be a probability in [0, 1]")
            if sum(row) > 1.0 + 1e-6:
                raise SpecError(field, round(sum(row), 6), "ranked children are exclusive: the sum must be <= 1")

    def matrix(self, depth: int, width: int) -> np.ndarray:
        """P[d, r] for d = 1..depth (rows) and r = 1..width (columns), padded with zeros."""
        rows = self.depth_rank or (self.rank_probs,)
        out = np.zeros((depth, width))
        for d in range(depth):
            row = rows[min(d, len(rows) - 1)]
            out[d, :min(width, len(row))] = row[:width]
        return out


@dataclass(frozen=True)
class AdaptRule:
    """DFVG's hardware-aware dynamic drafting."""

    threshold: float = 0.0  # tau: keep candidates with confidence above it
    temperature: float = 0.0  # T of the Gumbel top-k; 0 = deterministic top-k
    k_max: int = 8  # per-level cap: a multiple of the FPGA's parallel lanes
    budget: int = 32  # B: draft tokens per round
    min_depth: int = 1  # D_min = ceil(T_verify / T_draft_step)
    max_depth: int = 16

    def __post_init__(self) -> None:
        if not (0 <= self.threshold < 1 and self.temperature >= 0 and 1 <= self.k_max and 1 <= self.budget
                and 1 <= self.min_depth <= self.max_depth):
            raise InputError(f"adapt rule ({describe(self)}): need 0 <= tau < 1, T >= 0, k_max, budget >= 1, "
                             "1 <= min_depth <= max_depth")


@dataclass(frozen=True)
class Eagle2Rule:
    """EAGLE-2's expand-then-rerank dynamic tree (code defaults: total 60, depth 7, top-k 10)."""

    top_k: int = 10
    depth: int = 6
    total_tokens: int = 60  # verified tokens including the root

    def __post_init__(self) -> None:
        if not (self.top_k >= 1 and self.depth >= 1 and self.total_tokens >= 2):
            raise InputError(f"eagle-2 rule ({describe(self)}): need top_k, depth >= 1 and total_tokens >= 2")


@dataclass(frozen=True)
class DuoRule:
    """DuoDecoding's k-sequence rule with gamma draft tokens per round."""

    gamma: int = 24
    top: int = 8

    def __post_init__(self) -> None:
        if self.gamma < 1 or self.top < 2:
            raise InputError(f"duodecoding rule ({describe(self)}): need gamma >= 1 and top >= 2")


SCHEDULES = ("ar", "sequential", "overlap")


# A draft head conditions on the target's hidden states of the tokens a verification accepts, so its
# next round cannot start before that verification ends (issue 18)
HEAD_OVERLAP = ("a draft head reads the target's features of the tokens just verified: it drafts after "
                "verification, not during it (schedule sequential)")
# A lookup drafts from the tokens a verification accepts, too
LOOKUP_OVERLAP = ("a lookup drafter searches the tokens just verified: it drafts after verification, not "
                  "during it (schedule sequential)")
# Medusa's heads draft every position in one forward: no level-by-level drafting for a rule to steer
ONE_PASS_DYNAMIC = ("Medusa's heads draft every position of a round in one forward on the last hidden state: "
                    "give a static tree (--tree), not a dynamic rule")
# A lookup drafter (prompt lookup, suffix decoding) copies one earlier continuation: a chain, found on
# the verifier's host
LOOKUP_CHAIN = "a lookup drafter proposes one continuation a round: give a chain (--tree chain:K)"
LOOKUP_HOST = "a lookup drafter runs on the verifier's host CPU, not on another device"


def overlap_reason(draft) -> str:
    """Why `draft` cannot draft during verification ('' when it can)."""
    if getattr(draft, "drafts_by_lookup", False):
        return LOOKUP_OVERLAP
    return HEAD_OVERLAP if getattr(draft, "head_kind", "") else ""


def dynamic_reason(draft) -> str:
    """Why `draft` cannot follow a dynamic rule ('' when it can): nothing drafts level by level."""
    if getattr(draft, "drafts_in_one_pass", False):
        return ONE_PASS_DYNAMIC
    return LOOKUP_CHAIN + ", not a dynamic rule" if getattr(draft, "drafts_by_lookup", False) else ""


def draft_depth_cap(draft, depth: int) -> int:
    """`depth`, or fewer when `draft` drafts fewer positions a round (one per Medusa head)."""
    limit = getattr(draft, "max_draft_depth", 0)
    return min(depth, limit) if limit else depth


def draft_depth_reason(draft, depth: int) -> str:
    """Why a round of `depth` levels is more than `draft` can draft ('' when it is not): Medusa
    drafts one position per head."""
    limit = getattr(draft, "max_draft_depth", 0)
    if limit and depth > limit:
        why = ("one per Medusa head" if getattr(draft, "drafts_in_one_pass", False)
               else "its suffix tree's depth less the one token it must match")
        return f"the tree is {depth} levels deep; {draft.name} drafts at most {limit} positions a round ({why})"
    return ""


@dataclass(frozen=True)
class DecodeConfig:
    """One decoding design: which models run where, which tree, which schedule (docs/pipeline.md).

    `system.draft` drafts and `system.verify` verifies (the same device for single-device
    speculative decoding; then `system.link` is None). A static `tree` (a chain is a tree) or a
    `dynamic` rule shapes each round; `schedule` is `ar` (target alone), `sequential` (draft, send,
    verify, send back) or `overlap` (the drafter drafts the next tree on the predicted outcome while
    the verifier works; a miss is redrafted). `gpu_fill` is DFVG's rule that the verifier decodes
    forward by itself while it waits for a draft.
    """

    target: object  # ModelSpec
    system: object  # SystemSpec
    draft: object = None  # ModelSpec; None for AR
    acceptance: AcceptanceProfile | None = None
    tree: TreeSpec | None = None
    dynamic: object = None  # AdaptRule | Eagle2Rule | DuoRule
    schedule: str = "sequential"
    gpu_fill: bool = False
    batch: int = 1
    context: int = 512
    attention_efficiency: float = 1.0  # tree attention vs dense: 1 = TreeSort blocks, < 1 = sparse mask
    record_bytes: int = 16  # per draft token (DFVG: 4 B id, 4 B confidence, 8 B alignment)
    send_draft_probs: bool = False  # stochastic verification ships Q over the vocabulary, fp16
    sync_s: float = 0.0  # host synchronisation per round on host-staged links
    name: str = ""

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise SpecError("schedule", self.schedule, f"allowed: {', '.join(SCHEDULES)}")
        if self.schedule != "ar":
            if self.draft is None or self.acceptance is None:
                raise SpecError("draft", None, "speculative schedules need a draft model and an acceptance profile")
            if (self.tree is None) == (self.dynamic is None):
                raise SpecError("tree", None, "give either a static tree or a dynamic rule")
        for name in ("batch", "record_bytes"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise SpecError(name, getattr(self, name), "must be a positive integer")
        if not isinstance(self.context, int) or self.context < 0:
            raise SpecError("context", self.context, "must be an integer >= 0")
        if not 0 < self.attention_efficiency <= 1:
            raise SpecError("attention_efficiency", self.attention_efficiency, "must be in (0, 1]")
        if self.sync_s < 0:
            raise SpecError("sync_s", self.sync_s, "must be >= 0")
        if self.schedule == "overlap" and overlap_reason(self.draft):
            raise SpecError("schedule", self.schedule, overlap_reason(self.draft))
        if self.schedule != "ar" and self.draft is not None:
            if self.dynamic is not None and dynamic_reason(self.draft):
                raise SpecError("dynamic", describe(self.dynamic), dynamic_reason(self.draft))
            if getattr(self.draft, "drafts_by_lookup", False):
                if self.tree is not None and max(self.tree.level_widths(), default=1) > 1:
                    raise SpecError("tree", self.tree.name or "tree", LOOKUP_CHAIN)
                if self.system.draft.name != self.system.verify.name:
                    raise SpecError("draft device", self.system.draft.name,
                                    LOOKUP_HOST + ": draft and verify on one device (leave --draft-device unset)")
            why = draft_depth_reason(self.draft, self.tree.depth) if self.tree is not None else ""
            if why:
                raise SpecError("tree", self.tree.name or "tree", why)
