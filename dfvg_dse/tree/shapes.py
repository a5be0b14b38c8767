"""Token trees as data: families, conversions and parsing of tree SPEC strings.

A tree is a `TreeSpec` (specs.py): parents in topological order plus each node's sibling rank.
Families (depth counts levels below the root; budget counts draft tokens):
  chain:G     G tokens in a line (depth G, G + 1 nodes with the root)
  seq:KxL     K independent sequences of L tokens (SpecInfer baselines), K children of the root
              of ranks 0..K-1, each followed by L - 1 rank-0 tokens
  kary:KxD    the full K-ary tree of depth D
  choices:[[0],[1],[0,0]]   Medusa/EAGLE path lists (0-based rank per level, root excluded)
  vllm:[(0,),(1,),(0,0)]    vLLM's speculative_token_tree literal (same paths as tuples)
  parents:-1,0,0,1          a parent array (ranks by order of appearance among siblings)
Strings are parsed with regular expressions and `ast.literal_eval` (literals only), never eval.

Limits (docs/acceptance-and-trees.md, "Limits"): every tree read here has at most MAX_TREE_TOKENS
draft tokens, MAX_TREE_DEPTH levels and ranks below MAX_TREE_TOKENS, checked before anything of
that size is built, so a typo such as chain:1000000000 is one line, not gigabytes.
"""

from __future__ import annotations

import ast
import math
import re

from dfvg_dse.specs import InputError, TreeSpec
from dfvg_dse.specs.hardware import MAX_SHOWN, shorten
from dfvg_dse.specs.hardware import show_value as shown

MAX_TREE_TOKENS = 4096  # draft tokens (nodes without the root); also tree optimize's --budget cap
MAX_TREE_DEPTH = 1024  # levels below the root
MAX_LITERAL_CHARS = 1 << 21  # a choices/vllm string past 2 MB is not parsed (give parents instead)


def chain(gamma: int) -> TreeSpec:
    """gamma draft tokens in a line."""
    _check_positive("chain length", gamma)
    _check_size(1 + gamma, gamma)
    return TreeSpec(tuple(range(-1, gamma)), (0,) * (gamma + 1), f"chain:{gamma}")


def sequences(k: int, length: int) -> TreeSpec:
    """k independent sequences of `length` tokens sharing only the root."""
    _check_positive("sequences", k)
    _check_positive("sequence length", length)
    _check_size(1 + k * length, length)
    parents, ranks = [-1], [0]
    for branch in range(k):
        parents.append(0)
        ranks.append(branch)
        for _ in range(length - 1):
            parents.append(len(parents) - 1)
            ranks.append(0)
    return from_parents(parents, ranks, f"seq:{k}x{length}")


def kary(k: int, depth: int) -> TreeSpec:
    """The full k-ary tree of the given depth (levels below the root), in level order."""
    _check_positive("branching", k)
    _check_positive("depth", depth)
    _check_size(1 if depth > MAX_TREE_DEPTH else _kary_nodes(k, depth), depth)  # too deep is said first
    choices = [[]]
    frontier = [[]]
    for _ in range(depth):
        frontier = [path + [r] for path in frontier for r in range(k)]
        choices += frontier
    return from_choices(choices[1:], f"kary:{k}x{depth}")


def from_choices(choices, name: str = "") -> TreeSpec:
    """Medusa/EAGLE path list -> TreeSpec in level order; every prefix must be listed too."""
    _check_size(len(choices) + 1)
    _check_drafts(len(choices) + 1)
    paths = [tuple(_check_path(p)) for p in choices]
    seen: set[tuple[int, ...]] = set()
    for path in paths:
        if path in seen:
            raise InputError(f"tree choices: duplicate path {shown(list(path))}")
        seen.add(path)
    ordered = sorted(paths, key=lambda p: (len(p), p))
    index = {(): 0}
    parents, ranks = [-1], [0]
    for path in ordered:
        if path[:-1] not in index:
            raise InputError(f"tree choices: path {list(path)} has no parent path {list(path[:-1])}")
        index[path] = len(parents)
        parents.append(index[path[:-1]])
        ranks.append(path[-1])
    return TreeSpec(tuple(parents), tuple(ranks), name or f"choices:{len(paths)}")


def to_choices(tree: TreeSpec) -> list[list[int]]:
    """TreeSpec -> Medusa/EAGLE path list (root excluded), in node order."""
    paths: list[list[int]] = [[]]
    for parent, rank in zip(tree.parents[1:], tree.ranks[1:]):
        paths.append(paths[parent] + [rank])
    return paths[1:]


def to_vllm_literal(tree: TreeSpec) -> str:
    """vLLM `speculative_token_tree`: a string of tuples; num_speculative_tokens = its length."""
    return "[" + ", ".join("(" + ", ".join(map(str, p)) + ("," if len(p) == 1 else "") + ")"
                           for p in to_choices(tree)) + "]"


def from_parents(parents, ranks=None, name: str = "") -> TreeSpec:
    """A parent array (root first, -1) -> TreeSpec; missing ranks follow order among siblings."""
    _check_size(len(parents))
    _check_drafts(len(parents))
    parents = [int(p) for p in parents]
    for i, parent in enumerate(parents):
        if parent != -1 if i == 0 else not 0 <= parent < i:
            allowed = "the root, -1" if i == 0 else f"an earlier node, 0..{i - 1} (ancestors first)"
            raise InputError(f"tree: parents[{i}] = {shown(parent)}: must be {allowed}")
    if ranks is None:
        seen: dict[int, int] = {}
        ranks = []
        for i, parent in enumerate(parents):
            ranks.append(seen.get(parent, 0) if i else 0)
            seen[parent] = ranks[-1] + 1
    elif not isinstance(ranks, (list, tuple)) or len(ranks) != len(parents) or not all(
            isinstance(r, int) and not isinstance(r, bool) and 0 <= r < MAX_TREE_TOKENS for r in ranks):
        raise InputError(f"tree: 'ranks' must list one integer in 0..{MAX_TREE_TOKENS - 1} per node "
                         f"({len(parents)} nodes), got {shown(ranks)}")
    tree = TreeSpec(tuple(parents), tuple(int(r) for r in ranks), name or f"parents:{len(parents) - 1}")
    _check_size(tree.n_nodes, tree.depth)
    return tree


def from_document(data: dict, name: str = "") -> TreeSpec:
    """A tree document (a file's `parents` + optional `ranks`, or `choices`) -> TreeSpec; with both
    (an exported design), the parents win. Errors start with `name` (the file) when one is given."""
    try:
        if "choices" in data and "parents" not in data:
            choices = data["choices"]
            return from_choices(choices if isinstance(choices, list) else _literal(str(choices), "choices"), name)
        parents = data["parents"]
        if not isinstance(parents, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in parents):
            raise InputError("tree file: 'parents' must be a list of integers")
        return from_parents(parents, data.get("ranks"), name)
    except InputError as err:
        if not name:
            raise
        raise InputError(f"{shorten(name, 200, keep_end=True)}: {err}") from None  # a path: its end says most


_FAMILY = re.compile(r"^(chain):(\d+)$|^(seq|kary):(\d+)x(\d+)$")


def _count(digits: str) -> int:
    """A family's count; past 12 digits it is only "too many" (int() of a huge string is slow)."""
    return int(digits) if len(digits) <= 12 else 10**12


def parse_tree_spec(text: str) -> TreeSpec:
    """Parse a tree SPEC string (see the module docstring); raises InputError with one line."""
    text = text.strip()
    match = _FAMILY.match(text)
    if match:
        if match.group(1):
            return chain(_count(match.group(2)))
        family, a, b = match.group(3), _count(match.group(4)), _count(match.group(5))
        return sequences(a, b) if family == "seq" else kary(a, b)
    kind, _, body = text.partition(":")
    if kind in ("choices", "vllm"):
        return from_choices(_literal(body, kind), text if len(text) <= 40 else "")
    if kind == "parents":
        _check_size(body.count(",") + 1)  # before converting: the count alone can be past the limit
        try:
            parents = [int(x) for x in body.split(",")]
        except ValueError:
            raise InputError(f"tree {shown(text)}: parents must be integers like -1,0,0,1") from None
        return from_parents(parents)
    raise InputError(f"tree {shown(text)}: expected chain:G, seq:KxL, kary:KxD, choices:[[0],[0,0]], "
                     f"vllm:[(0,),(0,0)] or parents:-1,0,1")


def _literal(body: str, kind: str) -> list:
    if len(body) > MAX_LITERAL_CHARS:
        raise InputError(f"tree {kind}: {len(body):,} characters, past the {MAX_LITERAL_CHARS:,} read as a "
                         "path list; give the tree as parents (a JSON/TOML file)")
    try:
        value = ast.literal_eval(body.strip().strip("'\""))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise InputError(f"tree {kind}: {shown(body[:MAX_SHOWN])} is not a list of paths") from None
    if not isinstance(value, (list, tuple)):
        raise InputError(f"tree {kind}: expected a list of paths, got {type(value).__name__}")
    return list(value)


def _check_path(path) -> list[int]:
    if not isinstance(path, (list, tuple)) or not path or not all(
            isinstance(r, int) and not isinstance(r, bool) and 0 <= r < MAX_TREE_TOKENS for r in path):
        raise InputError(f"tree choices: {shown(path)} is not a path of ranks in 0..{MAX_TREE_TOKENS - 1}")
    if len(path) > MAX_TREE_DEPTH:
        _check_size(1, len(path))
    return list(path)


def _check_positive(what: str, value: int) -> None:
    if value < 1:
        raise InputError(f"tree: {what} must be >= 1, got {value}")


TOO_MANY_NODES = 10**12  # a count past this is only "more than 10^12" (never built, never printed in full)


def _kary_nodes(k: int, depth: int) -> int:
    """Nodes of the full k-ary tree of `depth` levels, 1 + k + ... + k^depth = (k^(depth+1) - 1) / (k - 1),
    in closed form; TOO_MANY_NODES once past it, decided by logarithms before any power is taken."""
    if k == 1:
        return min(depth + 1, TOO_MANY_NODES)
    if (depth + 1) * math.log10(k) > 13:  # k^(depth+1) > 10^13, so the count is past 10^12
        return TOO_MANY_NODES
    return min((k ** (depth + 1) - 1) // (k - 1), TOO_MANY_NODES)


def _check_size(nodes: int, depth: int = 0) -> None:
    """At most MAX_TREE_TOKENS draft tokens and MAX_TREE_DEPTH levels (module docstring)."""
    if nodes - 1 > MAX_TREE_TOKENS:
        count = f"{nodes - 1:,}" if nodes < TOO_MANY_NODES else "more than 10^12"
        raise InputError(f"tree: {count} draft tokens; at most {MAX_TREE_TOKENS} (and depth {MAX_TREE_DEPTH}) "
                         "are supported")
    if depth > MAX_TREE_DEPTH:
        raise InputError(f"tree: depth {depth:,}; at most {MAX_TREE_DEPTH} levels (and {MAX_TREE_TOKENS} "
                         "draft tokens) are supported")


def _check_drafts(nodes: int) -> None:
    """A static tree drafts at least one token, as chain:1 does (the root alone is autoregressive decoding)."""
    if nodes < 2:
        raise InputError("tree: no draft token below the root; the smallest tree is chain:1 (for autoregressive "
                         "decoding, estimate --schedule ar)")


def draw_tree(tree: TreeSpec, profile=None) -> list[str]:
    """Terminal drawing: one line per node, r<k> = the draft's k-th choice (0-based rank); with a
    profile, p = P(accepted | parent accepted) and f = P(the whole path is accepted)."""
    children: dict[int, list[int]] = {}
    for i in range(1, tree.n_nodes):
        children.setdefault(tree.parents[i], []).append(i)
    depths = tree.depths
    table = profile.matrix(max(tree.depth, 1), max(tree.ranks) + 1) if profile is not None else None
    scores = [1.0] * tree.n_nodes
    lines = [f"root  ({tree.budget} draft tokens, depth {tree.depth}, widths {list(tree.level_widths())})"]
    stack = [(c, "", k == len(children.get(0, [])) - 1) for k, c in enumerate(children.get(0, []))][::-1]
    while stack:
        node, prefix, last = stack.pop()
        label = f"r{tree.ranks[node]}"
        if table is not None:
            p = table[depths[node] - 1, tree.ranks[node]]
            scores[node] = scores[tree.parents[node]] * p
            label += f"  p={p:.3f} f={scores[node]:.3f}"
        lines.append(f"{prefix}{'└─ ' if last else '├─ '}{label}")
        kids = children.get(node, [])
        below = prefix + ("   " if last else "│  ")
        stack.extend((c, below, k == len(kids) - 1) for k, c in reversed(list(enumerate(kids))))
    return lines
