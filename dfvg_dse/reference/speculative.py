"""Speculative decoding with the reference engine: a Drafter proposes a token tree, a Verifier checks
it in one tree forward, and `generate_speculative` runs the two in one process (`stages.py` runs
the same two objects in two processes joined by a link).

Greedy (temperature 0): a node is kept while it is the target's argmax, then the target's own next
token (the bonus) follows, so the output equals greedy autoregressive decoding token for token.

Sampling (temperature T > 0, top-p): p and q are the target's and draft's softmax(logits / T) after
the top-p cut (transformers' TopPLogitsWarper). A static tree's children are samples from q:
- "sequoia" (Chen et al., arXiv 2402.12374, Alg. 1): siblings drawn without replacement; child i is
  kept with probability min(1, r(x_i) / q_i(x_i)), where r starts at p and becomes
  norm(max(r - q_i, 0)) after each rejection and q_i is q with the rejected siblings removed.
- "specinfer" (Miao et al., ASPLOS 2024, multi-step speculative sampling): siblings i.i.d. from q,
  the same walk with q never renormalised.
A dynamically drafted tree's children are chosen, not sampled, so it is verified by "match": sample
the target's token at the node and follow the child that carries it. All three are lossless: the
output follows the target's distribution (tests/reference/test_sampling.py, a chi-square test).

Drafting rules: a static tree (parents, ranks), DFVG's ADAPT (threshold, Gumbel temperature,
per-level cap, budget, minimum depth) and EAGLE-2's expand-then-rerank (specs.decoding rules).
Chains draft one cached token per level; other trees re-run the partial tree each level so every
node attends to its ancestors only. After a verdict the drafter keeps the accepted rows it already
computed, so accepted tokens are never run twice.

A draft head (eagle.py: HeadModel) drafts from the target's features instead: the verifier sends
them with each verdict (Verdict.features: the root's and every accepted node's), each level runs only
its new rows, each seeing its ancestors, and after a verdict the accepted tokens are run again with
the target's true features in place of the head's predictions (EAGLE's first draft step).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from dfvg_dse.reference.eagle import FEATURE_DTYPE, HeadModel, HeadWeights
from dfvg_dse.reference.sampling import GREEDY, Sampling, distribution, sample_token, wire_distribution
from dfvg_dse.reference.tiny_lm import KVCache, PackedWeights, ReferenceConfig, forward, pack_weights
from dfvg_dse.reference.torch_lm import TorchModel, TorchWeights
from dfvg_dse.specs.backend import NUMPY, ReferenceBackend
from dfvg_dse.specs.decoding import AdaptRule, Eagle2Rule

# One token record on the link: id (int32), parent (int32), confidence (float32), rank (int16),
# flags (uint16): 16 bytes, the FPGA's aligned record.
TOKEN_RECORD = np.dtype([("token", "<i4"), ("parent", "<i4"), ("confidence", "<f4"), ("rank", "<i2"),
                         ("flags", "<u2")])
TOKEN_RECORD_BYTES = TOKEN_RECORD.itemsize
# A draft distribution travels as float16 per vocabulary entry (sampling only; DFVG's and the cost
# model's convention). The drafter samples from the float16-rounded q itself, renormalised, so the
# verifier's q is exactly the one the samples came from and verification stays lossless.
PROBABILITY_BYTES = 2


class Model:
    """Packed weights, config and a KV cache: one side of the decoder."""

    def __init__(self, weights: dict | PackedWeights, config: ReferenceConfig):
        self.weights = weights if isinstance(weights, PackedWeights) else pack_weights(weights, config)
        self.config = config
        self.cache = KVCache(config.spec.n_layers)

    def fresh(self) -> "Model":
        """The same weights with an empty cache."""
        return Model(self.weights, self.config)

    def run(self, tokens, positions, parents=None, with_features: bool = False):
        return forward(self.weights, self.config, tokens, positions, self.cache, parents, with_features=with_features)


def make_model(weights, config: ReferenceConfig):
    """A Model, a TorchModel or a HeadModel, by its weights (what a stage process rebuilds)."""
    if isinstance(weights, HeadWeights):
        return HeadModel(weights, config)
    if isinstance(weights, TorchWeights):
        return TorchModel(weights, config)
    return Model(weights, config)


def load_model(tensors: dict, config: ReferenceConfig, backend: ReferenceBackend = NUMPY):
    """A checkpoint's tensors (by name) on the backend that runs its forwards."""
    if backend.name == "numpy":
        return Model(tensors, config)
    return TorchModel(TorchWeights(pack_weights(tensors, config), backend), config)


def _depths(parents: list[int]) -> list[int]:
    """Depth of every node below the root (node 0), parents before children."""
    depth = [0] * len(parents)
    for i in range(1, len(parents)):
        depth[i] = depth[parents[i]] + 1
    return depth


def _children(parents: list[int]) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for i in range(1, len(parents)):
        kids.setdefault(parents[i], []).append(i)
    return kids


@dataclass
class DraftTree:
    """A drafted tree, root (node 0, the newest verified token) first, parents before children.
    `dists` holds q at every node whose children were sampled from it (sampling with a static
    tree); `sampled` says which verification applies (False: children were chosen, verify by match)."""

    tokens: list[int]
    parents: list[int]
    ranks: list[int]
    confidences: list[float]
    dists: dict[int, np.ndarray] = field(default_factory=dict)
    sampled: bool = False

    def rank0_path(self) -> list[int]:
        """Nodes along the draft's first choices from the root: the overlap schedule's prediction."""
        kids, path = _children(self.parents), [0]
        while True:
            first = [c for c in kids.get(path[-1], []) if self.ranks[c] == 0]
            if not first:
                return path
            path.append(first[0])

    def link_bytes(self) -> int:
        """Bytes sent drafter -> verifier: one record per draft token and q per sampled parent."""
        vocab = len(next(iter(self.dists.values()))) if self.dists else 0
        return TOKEN_RECORD_BYTES * (len(self.tokens) - 1) + PROBABILITY_BYTES * vocab * len(self.dists)


@dataclass(frozen=True)
class Verdict:
    """Accepted node path (root first) and the target's next token after it."""

    path: tuple[int, ...]
    bonus: int
    features: np.ndarray | None = field(default=None, compare=False)  # for a draft head: (len(path), d) float16

    def link_bytes(self) -> int:
        """Accepted draft tokens plus the bonus, and the target features a draft head reads."""
        return TOKEN_RECORD_BYTES * len(self.path) + (0 if self.features is None else self.features.nbytes)


class Drafter:
    """The draft side: its model and cache, a drafting rule and its random generator. The cache
    holds a verified prefix (`known`) and, after a proposal, the tree rows it computed (`rows`)."""

    def __init__(self, model: Model, rule, sampling: Sampling = GREEDY, seed: int = 0):
        self.model, self.rule, self.sampling = model, rule, sampling
        self.rng = np.random.default_rng(seed)
        self.known: list[int] = []  # tokens whose keys and values the cache holds, in order
        self.rows: list[int] = []  # tree nodes of the last proposal cached after `known`
        self.tree: DraftTree | None = None
        self.head = getattr(model, "drafts_from_features", False)
        self.outputs: dict[int, np.ndarray] = {}  # a head's predicted feature at each drafted node

    def sync(self, context: list[int]) -> np.ndarray | None:
        """Make the cache hold exactly `context` (dropping tree rows and diverged tokens, running
        what is missing); returns the logits after the last token run, or None when nothing ran."""
        cache = self.model.cache
        limit = min(len(self.known), len(context))
        if self.known[:limit] == context[:limit]:  # the usual case, compared in C
            common = limit
        else:
            common = next(i for i in range(limit) if self.known[i] != context[i])
        if cache.length != common or self.rows:
            cache.keep(common, [])
        self.known, self.rows = list(context[:common]), []
        missing = context[common:]
        if not missing:
            return None
        logits = self.model.run(missing, np.arange(common, len(context)))
        self.known = list(context)
        return logits[-1]

    def accept(self, path) -> None:
        """Keep the cached rows of the accepted nodes (a path's rows are a prefix of its ancestors)."""
        if self.tree is None:
            return
        if self.head:  # accepted tokens run again with the target's features (sync), not the predictions
            self.model.cache.keep(len(self.known), [])
            self.rows = []
            return
        kept = [self.rows.index(node) for node in path if node in self.rows]
        self.model.cache.keep(len(self.known), kept)
        self.known += [self.tree.tokens[self.rows[i]] for i in kept]
        self.rows = []

    def propose(self, context: list[int]) -> DraftTree:
        """Draft a tree whose root is context[-1]."""
        self.sync(context[:-1])
        position = len(context) - 1
        if isinstance(self.rule, AdaptRule):
            tree = self._adapt(context[-1], position)
        elif isinstance(self.rule, Eagle2Rule):
            tree = self._eagle2(context[-1], position)
        else:
            tree = self._static(context[-1], position, *self.rule)
        self.tree = tree
        return tree

    def predict_bonus(self, context: list[int]) -> int:
        """The draft's own next token after `context` (argmax): the overlap schedule's guess of the
        verifier's bonus token. Leaves the cache holding `context`."""
        logits = self.sync(context)
        if logits is None:  # already cached: run the last token again to read its logits
            self.model.cache.keep(len(context) - 1, [])
            self.known = list(context[:-1])
            logits = self.sync(context)
        return int(np.argmax(logits))

    # -- drafting rules -------------------------------------------------------------------
    def _level_logits(self, tokens, parents, depth, known_nodes, position) -> dict[int, np.ndarray]:
        """Draft logits after every node in `known_nodes` (a topological prefix of the tree); the
        cache keeps them as tree rows. A chain runs only its newest node."""
        if self.head:
            return self._head_level(tokens, parents, depth, known_nodes, position)
        cache, prefix = self.model.cache, len(self.known)
        chain = all(parents[i] == i - 1 for i in known_nodes[1:]) and known_nodes == self.rows + [known_nodes[-1]]
        if chain:
            logits = self.model.run([tokens[known_nodes[-1]]], [position + depth[known_nodes[-1]]])
            self.rows = list(known_nodes)
            return {known_nodes[-1]: logits[-1]}
        cache.keep(prefix, [])
        logits = self.model.run([tokens[i] for i in known_nodes], [position + depth[i] for i in known_nodes],
                                [-1] + [known_nodes.index(parents[i]) for i in known_nodes[1:]])
        self.rows = list(known_nodes)
        return dict(zip(known_nodes, logits))

    def _head_level(self, tokens, parents, depth, known_nodes, position) -> dict[int, np.ndarray]:
        """A draft head's level: only the nodes without a row yet, each reading its parent row's
        predicted feature (the root: the target's feature before it) and seeing the verified prefix
        and its cached ancestors."""
        if not self.rows:
            self.outputs = {}
        new = [i for i in known_nodes if i not in self.rows]
        prefix = len(self.known)
        visible = np.ones((len(new), prefix + len(self.rows)), dtype=bool)
        for j, node in enumerate(new):
            ancestors, at = set(), parents[node]
            while at >= 0:
                ancestors.add(at)
                at = parents[at]
            visible[j, prefix:] = [row in ancestors for row in self.rows]
        features = [self.model.target_feature(position - 1) if i == 0 else self.outputs[parents[i]] for i in new]
        logits, predicted = self.model.run_rows([tokens[i] for i in new], [position + depth[i] for i in new],
                                                features, visible)
        self.rows += new
        self.outputs.update(zip(new, predicted))
        return dict(zip(new, logits))

    def _static(self, root: int, position: int, parents, ranks) -> DraftTree:
        parents, ranks = list(parents), list(ranks)
        depth, kids = _depths(parents), _children(parents)
        tokens, confidences = [root] + [0] * (len(parents) - 1), [1.0] * len(parents)
        dists: dict[int, np.ndarray] = {}
        rows: dict[int, np.ndarray] = {}
        for level in range(1, max(depth, default=0) + 1):
            known = [i for i in range(len(parents)) if depth[i] < level]
            rows.update(self._level_logits(tokens, parents, depth, known, position))
            for node in [i for i in known if depth[i] == level - 1 and i in kids]:
                if self.sampling.greedy:  # the cheap path: one softmax for the confidences, argmax for rank 0
                    row = rows[node]
                    weights = np.exp(row - row.max())
                    q = weights / weights.sum()
                    wanted = [ranks[child] for child in kids[node]]
                    order = [int(np.argmax(row))] if max(wanted) == 0 else np.argsort(-row, kind="stable")
                    for child in kids[node]:
                        tokens[child] = int(order[ranks[child]])
                else:  # children are samples from q, in the order they were drawn
                    q = wire_distribution(distribution(rows[node], self.sampling))
                    dists[node] = q
                    left = q.copy()
                    for child in kids[node]:
                        tokens[child] = sample_token(left, self.rng)
                        if self.sampling.verification == "sequoia":
                            left[tokens[child]] = 0.0
                            if left.sum() <= 0:
                                left = q.copy()  # more siblings than tokens with mass: repeat
                for child in kids[node]:
                    confidences[child] = float(q[tokens[child]])
        return DraftTree(tokens, parents, ranks, confidences, dists, sampled=not self.sampling.greedy)

    def _grow(self, root: int, position: int, choose, more) -> DraftTree:
        """A dynamic tree grown level by level while more(next level) holds: choose(level, candidates)
        picks which candidates (parent, token, rank, confidence, log path probability) become nodes."""
        tokens, parents, ranks, confidences, logp = [root], [-1], [0], [1.0], [0.0]
        frontier = [0]
        level = 0
        while frontier and more(level + 1):
            level += 1
            depth = _depths(parents)
            rows = self._level_logits(tokens, parents, depth, list(range(len(tokens))), position)
            candidates = []
            for node in frontier:
                q = distribution(rows[node], self.sampling)
                order = np.argsort(-q, kind="stable")
                for rank, token in enumerate(order[:self._width()]):
                    if q[token] > 0:
                        candidates.append((node, int(token), rank, float(q[token]), logp[node] + np.log(q[token])))
            picked = choose(level, candidates)
            frontier = []
            for node, token, rank, confidence, score in picked:
                tokens.append(token)
                parents.append(node)
                ranks.append(rank)
                confidences.append(confidence)
                logp.append(score)
                frontier.append(len(tokens) - 1)
        return DraftTree(tokens, parents, ranks, confidences, sampled=False)

    def _width(self) -> int:
        return self.rule.k_max if isinstance(self.rule, AdaptRule) else self.rule.top_k

    def _adapt(self, root: int, position: int) -> DraftTree:
        rule, spent = self.rule, [0]

        def choose(level, candidates):
            eligible = [c for c in candidates if c[3] > rule.threshold]
            forced = not eligible and level <= rule.min_depth
            if forced:  # D_min: keep drafting below the threshold, one node per level
                eligible = candidates
            if rule.temperature > 0:  # Gumbel top-k on log P_cum / T: sampling without replacement
                keys = [c[4] / rule.temperature + self.rng.gumbel() for c in eligible]
            else:
                keys = [c[4] for c in eligible]
            order = sorted(range(len(eligible)), key=lambda i: -keys[i])
            reserve = max(0, min(rule.min_depth, rule.max_depth) - level)  # one node per level owed to D_min
            count = min(rule.k_max, len(eligible), max(rule.budget - spent[0] - reserve, 1), rule.budget - spent[0])
            if forced:
                count = min(count, 1)
            spent[0] += count
            return [eligible[i] for i in sorted(order[:count])]  # parents keep their order

        return self._grow(root, position, choose, lambda level: level <= rule.max_depth and spent[0] < rule.budget)

    def _eagle2(self, root: int, position: int) -> DraftTree:
        rule = self.rule

        def choose(level, candidates):
            best = sorted(candidates, key=lambda c: -c[4])[:rule.top_k]
            return [c for c in candidates if c in best]

        grown = self._grow(root, position, choose, lambda level: level <= rule.depth)
        # rerank every node by path probability, keep the best total_tokens - 1; a child never
        # outscores its parent, so ancestors are kept first and the result is a tree
        nodes = sorted(range(1, len(grown.tokens)), key=lambda i: (-grown_score(grown, i), i))[:rule.total_tokens - 1]
        keep = [0] + sorted(nodes)
        index = {old: new for new, old in enumerate(keep)}
        return DraftTree([grown.tokens[i] for i in keep], [-1] + [index[grown.parents[i]] for i in keep[1:]],
                         [grown.ranks[i] for i in keep], [grown.confidences[i] for i in keep], sampled=False)


def grown_score(tree: DraftTree, node: int) -> float:
    """Log path probability of a node under the draft (product of confidences from the root)."""
    score = 0.0
    while node > 0:
        score += float(np.log(tree.confidences[node]))
        node = tree.parents[node]
    return score


class Verifier:
    """The target side: its model and cache (every verified token but the newest), and its generator."""

    def __init__(self, model: Model, sampling: Sampling = GREEDY, seed: int = 0, features: bool = False):
        self.model, self.sampling, self.features = model, sampling, features
        self.rng = np.random.default_rng(seed)
        self.prompt_features: np.ndarray | None = None  # features=True: the prompt's, for a draft head

    def choose(self, logits: np.ndarray) -> int:
        if self.sampling.greedy:
            return int(np.argmax(logits))
        return sample_token(distribution(logits, self.sampling), self.rng)

    def start(self, prompt: list[int]) -> int:
        """Prefill the prompt; the first new token."""
        self.model.cache.keep(0, [])
        if not self.features:
            return self.choose(self.model.run(prompt, np.arange(len(prompt)))[-1])
        logits, hidden = self.model.run(prompt, np.arange(len(prompt)), with_features=True)
        self.prompt_features = hidden.astype(FEATURE_DTYPE)
        return self.choose(logits[-1])

    def step(self, token: int) -> int:
        """Autoregressive: run the newest token, return the next."""
        position = self.model.cache.length
        return self.choose(self.model.run([token], [position])[-1])

    def verify(self, tree: DraftTree) -> Verdict:
        """One tree forward, the acceptance walk, then rollback to the accepted path."""
        prefix = self.model.cache.length
        depth = _depths(tree.parents)
        if self.features:
            logits, hidden = self.model.run(tree.tokens, [prefix + d for d in depth], tree.parents, with_features=True)
        else:
            logits, hidden = self.model.run(tree.tokens, [prefix + d for d in depth], tree.parents), None
        verdict = self._walk(tree, logits)
        self.model.cache.keep(prefix, list(verdict.path))
        if hidden is not None:  # the root's and every accepted node's feature, as a draft head reads them
            verdict = Verdict(verdict.path, verdict.bonus, hidden[list(verdict.path)].astype(FEATURE_DTYPE))
        return verdict

    def _walk(self, tree: DraftTree, logits: np.ndarray) -> Verdict:
        kids, path = _children(tree.parents), [0]
        while True:
            node = path[-1]
            children = kids.get(node, [])
            if self.sampling.greedy:
                best = int(np.argmax(logits[node]))
                nxt = next((c for c in children if tree.tokens[c] == best), None)
                if nxt is None:
                    return Verdict(tuple(path), best)
            elif tree.sampled and node in tree.dists:
                nxt, residual = self._rejection(tree, node, children, distribution(logits[node], self.sampling))
                if nxt is None:
                    return Verdict(tuple(path), sample_token(residual, self.rng))
            else:  # chosen children (or a leaf): sample the target's token and follow it if drafted
                token = self.choose(logits[node])
                nxt = next((c for c in children if tree.tokens[c] == token), None)
                if nxt is None:
                    return Verdict(tuple(path), token)
            path.append(nxt)

    def _rejection(self, tree: DraftTree, node: int, children: list[int], p: np.ndarray):
        """Multi-candidate speculative sampling at one node: (accepted child or None, residual)."""
        q = tree.dists[node].copy()
        residual = p.copy()
        for child in children:
            x = tree.tokens[child]
            if q[x] > 0 and self.rng.random() * q[x] < residual[x]:
                return child, residual
            residual = np.maximum(residual - q, 0.0)
            total = residual.sum()
            residual = p.copy() if total <= 1e-12 else residual / total
            if self.sampling.verification == "sequoia":
                q[x] = 0.0
                mass = q.sum()
                if mass <= 0:
                    break
                q /= mass
        return None, residual


def generate_ar(target: Model, prompt: list[int], max_new_tokens: int, sampling: Sampling = GREEDY,
                seed: int = 0) -> list[int]:
    """Autoregressive decoding: the reference output (greedy) or distribution (sampling)."""
    verifier = Verifier(target, sampling, seed)
    out = [verifier.start(prompt)]
    while len(out) < max_new_tokens:
        out.append(verifier.step(out[-1]))
    return out


def trace_record(round_index: int, tree: DraftTree, verdict: Verdict, times: dict[str, float]) -> dict:
    """One round in the calibration trace format (docs/trace-format.md)."""
    return {"round": round_index, "parents": list(tree.parents), "ranks": [int(r) for r in tree.ranks],
            "confidences": [float(c) for c in tree.confidences], "accepted": list(verdict.path), **times,
            "link_bytes": tree.link_bytes() + verdict.link_bytes()}


def generate_speculative(target: Model, draft: Model, prompt: list[int], max_new_tokens: int, parents=None,
                         ranks=None, trace: list | None = None, *, rule=None, sampling: Sampling = GREEDY,
                         seed: int = 0) -> tuple[list[int], np.ndarray]:
    """Speculative decoding in one process, sequential schedule. The drafting rule is a static tree
    (parents, ranks of a TreeSpec, root first) or `rule` (AdaptRule, Eagle2Rule). Returns the new
    tokens and accept_counts[k]: rounds that kept k draft tokens. When `trace` is a list, one record
    per round is appended in the calibration trace format, stage times in seconds from the start."""
    rule = rule if rule is not None else (tuple(parents), tuple(ranks))
    head = getattr(draft, "drafts_from_features", False)
    drafter, verifier = Drafter(draft, rule, sampling, seed + 1), Verifier(target, sampling, seed, features=head)
    clock = time.perf_counter
    origin = clock()
    out = [verifier.start(prompt)]
    if head:
        draft.add_features(verifier.prompt_features)
    counts: list[int] = []
    while len(out) < max_new_tokens:
        draft_start = clock()
        tree = drafter.propose(prompt + out)
        verify_start = clock()
        verdict = verifier.verify(tree)
        verify_end = clock()
        if head:
            draft.add_features(verdict.features)
        drafter.accept(verdict.path)
        accepted = len(verdict.path) - 1
        counts += [0] * (accepted + 1 - len(counts))
        counts[accepted] += 1
        if trace is not None:
            trace.append(trace_record(sum(counts) - 1, tree, verdict, {
                "draft_start_s": draft_start - origin, "draft_end_s": verify_start - origin,
                "verify_start_s": verify_start - origin, "verify_end_s": verify_end - origin}))
        out += [tree.tokens[i] for i in verdict.path[1:]] + [verdict.bonus]
    histogram = np.zeros(max(len(parents) if parents is not None else 0, len(counts)), dtype=int)
    histogram[:len(counts)] = counts
    return out[:max_new_tokens], histogram
