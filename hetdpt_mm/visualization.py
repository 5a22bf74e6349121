"""The project's plots: the fitted MAP surface (``tools/fit_map.py``) and
the per-block widths of a width-pruned network (``tools/prune_width.py``),
with :func:`new_figure` and :func:`image_bytes` for programs that draw
their own.  Each returns the image as bytes; matplotlib is imported only
when a plot is drawn."""

import io
from typing import Dict, List, Optional

import numpy as np

from .fileio import atomic_path
from .pruning import Allocation, Candidate, MAPFit, count_name
from .spec import KIND_NAMES, PruneSpec

__all__ = [
    'figure_formats',
    'image_bytes',
    'new_figure',
    'plot_map_fit',
    'plot_widths',
    'write_image',
]


def figure_formats() -> Dict[str, str]:
    """The image formats a plot can be written in (suffix -> name)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    return FigureCanvasAgg.get_supported_filetypes()


def new_figure(size):
    """A matplotlib figure of ``size`` inches, drawn off-screen (Agg)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    return fig


def image_bytes(fig, image_format: str = 'png', dpi: int = 110) -> bytes:
    """The figure as an image file's bytes, cropped to its contents."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=image_format, dpi=dpi, bbox_inches='tight')
    return buffer.getvalue()


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

    fig = new_figure((7.5, 6.5))
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
    return image_bytes(fig, image_format, dpi=120)


def plot_widths(spec: PruneSpec, image_format: str = 'png') -> bytes:
    """Per block, the attention width (heads x head dim) and the FFN hidden
    width of a width-pruned network, with its embedding width; removed
    attention and merged FFNs show as gaps."""
    widths = spec.widths
    blocks = np.arange(spec.depth)
    attention = [h * d for h, d in zip(widths.num_heads, widths.head_dims)]
    hidden = [h or 0 for h in widths.ffn_hidden]
    fig = new_figure((7, 3.2))
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
    return image_bytes(fig, image_format)
