"""The demo's figures: accuracy against speedup, training losses, the
gate-score gradients, recovery after one removal, the compared splits and
token merging.  Each returns the image as bytes."""

from typing import Any, Mapping, Sequence

from hetdpt_mm.visualization import image_bytes, new_figure

from .claims import SplitRow
from .results import CurvePoint, RecoveryRun, TomePoint
from .tome_claims import FIG8_METHODS, Fig8Method

#: Colours of the two layer types in the demo's plots.
KIND_COLOURS = dict(attn='tab:blue', act='tab:red')


def labelled(
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
    return image_bytes(fig)


def dense_line(ax, dense_accuracy: float, note: str = '') -> None:
    """The dense model's accuracy as a dashed grey line."""
    ax.axhline(
        dense_accuracy,
        color='0.5',
        ls='--',
        lw=1,
        label=f'dense: {dense_accuracy:.2f} %{note}',
    )


def plot_accuracy_vs_speedup(
    map_points: Sequence[Mapping[str, Any]],
    map_point_speedups: Sequence[float],
    models: Sequence[Mapping[str, Any]],
) -> bytes:
    """Accuracy against speedup: the MAP points (fast fine-tune, analytic
    MACs speedup) and the final models (measured speedup)."""
    fig = new_figure((7, 5))
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
    return labelled(
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
    fig = new_figure((4 * len(curves), 3.2))
    axes = fig.subplots(1, len(curves), squeeze=False)[0]
    for ax, (name, curve) in zip(axes, curves.items()):
        if curve:
            ax.plot(*zip(*curve), marker='.', lw=1)
        ax.set_title(name)
        ax.set_xlabel('iteration')
        ax.set_ylabel('training loss')
        ax.grid(alpha=0.3)
    return image_bytes(fig)


def plot_score_grads(
    curves: Mapping[str, Sequence[Sequence[float]]],
    removals: Sequence[Mapping[str, Any]],
) -> bytes:
    """Mean gate-score gradient magnitude of the open layers of each type
    against iteration (log scale), removals marked."""
    fig = new_figure((7, 3.6))
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
    return labelled(
        fig,
        ax,
        "iteration (dotted: a layer of that colour's type closed)",
        '|dL/dm| (logged mean)',
        'Gradient disparity of the gate scores during the search',
    )


def plot_recovery(
    recovery: Mapping[str, RecoveryRun], dense_accuracy: float
) -> bytes:
    """Accuracy right after removing one layer (epoch 0) and after each
    fine-tuning epoch, one line per type."""
    fig = new_figure((6, 3.8))
    ax = fig.subplots()
    dense_line(ax, dense_accuracy)
    for kind, run in recovery.items():
        curve = [run.at_once] + run.after_epochs
        ax.plot(
            range(len(curve)),
            curve,
            marker='o',
            color=KIND_COLOURS[kind],
            label=f'{kind} of block {run.block} removed',
        )
    return labelled(
        fig,
        ax,
        'fine-tuning epochs after the removal',
        'top-1 accuracy (%)',
        'Recovery asymmetry: one layer removed from the dense model',
    )


def plot_split_comparison(
    splits: Sequence[SplitRow], dense_accuracy: float
) -> bytes:
    """Accuracy (mean over seeds, seeds as small dots) against measured
    speedup of each split of the same budget."""
    fig = new_figure((6.5, 4.2))
    ax = fig.subplots()
    dense_line(ax, dense_accuracy, ' at 1x')
    markers = dict(MAP='*', attention_only='v', gelu_only='^', naive='s')
    for split in splits:
        marker = markers.get(split.method, 'o')
        ax.scatter(
            [split.speedup] * len(split.accuracies),
            split.accuracies,
            s=12,
            color='0.3',
            zorder=2,
        )
        ax.scatter(
            [split.speedup],
            [split.mean],
            marker=marker,
            s=200 if marker == '*' else 80,
            edgecolors='black',
            zorder=3,
            label=f'{split.method} ({split.n_attn} '
            f'attn + {split.n_act} GELU): {split.mean:.2f} % '
            f'({len(split.accuracies)} seed(s))',
        )
    return labelled(
        fig,
        ax,
        'measured speedup of the merged backbone',
        'top-1 accuracy (%) after the same fine-tuning',
        'Same budget, four allocations',
        7,
        'outside',
    )


def plot_tome(points: Sequence[TomePoint]) -> bytes:
    """Accuracy against measured throughput of each model with token
    merging at each r (the paper's Fig. 8), one line per model."""
    fig = new_figure((6.5, 4.2))
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
            (p for p in points if p.model == model), key=lambda p: p.r
        )
        if not line:
            continue
        ax.plot(
            [p.throughput for p in line],
            [p.accuracy for p in line],
            marker=marker,
            color=colour,
            ls='--' if model == 'attn_only_none' else '-',
            label=label,
        )
        for p in line:
            ax.annotate(
                f'r={p.r}',
                (p.throughput, p.accuracy),
                textcoords='offset points',
                xytext=(4, 4),
                fontsize=7,
                color=colour,
            )
    return labelled(
        fig,
        ax,
        'measured throughput of the backbone (img/s)',
        'top-1 accuracy (%) on the demo shapes val split',
        'Token merging: dense vs HetDPT',
        7,
        'lower left',
    )


def plot_fig8(
    points: Sequence[CurvePoint], readings: Sequence[Fig8Method]
) -> bytes:
    """The paper's Fig. 8: top-1 against measured throughput of dense and
    HetDPT, one panel per method; every point, and each curve's upper
    envelope as its line."""
    fig = new_figure((11, 4.2))
    panels = fig.subplots(1, len(readings))
    styles = dict(
        dense=('tab:blue', 'o', 'dense'),
        hetdpt=('tab:red', 's', 'HetDPT (MAP split)'),
    )
    for ax, reading in zip(panels, readings):
        method = reading.method
        for model, (colour, marker, label) in styles.items():
            mine = [
                p for p in points if p.model == model and p.method == method
            ]
            ax.scatter(
                [p.throughput for p in mine],
                [p.accuracy for p in mine],
                marker=marker,
                color=colour,
                alpha=0.4,
            )
            front = reading.envelopes[model]
            ax.plot(
                [p.throughput for p in front],
                [p.accuracy for p in front],
                marker=marker,
                color=colour,
                label=f'{label} + {FIG8_METHODS[method]} (envelope)',
            )
        ax.set_xlabel('measured throughput of the backbone (img/s)')
        ax.set_ylabel('top-1 accuracy (%)')
        ax.set_title(f'{FIG8_METHODS[method]}: dense vs HetDPT')
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc='lower left')
    return image_bytes(fig)
