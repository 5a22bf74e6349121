"""What the demo's token-merging stage shows, as data
(:func:`tome_comparison`): HetDPT + ToMe against dense + ToMe at equal
``r``, the accuracy / throughput front, ``removed_attn`` 'norm' against
'none', and the paper's Fig. 8 -- each model's curve with a
token-reduction method made monotone as its upper envelope, and the
throughput ratio of HetDPT over dense read off the two envelopes at equal
accuracy and at equal accuracy drop, interpolating linearly along each.
The words are the report's (:mod:`.tome_report`)."""

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

from .results import Claim, CurvePoint, TomePoint, TomeResult

#: The paper's Fig. 8 numbers (DeiT-B on a GPU, docs/method.md), beside
#: which the report sets the demo's: (HetDPT img/s, dense img/s, where).
PAPER_FIG8 = dict(
    tome=(1410.6, 884.07, 'at about a 0.9-point accuracy drop'),
    gtp=(1461.76, 1175.5, 'at 81.47 % top-1'),
)
#: The drop (points) at which the paper reads its ToMe ratio.
PAPER_DROP = 0.9
#: Fig. 8's token-reduction methods, in the report's order, and their names.
FIG8_METHODS = dict(tome='ToMe', gtp='GTP-ViT')


@dataclass
class EqualR:
    """HetDPT + ToMe against dense + ToMe at one ``r``."""

    r: int
    dense_accuracy: float
    hetdpt_accuracy: float
    speedup: float  # measured throughput, HetDPT over dense


@dataclass
class RemovedAttnRow:
    """The attention-only split at one ``r > 0``, its attention-removed
    blocks merging on their normed tokens ('norm') or not at all
    ('none')."""

    r: int
    norm_accuracy: float
    none_accuracy: float
    norm_throughput: float
    none_throughput: float
    norm_macs: int
    none_macs: int
    norm_speedup: float  # norm over none


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


@dataclass
class TomeComparison:
    equal_r: List[EqualR]
    front: List[TomePoint]  # of the dense and HetDPT points
    removed_attn: List[RemovedAttnRow]
    removed_attn_front: List[TomePoint]
    fig8: List[Fig8Method]  # ToMe, then GTP-ViT
    #: ``tome_hetdpt_faster``: faster than dense at every r (the paper
    #: measures 1.5-1.6x on DeiT-B on a GPU)
    claims: List[Claim]


def by_model(points: Sequence[TomePoint]) -> Dict[str, Dict[int, TomePoint]]:
    rows: Dict[str, Dict[int, TomePoint]] = {}
    for point in points:
        rows.setdefault(point.model, {})[point.r] = point
    return rows


def undominated(points):
    """The points no other point beats in both accuracy and throughput (at
    least as good in both, better in one), in their order, ties kept."""
    return [
        p
        for p in points
        if not any(
            q.accuracy >= p.accuracy
            and q.throughput >= p.throughput
            and (q.accuracy, q.throughput) != (p.accuracy, p.throughput)
            for q in points
        )
    ]


def pareto_front(points: Sequence[TomePoint]) -> List[TomePoint]:
    """The undominated points, fastest first."""
    return sorted(undominated(points), key=lambda p: -p.throughput)


def envelope(points: Sequence[CurvePoint]) -> List[CurvePoint]:
    """The upper envelope of one curve: its undominated points once each,
    slowest (most accurate) first; along it accuracy falls strictly as
    throughput rises."""
    kept: Dict[tuple, CurvePoint] = {}
    for p in undominated(points):
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


def tome_comparison(tome: TomeResult) -> TomeComparison:
    rows = by_model(tome.points)
    dense, hetdpt = rows['dense'], rows['hetdpt']
    norm, none = rows['attn_only'], rows['attn_only_none']
    equal_r = [
        EqualR(
            r=r,
            dense_accuracy=dense[r].accuracy,
            hetdpt_accuracy=hetdpt[r].accuracy,
            speedup=hetdpt[r].throughput / dense[r].throughput,
        )
        for r in tome.r
    ]
    speedups = [row.speedup for row in equal_r]
    removed = [
        RemovedAttnRow(
            r=r,
            norm_accuracy=norm[r].accuracy,
            none_accuracy=none[r].accuracy,
            norm_throughput=norm[r].throughput,
            none_throughput=none[r].throughput,
            norm_macs=norm[r].macs,
            none_macs=none[r].macs,
            norm_speedup=norm[r].throughput / none[r].throughput,
        )
        for r in tome.r
        if r
    ]
    # Fig. 8's drops are from each model's accuracy without token
    # reduction (r=0).
    base = {model: rows[model][0].accuracy for model in ('dense', 'hetdpt')}
    return TomeComparison(
        equal_r=equal_r,
        front=pareto_front(
            [p for p in tome.points if p.model in ('dense', 'hetdpt')]
        ),
        removed_attn=removed,
        # r=0 of 'none' is the model of r=0 of 'norm' (nothing merged).
        removed_attn_front=pareto_front(
            [
                p
                for p in tome.points
                if p.model == 'attn_only'
                or (p.model == 'attn_only_none' and p.r)
            ]
        ),
        fig8=[fig8_method(m, tome.curves, base) for m in FIG8_METHODS],
        claims=[
            Claim(
                'tome_hetdpt_faster',
                holds=all(s > 1 for s in speedups),
                numbers=dict(
                    min_speedup=min(speedups), max_speedup=max(speedups)
                ),
            )
        ],
    )
