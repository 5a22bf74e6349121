"""Where :class:`~.prune_hook.HetDPTPruneHook`'s removal counts come from:
given counts, a MAP points file, or a saved MAP fit with a budget.

The sources are checked when the hook is built (:func:`check_count_sources`)
and resolved at the backbone's depth before training
(:func:`resolve_counts`); a points file or fit recorded for other kinds than
the hook's ``map_kinds`` is refused then with :class:`UsageError`.
"""

from typing import Dict, Mapping, Optional, Sequence, Tuple, Union

from ..errors import UsageError
from ..fileio import read_json_file
from ..pruning import (
    MAPFit,
    allocate,
    allocate_types,
    fit_map,
    fit_types,
    load_points_and_kind,
    load_type_points,
)
from ..spec import ACT, ATTN, FFN, LAYER_KINDS

__all__ = ['UsageError', 'check_count_sources', 'resolve_counts']

#: The kind pairs MAP's retained ratios ``(a, t)`` can count; three or
#: more names are layer types (``backbone.layer_types()``, e.g. a windowed
#: ViT's ``('attn_window', 'attn_global', 'act')``), fitted by
#: :func:`~hetdpt_mm.pruning.fit_types`.
MAP_KINDS = ((ATTN, ACT), (ATTN, FFN))
#: What ``t`` counts, by the kind of its layers.
T_COUNTS = {ACT: 'GELUs', FFN: 'FFN branches'}


def check_count_sources(
    counts: Optional[Mapping[str, int]],
    map_points: Optional[str],
    map_fit: Union[None, str, Mapping],
    budget: Optional[int],
    map_kinds: Sequence[str],
) -> Tuple[Optional[Dict[str, int]], Tuple[str, str]]:
    """Exactly one of ``counts``, ``map_points`` or ``map_fit``, a budget
    with MAP and none with counts, and known ``map_kinds``; returns the
    counts (a dict, or None) and the map kinds (a tuple)."""
    sources = [
        name
        for name, value in (
            ('counts', counts),
            ('map_points', map_points),
            ('map_fit', map_fit),
        )
        if value is not None
    ]
    if len(sources) != 1:
        raise ValueError(
            'HetDPTPruneHook needs exactly one of counts, '
            f'map_points or map_fit; got {sources or "none"}'
        )
    if counts is not None:
        counts = dict(counts)
        attention = [name for name in counts if name.startswith(ATTN)]
        if ACT not in counts or not attention:
            raise ValueError(
                'counts must be dict(attn=..., act=...) (and ffn=...; a '
                "windowed ViT's attention also as attn_window=..., "
                f'attn_global=...), got {counts}'
            )
        if budget is not None:
            raise ValueError(
                'budget is for MAP; with explicit counts leave it out'
            )
    elif budget is None:
        raise ValueError(
            f'{sources[0]} needs a budget (total number of layers to remove)'
        )
    map_kinds = tuple(map_kinds)
    if map_kinds not in MAP_KINDS and len(map_kinds) < 3:
        raise ValueError(
            f"map_kinds must be ('attn', 'act'), ('attn', 'ffn') or three "
            f"or more layer types ('attn_window', 'attn_global', 'act'), "
            f'got {map_kinds}'
        )
    if len(map_kinds) > 2 and map_points is None:
        raise ValueError(
            f'map_kinds {map_kinds}: MAP over layer types fits map_points'
        )
    return counts, map_kinds


def resolve_counts(
    depth: int,
    logger,
    *,
    counts: Optional[Mapping[str, int]],
    map_points: Optional[str],
    map_fit: Union[None, str, Mapping],
    budget: Optional[int],
    map_kinds: Tuple[str, str],
    bounds,
    degrees: Sequence[int],
    types: Mapping[str, Tuple[str, Sequence[int]]],
) -> Dict[str, int]:
    """The layers to remove per kind (or layer type of ``types``, the
    backbone's) at ``depth``: the given counts, or MAP's allocation of
    ``budget`` (logged with the fit)."""
    if counts is not None:
        counts = {
            name: counts[name]
            for name in (*LAYER_KINDS, *types)
            if name in counts
        }
        _check_count_values(counts, depth)
        logger.info(
            'HetDPT prune counts (given): '
            + ' '.join(f'{kind}={value}' for kind, value in counts.items())
        )
        return counts
    if len(map_kinds) > 2:
        return _type_counts(
            depth,
            logger,
            map_points,
            budget,
            map_kinds,
            bounds,
            degrees,
            types,
        )
    t_kind = map_kinds[1]
    if map_points is not None:
        points, recorded = load_points_and_kind(
            map_points, depth=depth, unrecorded=None
        )
        source = f'points {map_points}'
        _check_recorded_kind(
            recorded, t_kind, f'MAP points file {map_points}', 'its columns'
        )
        if recorded is None:
            source += (
                ' (ratios alone, which do not say what t counts: '
                f'read as {map_kinds})'
            )
        fit = fit_map(points, degrees, t_kind=t_kind)
    else:
        if isinstance(map_fit, Mapping):
            data, source = map_fit, 'the given fit'
        else:
            data = read_json_file(map_fit, 'MAP fit file')
            source = f'fit {map_fit}'
        fit = MAPFit.from_dict(data)
        _check_recorded_kind(fit.t_kind, t_kind, f'MAP {source}', 'its t_kind')
    allocation = allocate(fit, budget, depth, bounds)
    logger.info(
        f'HetDPT MAP from {source} ({len(fit.points)} points), degree '
        f'by leave-2-out CV:\n{fit.format_table()}\n'
        f'{fit.format_polynomial()}\n'
        f'allocation of budget {budget} at depth {depth} (bounds '
        f'{allocation.bounds}; "predicted" is in the units of the points\' '
        'accuracies, those of the model and task they were measured on, '
        "e.g. the paper's DeiT-B ImageNet top-1 %, not this run's; the "
        f'split is what counts):\n{allocation.format_table()}\n'
        f'HetDPT prune counts (MAP): attn={allocation.n_attn} '
        f'{t_kind}={allocation.n_act}'
    )
    resolved = {ATTN: allocation.n_attn, ACT: 0}
    resolved[t_kind] = allocation.n_act
    return resolved


def _type_counts(
    depth: int,
    logger,
    map_points: str,
    budget: int,
    map_kinds: Tuple[str, ...],
    bounds,
    degrees: Sequence[int],
    types: Mapping[str, Tuple[str, Sequence[int]]],
) -> Dict[str, int]:
    """MAP's split of ``budget`` over three or more layer types (the names
    of ``map_kinds``, ``types`` the backbone's)."""
    unknown = sorted(set(map_kinds) - set(types))
    if unknown:
        raise UsageError(
            f'HetDPTPruneHook: map_kinds names {unknown}, which are not '
            f'layer types of this backbone ({sorted(types)})'
        )
    points = load_type_points(map_points, map_kinds, depth)
    fit = fit_types(points, map_kinds, depth, degrees)
    sizes = {name: len(types[name][1]) for name in map_kinds}
    allocation = allocate_types(fit, budget, sizes, bounds)
    logger.info(
        f'HetDPT MAP of {map_kinds} from points {map_points} '
        f'({len(fit.points)} points), degree by leave-2-out CV:\n'
        f'{fit.format_table()}\n{fit.format_polynomial()}\n'
        f'allocation of budget {budget} at depth {depth}:\n'
        f'{allocation.format_table()}\n'
        f'HetDPT prune counts (MAP): {allocation.counts()}'
    )
    return allocation.counts()


def _check_recorded_kind(
    recorded: Optional[str], t_kind: str, what: str, where: str
) -> None:
    """Refuse MAP data whose ``t`` counts another kind than ``t_kind``
    (``recorded`` None: the data do not say)."""
    if recorded is None or recorded == t_kind:
        return
    raise UsageError(
        f'HetDPTPruneHook: {what} counts {(ATTN, recorded)} ({where}: t '
        f'counts the {T_COUNTS[recorded]} kept), but map_kinds is '
        f'{(ATTN, t_kind)} (t counting the {T_COUNTS[t_kind]} kept); set '
        f'map_kinds={(ATTN, recorded)} or give MAP data collected for '
        f'{(ATTN, t_kind)}'
    )


def _check_count_values(counts: Mapping[str, int], depth: int) -> None:
    for kind, value in counts.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not 0 <= value <= depth
        ):
            raise ValueError(
                f'counts[{kind!r}] must be an integer in '
                f'0..{depth}, got {value!r}'
            )
