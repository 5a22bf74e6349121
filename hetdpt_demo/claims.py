"""What the demo's results show, as data: the numbers behind the report's
claims (the gradients of the gate scores by type, the compared splits of
the budget) and the claims themselves (:class:`~.results.Claim`:
holds or not, with the numbers that decide it).  The words are the report's
(:mod:`.report`)."""

import itertools
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from hetdpt_mm.analysis import macs_convention
from hetdpt_mm.pruning import Allocation, AnalyticCost
from hetdpt_mm.spec import ACT, ATTN

from .results import Claim, CompareRun, DemoResults, RunInfo
from .tome_claims import TomeComparison, tome_comparison

#: The compared splits of the budget, in the report's order.
SPLIT_METHODS = ('MAP', 'attention_only', 'gelu_only', 'naive')


def counts_label(n_attn: int, n_act: int) -> str:
    """``attn<n>-act<m>``: how run keys, benchmark names and the report's
    speed table name a split by its removed counts."""
    return f'attn{n_attn}-act{n_act}'


@dataclass
class GradientStats:
    """|dL/dm| of one layer type's gate scores over the logged
    iterations."""

    mean: float
    median: float
    count: int


@dataclass
class SplitRow:
    """One split of the budget over its seeds (one removed-counts pair:
    the naive ranking may split differently per seed)."""

    name: str
    method: str  # a SPLIT_METHODS entry
    n_attn: int
    n_act: int
    seeds: List[int]
    accuracies: List[float]
    speedup: float  # measured, merged backbone
    macs_speedup: float  # analytic
    predicted: float  # MAP's fit at these counts
    extrapolated: bool  # outside the MAP points' hull
    mean: float = 0.0  # of the accuracies

    def __post_init__(self):
        self.mean = sum(self.accuracies) / len(self.accuracies)


@dataclass
class FitCheck:
    """MAP's own check: its predicted accuracy of each compared split
    against the measured one, over the distinct removed counts."""

    mean_error: float  # predicted - measured: the fit's offset
    mean_abs_error: float
    pairs: int  # pairs of splits whose measured accuracies differ
    ordered: int  # of them, those the fit ranks as measured


@dataclass
class Summary:
    """What the report shows: the run, every stage's results and what is
    computed from them."""

    run: RunInfo
    results: DemoResults
    budget: int
    classes: int
    val_images: int
    point_speedups: List[float]  # analytic MACs speedup of each MAP point
    macs_convention: str  # the analytic MACs'
    gradients: Dict[str, GradientStats]
    splits: List[SplitRow]
    fit_check: FitCheck
    claims: List[Claim]
    tome: Optional[TomeComparison]  # None: the stage measured nothing

    def claim(self, name: str) -> Claim:
        return next(claim for claim in self.claims if claim.name == name)


def gradient_stats(results: DemoResults) -> Dict[str, GradientStats]:
    stats = {}
    for kind, curve in results.prune.score_grads.items():
        values = sorted(value for _, value in curve)
        stats[kind] = GradientStats(
            mean=sum(values) / len(values),
            median=values[len(values) // 2],
            count=len(values),
        )
    return stats


def split_benchmark_runs(results: DemoResults) -> Dict[str, CompareRun]:
    """One compared run per removed-counts pair other than the main run's,
    keyed ``attn<n>-act<m>``."""
    main = results.prune.spec
    chosen: Dict[str, CompareRun] = {}
    for run in results.compare.runs.values():
        if run.main or run.counts == [main['n_attn'], main['n_act']]:
            continue
        chosen.setdefault(counts_label(*run.counts), run)
    return chosen


def split_rows(results: DemoResults, cost: AnalyticCost) -> List[SplitRow]:
    """The compared splits, each over its seeds, with its measured and
    analytic speedups and MAP's prediction (every split of the budget is a
    candidate of its allocation)."""
    spec = results.prune.spec
    candidates = {
        (c.n_attn, c.n_act): c
        for c in Allocation.from_dict(results.fit.allocation).candidates
    }
    speed = {
        counts_label(spec['n_attn'], spec['n_act']): results.benchmark[
            'demo'
        ].models['merged']
    }
    for counts in split_benchmark_runs(results):
        speed[counts] = results.benchmark[f'split-{counts}'].models['merged']
    rows = []
    for method in SPLIT_METHODS:
        # The naive ranking may split the budget differently per seed: one
        # row per split, never a mean over different networks.
        groups: Dict[Tuple[int, int], List[CompareRun]] = {}
        for run in sorted(
            (
                run
                for run in results.compare.runs.values()
                if method in run.splits
            ),
            key=lambda run: run.seed,
        ):
            groups.setdefault(tuple(run.counts), []).append(run)
        for (n_attn, n_act), runs in groups.items():
            rows.append(
                SplitRow(
                    name=method
                    if len(groups) == 1
                    else f'{method} ({n_attn} + {n_act})',
                    method=method,
                    n_attn=n_attn,
                    n_act=n_act,
                    seeds=[run.seed for run in runs],
                    accuracies=[
                        results.transfer.merged_accuracy
                        if run.main
                        else run.accuracy
                        for run in runs
                    ],
                    speedup=speed[counts_label(n_attn, n_act)].speedup,
                    macs_speedup=cost.speedup(n_attn, n_act),
                    predicted=candidates[n_attn, n_act].predicted_accuracy,
                    extrapolated=candidates[n_attn, n_act].extrapolated,
                )
            )
    return rows


def fit_check(splits: List[SplitRow]) -> FitCheck:
    """How far MAP's predictions meet the measured splits (rows of the same
    counts are the same runs: counted once)."""
    rows = list({(row.n_attn, row.n_act): row for row in splits}.values())
    errors = [row.predicted - row.mean for row in rows]
    pairs = [
        (x, y) for x, y in itertools.combinations(rows, 2) if x.mean != y.mean
    ]
    return FitCheck(
        mean_error=sum(errors) / len(errors),
        mean_abs_error=sum(map(abs, errors)) / len(errors),
        pairs=len(pairs),
        ordered=sum(
            (x.predicted - y.predicted) * (x.mean - y.mean) > 0
            for x, y in pairs
        ),
    )


def half_range(values: List[float]) -> float:
    return (max(values) - min(values)) / 2


def seed_margins(ours: SplitRow, rivals: List[SplitRow]) -> List[Dict]:
    """MAP's lead over each rival split (one per removed counts) against
    the seed spread: the larger half range of the two, and on how many
    common seeds MAP's split was the more accurate."""
    margins = {}
    for row in rivals:
        common = [s for s in ours.seeds if s in row.seeds]
        margins.setdefault(
            (row.n_attn, row.n_act),
            dict(
                name=row.name,
                lead=ours.mean - row.mean,
                spread=max(
                    half_range(ours.accuracies), half_range(row.accuracies)
                ),
                seeds_won=sum(
                    ours.accuracies[ours.seeds.index(s)]
                    > row.accuracies[row.seeds.index(s)]
                    for s in common
                ),
                seeds=len(common),
            ),
        )
    return list(margins.values())


def map_split_claim(splits: List[SplitRow]) -> Claim:
    """MAP's split (the first row) is more accurate than every other split
    of the budget (those that remove its own counts are not rivals); at a
    tie in accuracy, ``fastest`` is the fastest tied split.  ``margins``
    set each lead against the seed spread: a lead within it is not shown
    by these seeds."""
    ours = splits[0]
    rivals = [
        row
        for row in splits[1:]
        if (row.n_attn, row.n_act) != (ours.n_attn, ours.n_act)
    ]
    best: Optional[SplitRow] = max(
        rivals, key=lambda row: row.mean, default=None
    )
    tied = [row for row in rivals if row.mean == ours.mean]
    fastest = max(tied, key=lambda row: row.speedup, default=None)
    return Claim(
        'map_split_most_accurate',
        holds=best is not None and ours.mean > best.mean,
        numbers=dict(
            mean=ours.mean,
            seeds=len(ours.accuracies),
            speedup=ours.speedup,
            best=best.name if best else None,
            best_mean=best.mean if best else None,
            tied=[row.name for row in tied],
            fastest=fastest.name if fastest else None,
            fastest_speedup=fastest.speedup if fastest else None,
            own=[row.name for row in splits[1:] if row not in rivals],
            margins=seed_margins(ours, rivals),
        ),
    )


def compute_claims(
    results: DemoResults,
    gradients: Dict[str, GradientStats],
    splits: List[SplitRow],
) -> List[Claim]:
    """The report's claims on this run, in its order."""
    recovery = results.recovery
    merged = results.benchmark['demo'].models['merged']
    pruned, merged_accuracy = (
        results.prune.accuracy,
        results.transfer.merged_accuracy,
    )
    return [
        # The paper: GELU scores get the larger gradients.
        Claim(
            'gradient_disparity',
            holds=gradients[ACT].mean > gradients[ATTN].mean,
            numbers=dict(
                ratio=gradients[ACT].mean / gradients[ATTN].mean,
                attn=gradients[ATTN].mean,
                act=gradients[ACT].mean,
            ),
        ),
        # The paper: removing a GELU hurts more at once, and recovers more.
        Claim(
            'recovery_asymmetry',
            holds=(
                recovery[ACT].at_once < recovery[ATTN].at_once
                and recovery[ACT].after_epochs[-1] - recovery[ACT].at_once
                > recovery[ATTN].after_epochs[-1] - recovery[ATTN].at_once
            ),
            numbers={
                f'{kind}_{when}': value
                for kind in (ATTN, ACT)
                for when, value in (
                    ('at_once', recovery[kind].at_once),
                    ('last', recovery[kind].after_epochs[-1]),
                )
            },
        ),
        map_split_claim(splits),
        Claim(
            'merge_exact',
            holds=pruned == merged_accuracy,
            numbers=dict(pruned=pruned, merged=merged_accuracy),
        ),
        Claim(
            'hook_merge_identical', holds=results.merge.hook_output_identical
        ),
        Claim(
            'merged_faster',
            holds=merged.speedup > 1,
            numbers=dict(
                speedup=merged.speedup, macs_speedup=merged.macs_speedup
            ),
        ),
    ]


def summarise(
    run: RunInfo,
    results: DemoResults,
    budget: int,
    classes: int,
    val_images: int,
) -> Summary:
    """The report's :class:`Summary` of a finished run."""
    # MACs of the demo ViT (its checkpoint's build arguments) by counts.
    cost = AnalyticCost.from_build_args(results.dense.arch)
    gradients = gradient_stats(results)
    splits = split_rows(results, cost)
    claims = compute_claims(results, gradients, splits)
    tome = None
    if results.tome is not None:
        tome = tome_comparison(results.tome)
        claims += tome.claims
    return Summary(
        run=run,
        results=results,
        budget=budget,
        classes=classes,
        val_images=val_images,
        point_speedups=[
            cost.speedup(int(p['n_attn']), int(p['n_act']))
            for p in results.map.points
        ],
        macs_convention=macs_convention(cost.attention_products),
        gradients=gradients,
        splits=splits,
        fit_check=fit_check(splits),
        claims=claims,
        tome=tome,
    )
