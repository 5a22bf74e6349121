"""The project's plots: the fitted MAP surface (``tools/fit_map.py``), the
per-block widths of a width-pruned network (``tools/prune_width.py``) and
the demo's accuracy-vs-speedup and training-loss figures
(``tools/demo.py``).  Each returns the image as bytes; matplotlib is
imported only when a plot is drawn."""

import io
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from .fileio import atomic_path
from .pruning import Allocation, Candidate, MAPFit, count_name
from .spec import KIND_NAMES, PruneSpec

__all__ = [
    'figure_formats',
    'plot_map_fit',
    'plot_accuracy_vs_speedup',
    'plot_losses',
    'plot_widths',
    'plot_score_grads',
    'plot_recovery',
    'plot_split_comparison',
    'write_image',
]

#: Colours of the two layer types in the demo's plots.
KIND_COLOURS = dict(attn='tab:blue', act='tab:red')


def figure_formats() -> Dict[str, str]:
    """The image formats a plot can be written in (suffix -> name)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    return FigureCanvasAgg.get_supported_filetypes()


def _figure(size):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    return fig


def _image(fig, image_format: str = 'png', dpi: int = 110) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format=image_format, dpi=dpi, bbox_inches='tight')
    return buffer.getvalue()


def _labelled(
    fig,
    ax,
    xlabel: str,
    ylabel: str,
    title: str,
    legend_size: int = 8,
    legend_loc: str = 'best',
) -> bytes:
    """Label the axes, add a grid and the legend (``legend_loc='outside'``:
    right of the axes, where it hides no point); the figure's image."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if legend_loc == 'outside':
        ax.legend(
            fontsize=legend_size,
            loc='upper left',
            bbox_to_anchor=(1.02, 1),
            borderaxespad=0,
        )
    else:
        ax.legend(fontsize=legend_size, loc=legend_loc)
    return _image(fig)


def _dense_line(ax, dense_accuracy: float, note: str = '') -> None:
    """The dense model's accuracy as a dashed grey line."""
    ax.axhline(
        dense_accuracy,
        color='0.5',
        ls='--',
        lw=1,
        label=f'dense: {dense_accuracy:.2f} %{note}',
    )


def write_image(path, data: bytes, exclusive: bool = False) -> None:
    with atomic_path(path, exclusive) as tmp:
        tmp.write_bytes(data)


def plot_map_fit(
    fit: MAPFit,
    depth: int,
    allocations: Dict[str, Allocation],
    budget: Optional[int],
    image_format: str,
) -> bytes:
    """Fitted surface over the data (and budget line) range with observed
    points, the data hull, the budget line and the chosen splits."""
    from matplotlib.colors import Normalize
    from matplotlib.ticker import MaxNLocator

    observed = np.array([(p.a, p.t, p.accuracy) for p in fit.points])
    shown = [observed[:, :2]] + [
        np.array([(c.a, c.t) for c in allocation.candidates])
        for allocation in allocations.values()
    ]
    low = np.concatenate(shown).min(axis=0) - 0.05
    a_grid, t_grid = np.meshgrid(
        np.linspace(low[0], 1.0, 200), np.linspace(low[1], 1.0, 200)
    )
    surface = fit.predict(a_grid, t_grid)
    outside = ~fit.in_data_hull(a_grid, t_grid)
    # Extrapolated corners can fall far below the data, or rise above
    # 100 %: spend the colours on the points, the budget candidates and the
    # surface inside the hull, saturate beyond (contour lines still label
    # the rest).
    candidate_accuracy = [
        c.predicted_accuracy
        for allocation in allocations.values()
        for c in allocation.candidates
    ]
    spread = np.ptp(observed[:, 2]) or 1.0
    levels = MaxNLocator(20).tick_values(
        min([observed[:, 2].min() - spread, *candidate_accuracy]),
        max([*surface[~outside], *observed[:, 2], *candidate_accuracy]),
    )
    norm = Normalize(vmin=levels[0], vmax=levels[-1])

    fig = _figure((7.5, 6.5))
    ax = fig.subplots()
    filled = ax.contourf(
        a_grid,
        t_grid,
        surface,
        levels=levels,
        cmap='viridis',
        norm=norm,
        extend='both',
    )
    lines = ax.contour(
        a_grid,
        t_grid,
        surface,
        levels=12,
        colors='k',
        linewidths=0.5,
        alpha=0.6,
    )
    ax.clabel(lines, fmt='%.1f', fontsize=7)
    fig.colorbar(filled, ax=ax, label='accuracy (predicted surface, points)')
    ax.contourf(
        a_grid,
        t_grid,
        outside.astype(float),
        levels=[0.5, 1.5],
        colors='white',
        alpha=0.45,
    )  # extrapolated: faded

    hull = fit.hull_vertices
    ax.fill(
        hull[:, 0],
        hull[:, 1],
        fill=False,
        ls='--',
        color='white',
        lw=1.2,
        label='data hull (MAP interpolates inside; faded outside)',
    )
    ax.scatter(
        observed[:, 0],
        observed[:, 1],
        c=observed[:, 2],
        cmap='viridis',
        norm=norm,
        s=70,
        edgecolors='black',
        linewidths=1.0,
        zorder=3,
        label='observed points',
    )

    if budget is not None:
        ratio_sum = 2 - budget / depth
        a_line = np.linspace(low[0], 1.0, 2)
        ax.plot(
            a_line,
            ratio_sum - a_line,
            color='red',
            lw=1.5,
            label=f'budget {budget}: a + t = {ratio_sum:.3f}',
        )
        candidates = next(iter(allocations.values())).candidates
        ax.scatter(
            [c.a for c in candidates],
            [c.t for c in candidates],
            marker='x',
            color='red',
            s=30,
            zorder=3,
        )
    bounds_by_best: Dict[Candidate, List[str]] = {}  # one star per split
    for bounds, allocation in allocations.items():
        bounds_by_best.setdefault(allocation.best, []).append(bounds)
    for colour, (best, names) in zip(
        ('red', 'orange'), bounds_by_best.items()
    ):
        ax.scatter(
            [best.a],
            [best.t],
            marker='*',
            s=350,
            color=colour,
            edgecolors='black',
            zorder=4,
            label=f'argmax ({" & ".join(names)} bounds): '
            f'n_attn={best.n_attn}, '
            f'{count_name(fit.t_kind)}={best.n_act}, '
            f'P={best.predicted_accuracy:.2f}',
        )

    ax.set_xlim(low[0], 1.02)
    ax.set_ylim(low[1], 1.02)
    ax.set_aspect('equal')
    ax.set_xlabel('a = retained attention ratio')
    ax.set_ylabel(f't = retained {KIND_NAMES[fit.t_kind]} ratio')
    ax.set_title(
        f'MAP degree {fit.degree} on {len(fit.points)} points '
        f'(leave-2-out CV RMSE {fit.cv_rmse:.3f})'
    )
    ax.legend(loc='best', fontsize=7, framealpha=0.85)
    return _image(fig, image_format, dpi=120)


def plot_widths(spec: PruneSpec, image_format: str = 'png') -> bytes:
    """Per block, the attention width (heads x head dim) and the FFN hidden
    width of a width-pruned network, with its embedding width; removed
    attention and merged FFNs show as gaps."""
    widths = spec.widths
    blocks = np.arange(spec.depth)
    attention = [h * d for h, d in zip(widths.num_heads, widths.head_dims)]
    hidden = [h or 0 for h in widths.ffn_hidden]
    fig = _figure((7, 3.2))
    ax = fig.add_subplot()
    ax.bar(blocks - 0.2, attention, width=0.4, label='attention: heads x dim')
    ax.bar(blocks + 0.2, hidden, width=0.4, label='FFN hidden (0: merged)')
    for index, heads in enumerate(widths.num_heads):
        if heads:
            ax.annotate(
                str(heads),
                (index - 0.2, attention[index]),
                ha='center',
                va='bottom',
                fontsize=7,
            )
    ax.axhline(
        widths.embed_dims,
        color='k',
        linestyle='--',
        linewidth=1,
        label=f'embedding width {widths.embed_dims}',
    )
    ax.set_xticks(blocks)
    ax.set_xlabel('block (numbers: heads)')
    ax.set_ylabel('channels')
    ax.legend(fontsize=7)
    return _image(fig, image_format)


def plot_accuracy_vs_speedup(
    map_points: Sequence[Mapping[str, Any]],
    map_point_speedups: Sequence[float],
    models: Sequence[Mapping[str, Any]],
) -> bytes:
    """Accuracy against speedup: the MAP points (fast fine-tune, analytic
    MACs speedup) and the final models (measured speedup)."""
    fig = _figure((7, 5))
    ax = fig.subplots()
    markers = {'attn': 'v', 'act': '^', 'interleaved': 'D'}
    for schedule, marker in markers.items():
        chosen = [
            (s, float(p['accuracy']))
            for p, s in zip(map_points, map_point_speedups)
            if p['schedule'] == schedule
        ]
        if chosen:
            ax.scatter(
                *zip(*chosen),
                marker=marker,
                s=40,
                color='0.55',
                label=f'MAP points, {schedule} schedule (MACs '
                'speedup, fast fine-tune)',
            )
    colours = {
        'dense': 'tab:blue',
        'pruned': 'tab:orange',
        'merged': 'tab:red',
    }
    for model in models:
        ax.scatter(
            [model['speedup']],
            [model['accuracy']],
            s=160,
            marker='*',
            color=colours.get(model['name'], 'k'),
            edgecolors='black',
            zorder=3,
            label=f'{model["name"]}: {model["accuracy"]:.2f} % at '
            f'{model["speedup"]:.2f}x (measured)',
        )
    return _labelled(
        fig,
        ax,
        'speedup over the dense model',
        'top-1 accuracy (%) on the demo shapes val split',
        'Accuracy vs speedup, demo ViT at 32x32',
        7,
        'lower left',
    )


def plot_losses(curves: Mapping[str, Sequence[Sequence[float]]]) -> bytes:
    """Training loss against iteration, one panel per run."""
    fig = _figure((4 * len(curves), 3.2))
    axes = fig.subplots(1, len(curves), squeeze=False)[0]
    for ax, (name, curve) in zip(axes, curves.items()):
        if curve:
            ax.plot(*zip(*curve), marker='.', lw=1)
        ax.set_title(name)
        ax.set_xlabel('iteration')
        ax.set_ylabel('training loss')
        ax.grid(alpha=0.3)
    return _image(fig)


def plot_score_grads(
    curves: Mapping[str, Sequence[Sequence[float]]],
    removals: Sequence[Mapping[str, Any]],
) -> bytes:
    """Mean gate-score gradient magnitude of the open layers of each type
    against iteration (log scale), removals marked."""
    fig = _figure((7, 3.6))
    ax = fig.subplots()
    for kind, curve in curves.items():
        if curve:
            ax.plot(
                *zip(*curve),
                lw=1.2,
                color=KIND_COLOURS[kind],
                label=f'{kind} scores: mean |dL/dm| of the open layers',
            )
    for removal in removals:
        ax.axvline(
            removal['iter'], color=KIND_COLOURS[removal['kind']], ls=':', lw=1
        )
    ax.set_yscale('log')
    return _labelled(
        fig,
        ax,
        "iteration (dotted: a layer of that colour's type closed)",
        '|dL/dm| (logged mean)',
        'Gradient disparity of the gate scores during the search',
    )


def plot_recovery(
    recovery: Mapping[str, Mapping[str, Any]], dense_accuracy: float
) -> bytes:
    """Accuracy right after removing one layer (epoch 0) and after each
    fine-tuning epoch, one line per type."""
    fig = _figure((6, 3.8))
    ax = fig.subplots()
    _dense_line(ax, dense_accuracy)
    for kind, run in recovery.items():
        curve = [run['at_once']] + list(run['after_epochs'])
        ax.plot(
            range(len(curve)),
            curve,
            marker='o',
            color=KIND_COLOURS[kind],
            label=f'{kind} of block {run["block"]} removed',
        )
    return _labelled(
        fig,
        ax,
        'fine-tuning epochs after the removal',
        'top-1 accuracy (%)',
        'Recovery asymmetry: one layer removed from the dense model',
    )


def plot_split_comparison(
    splits: Sequence[Mapping[str, Any]], dense_accuracy: float
) -> bytes:
    """Accuracy (mean over seeds, seeds as small dots) against measured
    speedup of each split of the same budget."""
    fig = _figure((6.5, 4.2))
    ax = fig.subplots()
    _dense_line(ax, dense_accuracy, ' at 1x')
    markers = dict(MAP='*', attention_only='v', gelu_only='^', naive='s')
    for split in splits:
        marker = markers.get(split['method'], 'o')
        ax.scatter(
            [split['speedup']] * len(split['accuracies']),
            split['accuracies'],
            s=12,
            color='0.3',
            zorder=2,
        )
        ax.scatter(
            [split['speedup']],
            [split['mean']],
            marker=marker,
            s=200 if marker == '*' else 80,
            edgecolors='black',
            zorder=3,
            label=f'{split["method"]} ({split["n_attn"]} '
            f'attn + {split["n_act"]} GELU): {split["mean"]:.2f} % '
            f'({len(split["accuracies"])} seed(s))',
        )
    return _labelled(
        fig,
        ax,
        'measured speedup of the merged backbone',
        'top-1 accuracy (%) after the same fine-tuning',
        'Same budget, four allocations',
        7,
        'outside',
    )


def plot_tome(points: Sequence[Mapping[str, Any]]) -> bytes:
    """Accuracy against measured throughput of each model with token
    merging at each r (the paper's Fig. 8), one line per model."""
    fig = _figure((6.5, 4.2))
    ax = fig.subplots()
    styles = dict(
        dense=('tab:blue', 'o', 'dense + ToMe'),
        hetdpt=('tab:red', 's', 'HetDPT (MAP split) + ToMe'),
        attn_only=('tab:green', '^', 'attention-only split + ToMe'),
        attn_only_none=(
            'tab:olive',
            'v',
            'attention-only split + ToMe, removed_attn=none',
        ),
    )
    for model, (colour, marker, label) in styles.items():
        line = sorted(
            (p for p in points if p['model'] == model), key=lambda p: p['r']
        )
        if not line:
            continue
        ax.plot(
            [p['throughput'] for p in line],
            [p['accuracy'] for p in line],
            marker=marker,
            color=colour,
            ls='--' if model == 'attn_only_none' else '-',
            label=label,
        )
        for p in line:
            ax.annotate(
                f'r={p["r"]}',
                (p['throughput'], p['accuracy']),
                textcoords='offset points',
                xytext=(4, 4),
                fontsize=7,
                color=colour,
            )
    return _labelled(
        fig,
        ax,
        'measured throughput of the backbone (img/s)',
        'top-1 accuracy (%) on the demo shapes val split',
        'Token merging: dense vs HetDPT',
        7,
        'lower left',
    )
