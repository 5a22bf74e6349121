"""What the demo's token-merging stage shows, as data: HetDPT + ToMe
against dense + ToMe at equal ``r``, the accuracy / throughput front of the
Fig. 8 points, and ``removed_attn`` 'norm' against 'none'
(:func:`tome_comparison`).  The words are the report's
(:mod:`.tome_report`)."""

from dataclasses import dataclass
from typing import Dict, List, Sequence

from .results import Claim, TomePoint, TomeResult


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
class TomeComparison:
    equal_r: List[EqualR]
    front: List[TomePoint]  # of the dense and HetDPT points
    removed_attn: List[RemovedAttnRow]
    removed_attn_front: List[TomePoint]
    #: ``tome_hetdpt_faster``: faster than dense at every r (the paper
    #: measures 1.5-1.6x on DeiT-B on a GPU)
    claims: List[Claim]


def by_model(points: Sequence[TomePoint]) -> Dict[str, Dict[int, TomePoint]]:
    rows: Dict[str, Dict[int, TomePoint]] = {}
    for point in points:
        rows.setdefault(point.model, {})[point.r] = point
    return rows


def pareto_front(points: Sequence[TomePoint]) -> List[TomePoint]:
    """The points no other point beats in both accuracy and throughput
    (at least as good in both, better in one), fastest first."""

    def beaten(p):
        return any(
            q.accuracy >= p.accuracy
            and q.throughput >= p.throughput
            and (q.accuracy, q.throughput) != (p.accuracy, p.throughput)
            for q in points
        )

    return sorted(
        (p for p in points if not beaten(p)), key=lambda p: -p.throughput
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
