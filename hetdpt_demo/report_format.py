"""Markdown pieces of the demo report: tables, durations, block lists."""

from typing import Any, Iterable, List, Optional, Sequence

from hetdpt_mm.spec import ACT, ATTN

#: How the report names the layer types of the prune decisions.
LAYER_TYPE_NAMES = {ATTN: 'attention', ACT: 'GELU'}


def table(
    header: Sequence[str],
    rows: Iterable[Sequence[Any]],
    align: Optional[str] = None,
) -> List[str]:
    """Markdown table; ``align`` has one ``l``/``r`` per column."""
    align = align or 'l' + 'r' * (len(header) - 1)
    return [
        '| ' + ' | '.join(header) + ' |',
        '| ' + ' | '.join('---' if a == 'l' else '---:' for a in align) + ' |',
    ] + ['| ' + ' | '.join(str(cell) for cell in row) + ' |' for row in rows]


def duration(seconds: float) -> str:
    """``m:ss``."""
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f'{minutes}:{seconds:02d}'


def blocks(indices: Sequence[int]) -> str:
    return ', '.join(map(str, indices)) if indices else '-'


def spread(values: Sequence[float]) -> str:
    """``mean ± half range`` of one result over seeds."""
    mean = sum(values) / len(values)
    if len(values) == 1:
        return f'{mean:.2f} (1 seed)'
    return (
        f'{mean:.2f} ± {(max(values) - min(values)) / 2:.2f} '
        f'({len(values)} seeds)'
    )


def clock_name(clock: str) -> str:
    return 'process CPU time' if clock == 'process' else 'wall clock'
