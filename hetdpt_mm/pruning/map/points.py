"""MAP points: ``(a, t, accuracy)`` read from CSV or JSON files and checked
(docs/user_guides/map.md, *Points*)."""

import contextlib
import csv
import io
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

from ...fileio import check_input_file, loads_json
from ...spec import ACT, FFN
from ..validation import check_depth

ACCURACY_COLUMNS = ('accuracy', 'acc')
#: The kinds MAP's ``t`` can count: GELUs (the paper's) or whole FFN
#: branches; a points file says which by its columns.
T_KINDS = (ACT, FFN)
#: The removed-count columns by the kind ``t`` counts.
COUNT_COLUMNS = {kind: ('n_attn', f'n_{kind}') for kind in T_KINDS}
ALL_COUNT_COLUMNS = ('n_attn', *(f'n_{kind}' for kind in T_KINDS))
RATIO_COLUMNS = ('a', 't')
# Ratios stored next to counts may be rounded to two decimals, as in the
# paper's table (11/12 -> 0.92); one layer at depth <= 50 differs by >= 0.02.
RATIO_TOLERANCE = 0.01


@dataclass(frozen=True)
class MAPPoint:
    """One observation: retained ratios and the accuracy after fine-tuning."""

    a: float
    t: float
    accuracy: float


def load_points(
    path: Union[str, Path], depth: Optional[int] = None
) -> List[MAPPoint]:
    """MAP points from a CSV file with a header row, or a JSON file (first
    character ``[`` or ``{``) of a list of objects or ``{"points": [...]}``;
    the columns: :func:`parse_points`."""
    return load_points_and_kind(path, depth)[0]


def load_points_and_kind(
    path: Union[str, Path],
    depth: Optional[int] = None,
    unrecorded: Optional[str] = ACT,
) -> Tuple[List[MAPPoint], Optional[str]]:
    """:func:`load_points`, and the kind their ``t`` counts
    (:func:`points_t_kind`)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f'MAP points file not found: {path}; a *_map-collect run writes '
            "it, or use the paper's tests/data/map_points_paper.csv"
        )
    try:
        text = check_input_file(path, 'MAP points file').read_text(
            encoding='utf-8-sig'
        )
    except UnicodeDecodeError as err:
        raise ValueError(f'{path}: not UTF-8 text ({err.reason})') from None
    if not text.strip():
        raise ValueError(f'{path}: file is empty')
    read = (
        _read_json_records if text.lstrip()[0] in '[{' else _read_csv_records
    )
    records, locations = read(text, path)
    points = parse_points(
        records, depth=depth, source=str(path), locations=locations
    )
    return points, points_t_kind(records, str(path), unrecorded)


def _read_json_records(
    text: str, path: Path
) -> Tuple[List[Mapping[str, Any]], List[str]]:
    data = loads_json(text, str(path))
    if isinstance(data, dict):
        data = data.get('points')
    if not isinstance(data, list) or not all(
        isinstance(p, dict) for p in data
    ):
        raise ValueError(f'{path}: need a list of point objects, or "points"')
    return data, [
        f'{path}, point {index}' for index in range(1, len(data) + 1)
    ]


def _read_csv_records(
    text: str, path: Path
) -> Tuple[List[Mapping[str, Any]], List[str]]:
    reader = csv.DictReader(io.StringIO(text))
    # DictReader keeps the last of two columns of one name.
    counts = Counter(map(_normalise_key, reader.fieldnames or ()))
    for name in (*ACCURACY_COLUMNS, *ALL_COUNT_COLUMNS, *RATIO_COLUMNS):
        if counts[name] > 1:
            raise ValueError(f'{path}: the header repeats column "{name}"')
    records, locations = [], []
    for row in reader:
        records.append(row)
        locations.append(
            f'{path}, row {len(records)} (line {reader.line_num})'
        )
    if not records:
        raise ValueError(f'{path}: no data rows (only a header)')
    return records, locations


def points_t_kind(
    records: Sequence[Mapping[str, Any]],
    source: str = 'points',
    unrecorded: Optional[str] = ACT,
) -> Optional[str]:
    """The kind ``t`` counts by the columns (``n_ffn`` / ``removed_ffn``:
    FFN branches; ``n_act`` / ``removed_act``: GELUs), ``unrecorded`` for
    ratios alone."""
    columns = _columns(records)
    kinds = [
        kind for kind in T_KINDS if {f'n_{kind}', f'removed_{kind}'} & columns
    ]
    if len(kinds) > 1:
        raise ValueError(
            f'{source}: columns count both GELUs and FFN branches; '
            'give (attn, act) and (attn, ffn) points in separate files'
        )
    return kinds[0] if kinds else unrecorded


def _columns(records: Sequence[Mapping[str, Any]]) -> set:
    return {
        _normalise_key(key)
        for record in records
        for key in record
        if key is not None
    }


def parse_points(
    records: Sequence[Mapping[str, Any]],
    depth: Optional[int] = None,
    source: str = 'points',
    locations: Optional[Sequence[str]] = None,
) -> List[MAPPoint]:
    """Records (dicts, e.g. CSV rows; names case-insensitive) of ``accuracy``
    (or ``acc``) and removed counts (with ``depth``; ratios beside them must
    agree) or retained ratios ``a, t``.  Errors name ``source`` and row."""
    if not records:
        raise ValueError(f'{source}: contains no points')
    if depth is not None:
        depth = check_depth(depth)
    if locations is None:
        locations = [
            f'{source}, row {index}' for index in range(1, len(records) + 1)
        ]
    columns = _columns(records)
    count_columns = COUNT_COLUMNS[points_t_kind(records, source)]
    given = [name for name in ACCURACY_COLUMNS if name in columns]
    if len(given) > 1:
        raise ValueError(
            f'{source}: columns {" and ".join(map(repr, given))} both give '
            'the accuracy; keep one'
        )
    has_accuracy = bool(given)
    has_counts = set(count_columns) <= columns
    has_ratios = set(RATIO_COLUMNS) <= columns
    if not has_accuracy or not (has_counts or has_ratios):
        raise ValueError(
            f'{source}: need "accuracy" and "a", "t" (or "n_attn", "n_act"'
            f' with depth); found {sorted(columns)}'
        )
    if has_counts and not has_ratios and depth is None:
        raise ValueError(f'{source}: removed counts need depth (blocks)')
    use_counts = has_counts and depth is not None
    points = [
        _point_from_record(
            record, depth if use_counts else None, where, count_columns
        )
        for record, where in zip(records, locations)
    ]
    _check_accuracy_units(points, locations)
    return points


def _check_accuracy_units(
    points: Sequence[MAPPoint], locations: Sequence[str]
) -> None:
    """A file mixing 81.8 and 0.818 would fit a surface through both."""
    fractions = [w for p, w in zip(points, locations) if p.accuracy <= 1]
    percents = [w for p, w in zip(points, locations) if p.accuracy > 1]
    if fractions and percents:
        raise ValueError(
            f'accuracies mix fractions (<= 1, e.g. {fractions[0]}) and '
            f'percentages (> 1, e.g. {percents[0]}); give all in one unit'
        )


def _normalise_key(key: Any) -> str:
    return str(key).strip().lower()


def _point_from_record(
    record: Mapping[str, Any],
    depth: Optional[int],
    where: str,
    count_columns: Sequence[str],
) -> MAPPoint:
    fields = {
        _normalise_key(key): value
        for key, value in record.items()
        if key is not None
    }
    values = {
        name: _as_number(fields[name], name, where)
        for name in (*ACCURACY_COLUMNS, *count_columns, *RATIO_COLUMNS)
        if _is_given(fields.get(name))
    }

    accuracy = next(
        (values[name] for name in ACCURACY_COLUMNS if name in values), None
    )
    if accuracy is None:
        raise ValueError(f'{where}: no accuracy value')
    if not (math.isfinite(accuracy) and 0 <= accuracy <= 100):
        raise ValueError(
            f'{where}: accuracy is {accuracy:g}; it must be a '
            'percentage (0 to 100) or a fraction (0 to 1)'
        )

    columns = RATIO_COLUMNS if depth is None else count_columns
    a, t = (_retained_ratio(values, name, depth, where) for name in columns)
    if depth is not None:
        for name, derived in zip(RATIO_COLUMNS, (a, t)):
            given = values.get(name)
            if given is not None and abs(given - derived) > RATIO_TOLERANCE:
                count_name = count_columns[RATIO_COLUMNS.index(name)]
                raise ValueError(
                    f'{where}: {name}={given:g} disagrees with '
                    f'{count_name}={values[count_name]:g} at depth {depth} '
                    f'(which gives {name}={derived:.4f})'
                )
    return MAPPoint(a=a, t=t, accuracy=accuracy)


def _is_given(value: Any) -> bool:
    return value is not None and not (
        isinstance(value, str) and not value.strip()
    )


def _as_number(value: Any, name: str, where: str) -> float:
    if not isinstance(value, bool):
        with contextlib.suppress(TypeError, ValueError):
            return float(value)
    raise ValueError(
        f'{where}: column "{name}" value {value!r} is not a number'
    )


def _retained_ratio(
    values: Mapping[str, float], name: str, depth: Optional[int], where: str
) -> float:
    """Column ``name`` as a retained ratio: a removed count at ``depth``, or
    without it a ratio."""
    if name not in values:
        raise ValueError(f'{where}: missing value for "{name}"')
    value = values[name]
    if depth is None:
        if not 0.0 <= value <= 1.0:  # also rejects NaN
            raise ValueError(
                f'{where}: ratio {name}={value:g} is outside [0, 1]'
            )
        return value
    if not (math.isfinite(value) and value.is_integer()):
        raise ValueError(f'{where}: {name}={value:g} is not a whole number')
    if not 0 <= value <= depth:
        raise ValueError(f'{where}: {name}={value:g} is outside [0, {depth}]')
    return (depth - value) / depth
