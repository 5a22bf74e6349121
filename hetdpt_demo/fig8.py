"""The paper's Fig. 8 on the demo, as data: each model's accuracy /
throughput curve with a token-reduction method, made monotone as its upper
envelope (the points no other point of the curve beats in both), and the
throughput ratio of HetDPT over dense read off the two envelopes at equal
accuracy and at equal accuracy drop, interpolating linearly along each."""

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

from .results import CurvePoint

#: The paper's Fig. 8 numbers (DeiT-B on a GPU, docs/method.md), beside
#: which the report sets the demo's: (HetDPT img/s, dense img/s, where).
PAPER_FIG8 = dict(
    tome=(1410.6, 884.07, 'at about a 0.9-point accuracy drop'),
    gtp=(1461.76, 1175.5, 'at 81.47 % top-1'),
)
#: The drop (points) at which the paper reads its ToMe ratio.
PAPER_DROP = 0.9


@dataclass
class CurveRatio:
    """HetDPT over dense at one accuracy (%) or one drop (points)."""

    level: float
    dense_throughput: float
    hetdpt_throughput: float
    ratio: float


@dataclass
class Fig8Method:
    """Dense and HetDPT with one method: their envelopes (fastest last)
    and the ratios read off them."""

    method: str
    envelopes: Dict[str, List[CurvePoint]]
    equal_accuracy: List[CurveRatio]
    equal_drop: List[CurveRatio]
    #: the ratio at the paper's drop, ``None`` outside both curves' drops
    at_paper_drop: Optional[CurveRatio]


def envelope(points: Sequence[CurvePoint]) -> List[CurvePoint]:
    """The upper envelope of one curve: the points that no other point is
    at least as good as in both accuracy and throughput (better in one),
    once each, slowest (most accurate) first; along it accuracy falls
    strictly as throughput rises."""
    kept: Dict[tuple, CurvePoint] = {}
    for p in points:
        if not any(
            q.accuracy >= p.accuracy
            and q.throughput >= p.throughput
            and (q.accuracy, q.throughput) != (p.accuracy, p.throughput)
            for q in points
        ):
            kept.setdefault((p.accuracy, p.throughput), p)
    return sorted(kept.values(), key=lambda p: p.throughput)


def throughput_at(curve: Sequence[CurvePoint], accuracy: float):
    """Throughput of an envelope at ``accuracy``, linear between its
    points (``None`` outside its accuracies)."""
    accuracies = np.array([p.accuracy for p in curve][::-1])
    if not accuracies[0] <= accuracy <= accuracies[-1]:
        return None
    throughputs = np.array([p.throughput for p in curve][::-1])
    return float(np.interp(accuracy, accuracies, throughputs))


def ratio_at(dense, hetdpt, dense_accuracy, hetdpt_accuracy, level):
    dense_speed = throughput_at(dense, dense_accuracy)
    hetdpt_speed = throughput_at(hetdpt, hetdpt_accuracy)
    if dense_speed is None or hetdpt_speed is None:
        return None
    return CurveRatio(
        level, dense_speed, hetdpt_speed, hetdpt_speed / dense_speed
    )


def fig8_method(
    method: str, points: Sequence[CurvePoint], base: Dict[str, float]
) -> Fig8Method:
    """Read dense against HetDPT with ``method``: at every accuracy and at
    every drop (below ``base``, each model's accuracy without token
    reduction) that a point of either envelope has and both reach."""
    envelopes = {
        model: envelope(
            [p for p in points if p.model == model and p.method == method]
        )
        for model in ('dense', 'hetdpt')
    }
    dense, hetdpt = envelopes['dense'], envelopes['hetdpt']
    accuracies = sorted({p.accuracy for p in dense + hetdpt}, reverse=True)
    drops = sorted(
        {base[m] - p.accuracy for m, curve in envelopes.items() for p in curve}
    )
    equal_accuracy = [ratio_at(dense, hetdpt, a, a, a) for a in accuracies]
    equal_drop = [
        ratio_at(dense, hetdpt, base['dense'] - d, base['hetdpt'] - d, d)
        for d in drops
    ]
    return Fig8Method(
        method=method,
        envelopes=envelopes,
        equal_accuracy=[row for row in equal_accuracy if row],
        equal_drop=[row for row in equal_drop if row],
        at_paper_drop=ratio_at(
            dense,
            hetdpt,
            base['dense'] - PAPER_DROP,
            base['hetdpt'] - PAPER_DROP,
            PAPER_DROP,
        ),
    )
