#!/usr/bin/env python
"""Fit the Model Accuracy Predictor (MAP) and split a pruning budget.

Prints the leave-2-out CV table over polynomial degrees, the chosen fit, the
allocation of ``--budget`` removed layers between attention and GELU layers
(or FFN branches, when the points' columns count them; for each ``--bounds``
choice) and, given a cost model, latency-aware
recommendations for ``--speedup`` / ``--min-accuracy`` targets.

Examples (from the repository root)::

    python tools/fit_map.py points.csv --depth 12 --budget 8 --bounds both \
        --plot map.png --save-fit map_fit.json
    python tools/fit_map.py points.csv --depth 12 --budget 10 \
        --cost analytic --arch deit-base --img-size 800 1216 --speedup 1.3 1.5
    python tools/fit_map.py points.csv --depth 12 --cost measured.json \
        --speedup 1.5          # see hetdpt_mm.pruning.cost.MeasuredCost
    # three layer types of SAM ViT-B: windowed, global attention, GELUs
    python tools/fit_map.py points.csv --depth 12 --budget 6 \
        --types attn_window attn_global act --family windowed_vit \
        --arch base --cost analytic --img-size 1024 1024 --speedup 1.3

Outputs are written atomically, only after every input has been validated,
never over an input, and an existing output is kept unless ``--force``.
Errors print ``error: <message>`` and exit with status 2.
"""

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from hetdpt_mm.cli import ArgumentParser, output_path, run_reporting_errors
from hetdpt_mm.errors import UsageError
from hetdpt_mm.fileio import check_output_paths, write_outputs
from hetdpt_mm.pruning import (
    ARCH_PRESETS,
    Allocation,
    AnalyticCost,
    Candidate,
    CostModel,
    MAPFit,
    MeasuredCost,
    TypeCost,
    allocate,
    allocate_for_accuracy,
    allocate_for_speedup,
    allocate_types,
    allocate_types_for_speedup,
    count_name,
    fit_map,
    fit_types,
    format_candidates,
    load_points_and_kind,
    load_type_points,
    resolve_bounds,
    smallest_budget_reaching,
)
from hetdpt_mm.registry import FAMILIES
from hetdpt_mm.spec import ACT, FFN, KIND_NAMES
from hetdpt_mm.visualization import figure_formats, plot_map_fit


@dataclass(frozen=True)
class FitMapOptions:
    """What to fit and report; invalid combinations raise ``UsageError``.

    ``bounds`` is ``'full'``, ``'paper'`` or ``'both'``; ``cost`` is
    ``'analytic'`` (MACs of ``arch`` at ``img_size``) or a measured latency
    JSON file; ``speedup`` and ``min_accuracy`` are targets for the
    latency-aware search.
    """

    points: Path
    depth: int
    budget: Optional[int] = None
    bounds: str = 'full'
    degrees: Sequence[int] = (1, 2, 3, 4)
    cost: Optional[str] = None
    arch: Optional[str] = None
    img_size: Optional[Sequence[int]] = None
    speedup: Sequence[float] = ()
    min_accuracy: Sequence[float] = ()
    plot: Optional[Path] = None
    save_fit: Optional[Path] = None
    save_allocation: Optional[Path] = None
    force: bool = False
    types: Sequence[str] = ()
    family: Optional[str] = None

    def __post_init__(self):
        if self.types or self.family:
            return self._check_types()
        analytic = self.cost == 'analytic'
        if self.arch is not None and self.arch not in ARCH_PRESETS:
            raise UsageError(
                f'--arch {self.arch!r}: one of '
                f"{', '.join(sorted(ARCH_PRESETS))} (a family's arch with "
                '--types and --family)'
            )
        if analytic and self.arch is None:
            raise UsageError(
                '--cost analytic needs --arch '
                f'({", ".join(sorted(ARCH_PRESETS))})'
            )
        if not analytic and (self.arch or self.img_size):
            raise UsageError(
                '--arch and --img-size only apply to --cost analytic'
            )
        if (self.speedup or self.min_accuracy) and self.cost is None:
            raise UsageError('--speedup and --min-accuracy need --cost')
        if self.save_allocation is not None and self.budget is None:
            raise UsageError('--save-allocation needs --budget')

    def _check_types(self) -> None:
        if len(self.types) < 3 or self.family not in FAMILIES:
            raise UsageError(
                '--types names three or more layer types and needs --family '
                f'(one of {", ".join(sorted(FAMILIES))}), whose blocks they '
                'count'
            )
        given = [
            name
            for name, value in (
                ('--min-accuracy', self.min_accuracy),
                ('--plot', self.plot),
                ('--save-fit', self.save_fit),
            )
            if value
        ]
        if given:
            raise UsageError(f'{", ".join(given)}: for two types only')
        if self.speedup and self.cost is None:
            raise UsageError('--speedup needs --cost')

    @property
    def bound_choices(self) -> List[str]:
        return ['full', 'paper'] if self.bounds == 'both' else [self.bounds]

    @property
    def outputs(self) -> Dict[str, Path]:
        """The requested output files by option name."""
        named = {
            '--plot': self.plot,
            '--save-fit': self.save_fit,
            '--save-allocation': self.save_allocation,
        }
        return {name: path for name, path in named.items() if path}


def check_outputs(options: FitMapOptions) -> None:
    """Fail before any work if an output path is unusable."""
    inputs = [options.points]
    if options.cost not in (None, 'analytic'):
        inputs.append(Path(options.cost))
    check_output_paths(options.outputs.values(), inputs, options.force)
    if options.plot is not None:
        plot_format = options.plot.suffix.lstrip('.').lower()
        supported = figure_formats()
        if plot_format not in supported:
            raise ValueError(
                f'--plot {options.plot}: unsupported image '
                f'format "{plot_format}"; use one of '
                f'{", ".join(sorted(supported))}'
            )


def build_cost(options: FitMapOptions) -> Optional[CostModel]:
    if options.cost is None:
        return None
    if options.cost == 'analytic':
        return AnalyticCost.from_arch(
            options.arch, img_size=tuple(options.img_size or (224, 224))
        )
    return MeasuredCost.from_json(options.cost)


# ------------------------------------------------------------------ report --


def describe_best(best: Candidate, t_kind: str = ACT) -> str:
    text = (
        f'best: remove {best.n_attn} attention + {best.n_act} '
        f'{KIND_NAMES[t_kind]} layers (a = {best.a:.3f}, '
        f't = {best.t:.3f}), predicted '
        f'accuracy {best.predicted_accuracy:.3f}'
    )
    if best.extrapolated:
        text += (
            '\nwarning: the best candidate lies outside the convex hull '
            'of the observed points, where the polynomial extrapolates; '
            'collect points near it before trusting the split'
        )
    return text


def budget_section(
    allocation: Allocation, bounds: str, cost: Optional[CostModel]
) -> str:
    lo, hi = allocation.bounds
    ratio_sum = 2 - allocation.budget / allocation.depth
    extra = None
    if cost is not None:
        t_kind = allocation.t_kind
        extra = {
            'speedup': [
                f'{cost.split_speedup(c.n_attn, c.n_act, t_kind):.3f}x'
                for c in allocation.candidates
            ]
        }
    return '\n'.join(
        [
            f'budget {allocation.budget} of depth {allocation.depth}, bounds '
            f'{bounds} (each count in [{lo}, {hi}]): candidates on '
            f'a + t = {ratio_sum:.4f}',
            format_candidates(
                allocation.candidates,
                allocation.best,
                extra,
                allocation.t_kind,
            ),
            describe_best(allocation.best, allocation.t_kind),
        ]
    )


def cost_section(
    fit: MAPFit,
    depth: int,
    cost: CostModel,
    bounds: str,
    speedups: Sequence[float],
    min_accuracies: Sequence[float],
) -> str:
    lo, hi = resolve_bounds(bounds, depth)
    t_kind = fit.t_kind
    one_removed = {
        ACT: 'one GELU removed (FFN merged)',
        FFN: 'one FFN branch removed',
    }[t_kind]
    lines = [
        f'latency-aware allocation, bounds {bounds} (each count in '
        f'[{lo}, {hi}]), any number of removed layers',
        f'cost model: {cost.describe()}',
        f'one attention removed: {cost.speedup(1):.4f}x; '
        f'{one_removed}: {cost.split_speedup(0, 1, t_kind):.4f}x',
    ]
    header = (
        f'{"target":>8}  {"method":<22} {"n_attn":>6} '
        f'{count_name(t_kind):>5} '
        f'{"removed":>7} {"speedup":>8} {"predicted":>9} '
        f'{"extrapolated":>12}'
    )

    def row(target: str, method: str, c: Optional[Candidate]) -> str:
        if c is None:
            return f'{target:>8}  {method:<22} (no budget reaches the target)'
        return (
            f'{target:>8}  {method:<22} {c.n_attn:>6} {c.n_act:>5} '
            f'{c.removed:>7} '
            f'{cost.split_speedup(c.n_attn, c.n_act, t_kind):>7.3f}x '
            f'{c.predicted_accuracy:>9.3f} '
            f'{"yes" if c.extrapolated else "no":>12}'
        )

    if speedups:
        lines += [
            '',
            'speedup targets: latency-aware = max predicted '
            'accuracy with speedup >= target; layer budget = the '
            "paper's MAP split of the smallest budget K that reaches "
            'the target',
            header,
        ]
        for target in speedups:
            best = allocate_for_speedup(fit, depth, cost, target, bounds).best
            baseline = smallest_budget_reaching(
                fit, depth, cost, target, bounds
            )
            lines.append(row(f'{target:g}x', 'latency-aware', best))
            lines.append(
                row(
                    '',
                    f'layer budget K={baseline.removed if baseline else "-"}',
                    baseline,
                )
            )
    if min_accuracies:
        lines += [
            '',
            'accuracy targets: max speedup with predicted accuracy >= target',
            header,
        ]
        for target in min_accuracies:
            best = allocate_for_accuracy(fit, depth, cost, target, bounds).best
            lines.append(row(f'{target:g}', 'latency-aware', best))
    return '\n'.join(lines)


# -------------------------------------------------------------------- run --


def run_type_map(options: FitMapOptions) -> None:
    """MAP over ``--types`` of a ``--family`` network: fit, the budget's
    split, the speedup targets under the family's analytic MACs at
    ``--img-size`` (or a measured per-type cost), then the outputs."""
    import torch

    check_outputs(options)
    family = FAMILIES[options.family]
    with torch.device('meta'):
        network = family(arch=options.arch or family.DEFAULT_ARCH)
    types = network.layer_types()
    unknown = sorted(set(options.types) - set(types))
    if unknown:
        raise UsageError(
            f'--types {unknown}: {family.__name__} counts {sorted(types)}'
        )
    types = {name: types[name] for name in options.types}
    cost = None
    if options.cost == 'analytic':
        size = options.img_size or network.build_args()['img_size']
        macs = family.codec.layer_macs(network.build_args(), tuple(size))
        cost = TypeCost.from_layer_macs(macs, types)
    elif options.cost is not None:
        cost = TypeCost.from_json(options.cost)
    points = load_type_points(options.points, options.types, options.depth)
    fit = fit_types(points, options.types, options.depth, options.degrees)
    sizes = {name: len(blocks) for name, (_, blocks) in types.items()}
    sections = [
        f'MAP of {", ".join(options.types)} ({sizes} layers) on '
        f'{len(points)} points from {options.points} (depth '
        f'{options.depth}), {len(fit.points)} distinct; the polynomial '
        f'takes the types some point removes: {", ".join(fit.fitted)}',
        fit.format_table(),
        fit.format_polynomial(),
    ]
    allocations = {}
    for bounds in options.bound_choices if options.budget is not None else ():
        allocations[bounds] = allocate_types(
            fit, options.budget, sizes, bounds, cost
        )
        sections.append(
            f'budget {options.budget}, bounds {bounds}:\n'
            + allocations[bounds].format_table()
        )
    if cost is not None:
        lines = [f'cost: {cost.describe()}']
        for target in options.speedup:
            best = allocate_types_for_speedup(
                fit, sizes, cost, target, options.bounds
            ).best
            lines.append(
                f'speedup >= {target:g}x: remove '
                f'{dict(zip(options.types, best.counts))}, '
                f'{best.speedup:.3f}x, predicted {best.predicted_accuracy:.3f}'
                + (' (extrapolated)' if best.extrapolated else '')
            )
        sections.append('\n'.join(lines))
    contents = {}
    if options.save_allocation is not None:
        contents[options.save_allocation] = (
            json.dumps(
                {
                    bounds: json.loads(allocation.to_json())
                    for bounds, allocation in allocations.items()
                },
                indent=2,
            )
            + '\n'
        )
    print('\n\n'.join(sections))
    write_outputs(contents, exclusive=not options.force)
    for name, path in options.outputs.items():
        print(f'wrote {path} ({name})')


def run_fit_map(options: FitMapOptions) -> None:
    """Fit, allocate, print the report, then write the requested outputs."""
    if options.types:
        return run_type_map(options)
    check_outputs(options)
    cost = build_cost(options)
    points, t_kind = load_points_and_kind(options.points, depth=options.depth)
    fit = fit_map(points, degrees=options.degrees, t_kind=t_kind)

    repeats = len(points) - len(fit.points)
    averaged = (
        f' ({repeats} rows repeat the (a, t) of another row: their '
        f'accuracies are averaged, {len(fit.points)} distinct points)'
        if repeats
        else ''
    )
    # The paper's t (GELUs kept) goes unnamed, as in the paper.
    counted = '' if t_kind == ACT else '; t = FFN branches kept / depth'
    sections = [
        f'MAP fit on {len(points)} points from {options.points} '
        f'(depth {options.depth}){counted}{averaged}; leave-2-out CV over '
        'degrees '
        f'{" ".join(map(str, sorted(options.degrees)))}',
        fit.format_table(),
        f'chosen degree {fit.degree}: CV MAE {fit.cv_mae:.4f}, CV RMSE '
        f'{fit.cv_rmse:.4f}, train RMSE {fit.chosen.train_rmse:.4f}',
        fit.format_polynomial(),
    ]
    allocations = {}
    if options.budget is not None:
        for bounds in options.bound_choices:
            allocations[bounds] = allocate(
                fit, options.budget, options.depth, bounds
            )
            sections.append(budget_section(allocations[bounds], bounds, cost))
    if cost is not None:
        for bounds in options.bound_choices:
            sections.append(
                cost_section(
                    fit,
                    options.depth,
                    cost,
                    bounds,
                    options.speedup,
                    options.min_accuracy,
                )
            )

    # Everything is validated and computed; only now produce the outputs.
    contents = {}
    if options.save_fit is not None:
        contents[options.save_fit] = (
            json.dumps(fit.to_dict(), indent=2, allow_nan=False) + '\n'
        )
    if options.save_allocation is not None:
        contents[options.save_allocation] = (
            json.dumps(
                {
                    bounds: allocation.to_dict()
                    for bounds, allocation in allocations.items()
                },
                indent=2,
                allow_nan=False,
            )
            + '\n'
        )
    if options.plot is not None:
        contents[options.plot] = plot_map_fit(
            fit,
            options.depth,
            allocations,
            options.budget,
            options.plot.suffix.lstrip('.').lower(),
        )
    print('\n\n'.join(sections))
    write_outputs(contents, exclusive=not options.force)
    for name, path in options.outputs.items():
        print(f'wrote {path} ({name})')


def parse_args(argv: Optional[Sequence[str]]) -> FitMapOptions:
    parser = ArgumentParser(
        description='Fit MAP to (a, t, accuracy) points and allocate a '
        'depth-pruning budget between attention and GELU layers (or FFN '
        "branches, as the points' columns say)."
    )
    parser.add_argument(
        'points',
        type=Path,
        help='CSV or JSON points: accuracy (or acc) and '
        'either a, t (retained ratios) or n_attn, n_act '
        '(or n_attn, n_ffn: removed counts)',
    )
    parser.add_argument(
        '--depth', type=int, required=True, help='number of blocks L'
    )
    parser.add_argument(
        '--budget', type=int, help='number K of layers to remove in total'
    )
    parser.add_argument(
        '--bounds',
        choices=('full', 'paper', 'both'),
        help='per-type count bounds: full = 0..L, paper = '
        "1..L-1 (the authors' snippet), both (default full)",
    )
    parser.add_argument(
        '--degrees',
        type=int,
        nargs='+',
        help='candidate polynomial degrees (default 1 2 3 4)',
    )
    parser.add_argument(
        '--cost',
        help='"analytic" (MACs; needs --arch) or a measured latency JSON file',
    )
    parser.add_argument(
        '--arch',
        help='architecture for --cost analytic: '
        f'{", ".join(sorted(ARCH_PRESETS))}; with --family, a preset of '
        'that family',
    )
    parser.add_argument(
        '--types',
        nargs='+',
        help='MAP over three or more layer types of --family (columns '
        'n_<type>), e.g. attn_window attn_global act',
    )
    parser.add_argument(
        '--family',
        choices=sorted(FAMILIES),
        help='with --types: the network whose blocks the types count',
    )
    parser.add_argument(
        '--img-size',
        type=int,
        nargs=2,
        metavar=('H', 'W'),
        help='input size for --cost analytic (default 224 224)',
    )
    parser.add_argument(
        '--speedup',
        type=float,
        nargs='+',
        help='speedup targets: maximise predicted accuracy '
        'subject to speedup >= target (needs --cost)',
    )
    parser.add_argument(
        '--min-accuracy',
        type=float,
        nargs='+',
        help='accuracy targets: maximise speedup subject to '
        'predicted accuracy >= target (needs --cost)',
    )
    parser.add_argument(
        '--plot',
        type=output_path,
        help='write the fitted surface here (e.g. map.png)',
    )
    parser.add_argument(
        '--save-fit',
        type=output_path,
        help='write the fit as JSON (MAPFit.from_dict)',
    )
    parser.add_argument(
        '--save-allocation',
        type=output_path,
        help='write the allocation of --budget for each '
        '--bounds choice as JSON (Allocation.from_dict, by '
        'bounds name)',
    )
    parser.add_argument(
        '--force', action='store_true', help='replace existing output files'
    )
    args = parser.parse_args(argv)
    # Options not given keep FitMapOptions' defaults.
    return FitMapOptions(
        **{
            name: value
            for name, value in vars(args).items()
            if value is not None
        }
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    return run_reporting_errors(lambda: run_fit_map(parse_args(argv)))


if __name__ == '__main__':
    sys.exit(main())
