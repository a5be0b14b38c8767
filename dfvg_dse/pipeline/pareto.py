"""Pareto kernels on two objectives (throughput maximised, energy minimised), numpy only."""

from __future__ import annotations

import numpy as np


def pareto_mask(values: np.ndarray) -> np.ndarray:
    """Non-dominated rows of `values` (n, 2) where column 0 is maximised and column 1 minimised."""
    order = np.lexsort((values[:, 1], -values[:, 0]))  # best throughput first, then least energy
    energy = values[order, 1]
    best_before = np.concatenate([[np.inf], np.fmin.accumulate(energy)[:-1]]) if len(energy) else energy
    mask = np.zeros(len(values), dtype=bool)
    mask[order] = energy < best_before  # less energy than every faster (or equally fast, listed earlier) point
    return mask


def hypervolume(front: np.ndarray, reference: tuple[float, float]) -> float:
    """Area dominated by a 2-objective front (max column 0, min column 1) up to a reference point.

    NOTE: optuna's own hypervolume (optuna._hypervolume) is private API; in two dimensions the
    exact value is a sort and a sum.
    """
    points = front[(front[:, 0] > reference[0]) & (front[:, 1] < reference[1])]
    points = points[pareto_mask(points)] if len(points) else points
    order = np.argsort(-points[:, 0])
    area, last_energy = 0.0, reference[1]
    for x, y in points[order]:
        area += (x - reference[0]) * (last_energy - y) if y < last_energy else 0.0
        last_energy = min(last_energy, y)
    return float(area)
