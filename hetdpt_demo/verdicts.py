"""The demo's verdicts: pure functions of what it measured
(:func:`hetdpt_demo.results.collect`), each claim with the numbers that
decide it.  A difference counts only beyond the seed spread: the larger
half range (max - min) / 2 over the seeds of the two sides."""

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np

ABOVE_CHANCE = 10.0  # points a compared split must lead chance by


def spread(values: Iterable[float]) -> List[float]:
    """``[mean, half range]`` of the values."""
    values = list(values)
    return [sum(values) / len(values), (max(values) - min(values)) / 2]


def splits(results: Mapping[str, Any]) -> Dict[str, Any]:
    """MAP's pick against every measured split of the budget, the dense
    model against its own extra epochs (the no-removal split), and MAP's
    predictions against the measurements."""
    dense = results['dense']['accuracy']
    chance = results['task']['chance']
    stats = {
        tuple(s['counts']): spread(s['accuracy'].values())
        for s in results['splits']
    }
    removal = {c: v for c, v in stats.items() if any(c)}
    best = max(removal, key=lambda counts: removal[counts][0])
    pick = tuple(results['map']['pick'])
    tolerance = max(removal[best][1], removal[pick][1])
    gap = removal[best][0] - removal[pick][0]
    verdict = dict(
        best=list(best),
        pick=list(pick),
        gap=gap,
        tolerance=tolerance,
        pick_is_best=pick == best,
        pick_within_spread=gap <= tolerance,
        below_chance=[
            list(c)
            for c, (mean, _) in removal.items()
            if mean < chance + ABOVE_CHANCE
        ],
    )
    # The dense model given a prune run's epochs with nothing removed: it
    # is trained to the end when they do not lift it beyond their spread.
    none = stats.get((0, 0))
    if none is not None:
        ceiling = dense + none[1]
        verdict.update(
            extra_epochs_gain=none[0] - dense,
            extra_epochs_spread=none[1],
            trained_to_end=none[0] - dense <= none[1],
            points_above_dense=[
                p
                for p in results['map']['points']
                if float(p['accuracy']) > ceiling
            ],
            splits_above_dense=[
                list(c) for c, (mean, _) in removal.items() if mean > ceiling
            ],
        )
    verdict.update(predictions(results, stats, dense))
    return verdict


def predictions(results, stats, dense: float) -> Dict[str, Any]:
    """MAP's predictions of the measured removal splits, clipped at the
    dense accuracy (a prediction above it is flagged), and how many pairs
    of splits that differ beyond their spread the fit orders as measured."""
    predicted = {
        (c['n_attn'], c['n_act']): c['predicted_accuracy']
        for c in results['map']['candidates']
    }
    measured = [c for c in stats if c in predicted]
    pairs = agree = 0
    for i, a in enumerate(measured):
        for b in measured[i + 1 :]:
            difference = stats[a][0] - stats[b][0]
            if abs(difference) > max(stats[a][1], stats[b][1]):
                pairs += 1
                agree += (predicted[a] - predicted[b]) * difference > 0
    return dict(
        clipped={
            f'{a}+{g}': min(value, dense)
            for (a, g), value in predicted.items()
        },
        above_dense=[
            [a, g] for (a, g), value in predicted.items() if value > dense
        ],
        ordered_pairs=[agree, pairs],
    )


def pareto_front(points: Sequence[Mapping]) -> List[Mapping]:
    """The points no other point beats in throughput and accuracy both
    (one strictly), by increasing throughput."""
    front = [
        p
        for p in points
        if not any(
            q['throughput'] >= p['throughput']
            and q['accuracy'] >= p['accuracy']
            and (q['throughput'], q['accuracy'])
            != (p['throughput'], p['accuracy'])
            for q in points
        )
    ]
    return sorted(front, key=lambda p: p['throughput'])


def throughput_at(
    curve: Sequence[Mapping], accuracy: float
) -> Optional[float]:
    """The throughput of a front at ``accuracy``, interpolated between its
    two measured points around it (``None`` outside them)."""
    accuracies = [p['accuracy'] for p in curve][::-1]  # increasing
    if not curve or not accuracies[0] <= accuracy <= accuracies[-1]:
        return None
    throughputs = [p['throughput'] for p in curve][::-1]
    return float(np.interp(accuracy, accuracies, throughputs))


def fig8(points: Sequence[Mapping]) -> Dict[str, Any]:
    """The paper's Fig. 8, one panel per method, read only at measured
    token-reduced points: each HetDPT + method point against the dense +
    method front at its accuracy, where two token-reduced dense points
    enclose it; and which HetDPT + method points are on HetDPT's front in
    that panel (HetDPT without token reduction and with the method)."""
    verdict: Dict[str, Any] = dict(methods={})
    for method in sorted({p['method'] for p in points} - {'none'}):
        panel = [p for p in points if p['method'] in ('none', method)]
        hetdpt = [p for p in panel if p['model'] == 'hetdpt']
        dense = [p for p in panel if p['model'] == 'dense']
        dense = pareto_front([p for p in dense if p['method'] == method])
        readings = [
            dict(p, dense_throughput=at, ratio=p['throughput'] / at)
            for p in hetdpt
            if p['method'] == method
            and (at := throughput_at(dense, p['accuracy'])) is not None
        ]
        front = pareto_front(hetdpt)
        verdict['methods'][method] = dict(
            front=front,
            on_front=[p for p in front if p['method'] == method],
            readings=readings,
        )
    return verdict
