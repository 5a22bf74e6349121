#!/usr/bin/env python
"""Fit the Model Accuracy Predictor (MAP) and split a pruning budget.

Prints the leave-2-out CV table over polynomial degrees, the chosen fit, the
allocation of ``--budget`` removed layers between attention and GELU layers
(for each ``--bounds`` choice) and, given a cost model, latency-aware
recommendations for ``--speedup`` / ``--min-accuracy`` targets.

Examples (from the repository root)::

    python tools/fit_map.py points.csv --depth 12 --budget 8 --bounds both \
        --plot map.png --save-fit map_fit.json
    python tools/fit_map.py points.csv --depth 12 --budget 10 \
        --cost analytic --arch deit-base --img-size 800 1216 --speedup 1.3 1.5
    python tools/fit_map.py points.csv --depth 12 --cost measured.json \
        --speedup 1.5          # see hetdpt_mm.pruning.cost.MeasuredCost

Outputs are written atomically, only after every input has been validated,
never over an input, and an existing output is kept unless ``--force``.
Errors print ``error: <message>`` and exit with status 2.
"""
import argparse
import io
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from hetdpt_mm.cli import ArgumentParser, UsageError, run_reporting_errors
from hetdpt_mm.fileio import atomic_path, atomic_write_text, check_output_path
from hetdpt_mm.pruning import (ARCH_PRESETS, AnalyticCost, CostModel,
                               MAPFit, MeasuredCost, allocate,
                               allocate_for_accuracy, allocate_for_speedup,
                               fit_map, format_candidates, load_points,
                               resolve_bounds)
from hetdpt_mm.pruning.map import Allocation, Candidate



def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = ArgumentParser(
        description='Fit MAP to (a, t, accuracy) points and allocate a '
        'depth-pruning budget between attention and GELU layers.')
    parser.add_argument('points', type=Path,
                        help='CSV or JSON points: accuracy (or acc) and '
                        'either a, t (retained ratios) or n_attn, n_act '
                        '(removed counts)')
    parser.add_argument('--depth', type=int, required=True,
                        help='number of blocks L')
    parser.add_argument('--budget', type=int,
                        help='number K of layers to remove in total')
    parser.add_argument('--bounds', choices=('full', 'paper', 'both'),
                        default='full',
                        help='per-type count bounds: full = 0..L, paper = '
                        '1..L-1 (the authors\' snippet), both (default full)')
    parser.add_argument('--degrees', type=int, nargs='+', default=[1, 2, 3, 4],
                        help='candidate polynomial degrees (default 1 2 3 4)')
    parser.add_argument('--cost',
                        help='"analytic" (MACs; needs --arch) or a measured '
                        'latency JSON file')
    parser.add_argument('--arch', choices=sorted(ARCH_PRESETS),
                        help='architecture for --cost analytic')
    parser.add_argument('--img-size', type=int, nargs=2, metavar=('H', 'W'),
                        help='input size for --cost analytic '
                        '(default 224 224)')
    parser.add_argument('--speedup', type=float, nargs='+', default=[],
                        help='speedup targets: maximise predicted accuracy '
                        'subject to speedup >= target (needs --cost)')
    parser.add_argument('--min-accuracy', type=float, nargs='+', default=[],
                        help='accuracy targets: maximise speedup subject to '
                        'predicted accuracy >= target (needs --cost)')
    parser.add_argument('--plot', type=Path,
                        help='write the fitted surface here (e.g. map.png)')
    parser.add_argument('--save-fit', type=Path,
                        help='write the fit as JSON (MAPFit.from_dict)')
    parser.add_argument('--force', action='store_true',
                        help='replace existing output files')
    args = parser.parse_args(argv)

    analytic = args.cost == 'analytic'
    if analytic and args.arch is None:
        raise UsageError('--cost analytic needs --arch '
                         f'({", ".join(sorted(ARCH_PRESETS))})')
    if not analytic and (args.arch or args.img_size):
        raise UsageError('--arch and --img-size only apply to --cost analytic')
    if (args.speedup or args.min_accuracy) and args.cost is None:
        raise UsageError('--speedup and --min-accuracy need --cost')
    return args


def bound_choices(bounds: str) -> List[str]:
    return ['full', 'paper'] if bounds == 'both' else [bounds]


def check_outputs(args: argparse.Namespace) -> None:
    """Fail before any work if an output path is unusable."""
    inputs = [args.points]
    if args.cost not in (None, 'analytic'):
        inputs.append(Path(args.cost))
    outputs = [p for p in (args.plot, args.save_fit) if p is not None]
    if len(outputs) == 2 and outputs[0].absolute() == outputs[1].absolute():
        raise ValueError(f'--plot and --save-fit are the same file '
                         f'{outputs[0]}')
    for out in outputs:
        check_output_path(out, inputs=inputs, force=args.force)
    if args.plot is not None:
        plot_format = args.plot.suffix.lstrip('.').lower()
        supported = figure_formats()
        if plot_format not in supported:
            raise ValueError(f'--plot {args.plot}: unsupported image format '
                             f'"{plot_format}"; use one of '
                             f'{", ".join(sorted(supported))}')


def figure_formats() -> Dict[str, str]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    return FigureCanvasAgg.get_supported_filetypes()


def build_cost(args: argparse.Namespace) -> Optional[CostModel]:
    if args.cost is None:
        return None
    if args.cost == 'analytic':
        return AnalyticCost.from_arch(args.arch,
                                      img_size=tuple(args.img_size or
                                                     (224, 224)))
    return MeasuredCost.from_json(args.cost)


# ------------------------------------------------------------------ report --

def describe_best(best: Candidate) -> str:
    text = (f'best: remove {best.n_attn} attention + {best.n_act} GELU '
            f'layers (a = {best.a:.3f}, t = {best.t:.3f}), predicted '
            f'accuracy {best.predicted_accuracy:.3f}')
    if best.extrapolated:
        text += ('\nwarning: the best candidate lies outside the convex hull '
                 'of the observed points, where the polynomial extrapolates; '
                 'collect points near it before trusting the split')
    return text


def budget_section(allocation: Allocation, bounds: str,
                   cost: Optional[CostModel]) -> str:
    lo, hi = allocation.bounds
    ratio_sum = 2 - allocation.budget / allocation.depth
    extra = None
    if cost is not None:
        extra = {'speedup': [f'{cost.speedup(c.n_attn, c.n_act):.3f}x'
                             for c in allocation.candidates]}
    return '\n'.join([
        f'budget {allocation.budget} of depth {allocation.depth}, bounds '
        f'{bounds} (each count in [{lo}, {hi}]): candidates on '
        f'a + t = {ratio_sum:.4f}',
        format_candidates(allocation.candidates, allocation.best, extra),
        describe_best(allocation.best)])


def smallest_budget_reaching(fit: MAPFit, depth: int, cost: CostModel,
                             target: float, bounds: str
                             ) -> Optional[Candidate]:
    """The paper's procedure for a speedup target: raise the layer budget
    until MAP's split of it is fast enough."""
    lo, hi = resolve_bounds(bounds, depth)
    for budget in range(2 * lo, 2 * hi + 1):
        best = allocate(fit, budget, depth, bounds).best
        if cost.speedup(best.n_attn, best.n_act) >= target * (1 - 1e-12):
            return best
    return None


def cost_section(fit: MAPFit, depth: int, cost: CostModel, bounds: str,
                 speedups: Sequence[float],
                 min_accuracies: Sequence[float]) -> str:
    lo, hi = resolve_bounds(bounds, depth)
    lines = [f'latency-aware allocation, bounds {bounds} (each count in '
             f'[{lo}, {hi}]), any number of removed layers',
             f'cost model: {cost.describe()}',
             f'one attention removed: {cost.speedup(1, 0):.4f}x; one GELU '
             f'removed (FFN merged): {cost.speedup(0, 1):.4f}x']
    header = (f'{"target":>8}  {"method":<22} {"n_attn":>6} {"n_act":>5} '
              f'{"removed":>7} {"speedup":>8} {"predicted":>9} '
              f'{"extrapolated":>12}')

    def row(target: str, method: str, c: Optional[Candidate]) -> str:
        if c is None:
            return f'{target:>8}  {method:<22} (no budget reaches the target)'
        return (f'{target:>8}  {method:<22} {c.n_attn:>6} {c.n_act:>5} '
                f'{c.removed:>7} {cost.speedup(c.n_attn, c.n_act):>7.3f}x '
                f'{c.predicted_accuracy:>9.3f} '
                f'{"yes" if c.extrapolated else "no":>12}')

    if speedups:
        lines += ['', 'speedup targets: latency-aware = max predicted '
                  'accuracy with speedup >= target; layer budget = the '
                  'paper\'s MAP split of the smallest budget K that reaches '
                  'the target', header]
        for target in speedups:
            best = allocate_for_speedup(fit, depth, cost, target, bounds).best
            baseline = smallest_budget_reaching(fit, depth, cost, target,
                                                bounds)
            lines.append(row(f'{target:g}x', 'latency-aware', best))
            lines.append(row('', f'layer budget K='
                             f'{baseline.removed if baseline else "-"}',
                             baseline))
    if min_accuracies:
        lines += ['', 'accuracy targets: max speedup with predicted accuracy '
                  '>= target', header]
        for target in min_accuracies:
            best = allocate_for_accuracy(fit, depth, cost, target,
                                         bounds).best
            lines.append(row(f'{target:g}', 'latency-aware', best))
    return '\n'.join(lines)


# -------------------------------------------------------------------- plot --

def render_plot(fit: MAPFit, depth: int, allocations: Dict[str, Allocation],
                budget: Optional[int], image_format: str) -> bytes:
    """Fitted surface over the data (and budget line) range with observed
    points, the data hull, the budget line and the chosen splits."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    observed = np.array([(p.a, p.t, p.accuracy) for p in fit.points])
    shown = [observed[:, :2]] + [
        np.array([(c.a, c.t) for c in allocation.candidates])
        for allocation in allocations.values()]
    low = np.concatenate(shown).min(axis=0) - 0.05
    a_grid, t_grid = np.meshgrid(np.linspace(low[0], 1.0, 200),
                                 np.linspace(low[1], 1.0, 200))
    surface = fit.predict(a_grid, t_grid)
    # Extrapolated corners can fall far below the data: spend the colours
    # on the points and the budget candidates, saturate beyond (contour
    # lines still label the rest).
    candidate_accuracy = [c.predicted_accuracy
                          for allocation in allocations.values()
                          for c in allocation.candidates]
    spread = np.ptp(observed[:, 2]) or 1.0
    levels = MaxNLocator(20).tick_values(
        min([observed[:, 2].min() - spread, *candidate_accuracy]),
        max(surface.max(), observed[:, 2].max()))
    norm = Normalize(vmin=levels[0], vmax=levels[-1])

    fig = Figure(figsize=(7.5, 6.5))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    filled = ax.contourf(a_grid, t_grid, surface, levels=levels,
                         cmap='viridis', norm=norm, extend='both')
    lines = ax.contour(a_grid, t_grid, surface, levels=12, colors='k',
                       linewidths=0.5, alpha=0.6)
    ax.clabel(lines, fmt='%.1f', fontsize=7)
    fig.colorbar(filled, ax=ax, label='accuracy (predicted surface, points)')

    hull = fit.hull_vertices
    ax.fill(hull[:, 0], hull[:, 1], fill=False, ls='--', color='white',
            lw=1.2, label='data hull (MAP interpolates inside)')
    ax.scatter(observed[:, 0], observed[:, 1], c=observed[:, 2],
               cmap='viridis', norm=norm, s=70, edgecolors='black',
               linewidths=1.0, zorder=3, label='observed points')

    if budget is not None:
        ratio_sum = 2 - budget / depth
        a_line = np.linspace(low[0], 1.0, 2)
        ax.plot(a_line, ratio_sum - a_line, color='red', lw=1.5,
                label=f'budget {budget}: a + t = {ratio_sum:.3f}')
        candidates = next(iter(allocations.values())).candidates
        ax.scatter([c.a for c in candidates], [c.t for c in candidates],
                   marker='x', color='red', s=30, zorder=3)
    bounds_by_best: Dict[Candidate, List[str]] = {}  # one star per split
    for bounds, allocation in allocations.items():
        bounds_by_best.setdefault(allocation.best, []).append(bounds)
    for colour, (best, names) in zip(('red', 'orange'),
                                     bounds_by_best.items()):
        ax.scatter([best.a], [best.t], marker='*', s=350, color=colour,
                   edgecolors='black', zorder=4,
                   label=f'argmax ({" & ".join(names)} bounds): '
                   f'n_attn={best.n_attn}, n_act={best.n_act}, '
                   f'P={best.predicted_accuracy:.2f}')

    ax.set_xlim(low[0], 1.02)
    ax.set_ylim(low[1], 1.02)
    ax.set_aspect('equal')
    ax.set_xlabel('a = retained attention ratio')
    ax.set_ylabel('t = retained GELU ratio')
    ax.set_title(f'MAP degree {fit.degree} on {len(fit.points)} points '
                 f'(leave-2-out CV RMSE {fit.cv_rmse:.3f})')
    ax.legend(loc='best', fontsize=7, framealpha=0.85)
    buffer = io.BytesIO()
    fig.savefig(buffer, format=image_format, dpi=120, bbox_inches='tight')
    return buffer.getvalue()


# -------------------------------------------------------------------- main --

def run(args: argparse.Namespace) -> None:
    check_outputs(args)
    cost = build_cost(args)
    points = load_points(args.points, depth=args.depth)
    fit = fit_map(points, degrees=args.degrees)

    sections = [
        f'MAP fit on {len(points)} points from {args.points} '
        f'(depth {args.depth}); leave-2-out CV over degrees '
        f'{" ".join(map(str, sorted(args.degrees)))}',
        fit.format_table(),
        f'chosen degree {fit.degree}: CV MAE {fit.cv_mae:.4f}, CV RMSE '
        f'{fit.cv_rmse:.4f}, train RMSE {fit.chosen.train_rmse:.4f}',
        fit.format_polynomial()]
    allocations = {}
    if args.budget is not None:
        for bounds in bound_choices(args.bounds):
            allocations[bounds] = allocate(fit, args.budget, args.depth,
                                           bounds)
            sections.append(budget_section(allocations[bounds], bounds, cost))
    if cost is not None:
        for bounds in bound_choices(args.bounds):
            sections.append(cost_section(fit, args.depth, cost, bounds,
                                         args.speedup, args.min_accuracy))

    # Everything is validated and computed; only now produce the outputs.
    plot_bytes = None
    if args.plot is not None:
        plot_bytes = render_plot(fit, args.depth, allocations, args.budget,
                                 args.plot.suffix.lstrip('.').lower())
    print('\n\n'.join(sections))
    if args.save_fit is not None:
        atomic_write_text(args.save_fit,
                          json.dumps(fit.to_dict(), indent=2) + '\n')
        print(f'\nwrote fit: {args.save_fit}')
    if plot_bytes is not None:
        with atomic_path(args.plot) as tmp:
            tmp.write_bytes(plot_bytes)
        print(f'wrote plot: {args.plot}')


def main(argv: Optional[Sequence[str]] = None) -> int:
    return run_reporting_errors(lambda: run(parse_args(argv)))


if __name__ == '__main__':
    sys.exit(main())
