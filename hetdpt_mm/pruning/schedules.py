"""Removal schedules: which kind of layer each removal takes, and when.

Two families, one per hook:

* :class:`PruneSchedule` (``HetDPTPruneHook``, docs/method.md §3): from the
  number of removals per kind, the order of the kinds and the training
  iteration after which each removal happens: ``'progressive'`` (the
  authors') and ``'epoch'``.
* :class:`CollectSchedule` (``MAPCollectHook``, docs/method.md §2): the kind
  each collection step removes (the hook's ``interval`` says when):
  ``'attn'``, ``'act'``, ``'interleaved'``, ``'ffn'``, or any repeating
  pattern (``['attn', 'ffn']`` interleaves whole branches).

The classes are registered in :data:`~hetdpt_mm.registry.REMOVAL_SCHEDULES`;
the hooks take a schedule as its name or as a config dict.
"""

import abc
import inspect
import math
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Type, Union

from ..registry import REMOVAL_SCHEDULES
from ..spec import ACT, ATTN, FFN, LAYER_KINDS, positive_int

__all__ = [
    'authors_stages',
    'removal_order',
    'PruneSchedule',
    'ProgressiveSchedule',
    'EpochSchedule',
    'CollectSchedule',
    'CyclicSchedule',
    'COLLECT_PRESETS',
    'build_prune_schedule',
    'build_collect_schedule',
]


def authors_stages(n: int) -> List[int]:
    """The authors' stage lengths 3, 5, 7, ... (DeiT-B: prunes after epochs
    3, 8, 15, 24, 35, 48, 63, 80)."""
    return [3 + 2 * k for k in range(n)]


#: Who goes first between kinds with equal counts (the authors: GELU).
_TIE_ORDER = (ACT, FFN, ATTN)


def removal_order(counts: Mapping[str, int]) -> List[str]:
    """Interleave the kinds (or layer types: a windowed ViT's
    ``attn_window``, ``attn_global``), the one with the larger count first
    (ties to GELU, then to FFN branches, then to attention types by name),
    then the rest of the larger ones."""

    def tie(kind: str):
        position = _TIE_ORDER.index(kind) if kind in _TIE_ORDER else 2
        return (position, kind != ATTN, kind)

    kinds = sorted(
        (kind for kind in counts if counts[kind]),
        key=lambda kind: (-counts[kind], tie(kind)),
    )
    order = []
    for step in range(max((counts[kind] for kind in kinds), default=0)):
        order += [kind for kind in kinds if step < counts[kind]]
    return order


class PruneSchedule(abc.ABC):
    """When ``HetDPTPruneHook`` removes each layer.  Positions are "after
    training iteration i", counted from 1 over the whole run, so epoch- and
    iteration-based loops work alike."""

    #: Registered name (logs and the hook's checkpoint state).
    name: str
    #: Whether positions are meant in epochs (the logs then show epochs).
    by_epoch: bool = True

    def order(self, counts: Mapping[str, int]) -> List[str]:
        """The kind of each removal, in order."""
        return removal_order(counts)

    @abc.abstractmethod
    def iterations(self, num_removals: int, iters_per_epoch: int) -> List[int]:
        """The training iteration after which each removal happens."""


class ProgressiveSchedule(PruneSchedule):
    """Removal ``k`` ends stage ``k``.

    Args:
        stages: stage lengths: a list (one per removal, extra entries
            unused), an int (all equal) or ``None`` (3, 5, 7, ...).
        by_epoch: ``stages`` counts epochs (True) or iterations (False).
    """

    name = 'progressive'

    def __init__(
        self,
        stages: Union[None, int, Sequence[int]] = None,
        by_epoch: bool = True,
    ):
        if stages is None and not by_epoch:
            raise ValueError('by_epoch=False needs stages in iterations')
        if isinstance(stages, int):
            stages = positive_int(stages, 'stages')
        elif stages is not None:
            stages = [positive_int(length, 'stages') for length in stages]
        self.stages = stages
        self.by_epoch = by_epoch

    def iterations(self, num_removals: int, iters_per_epoch: int) -> List[int]:
        if self.stages is None:
            lengths = authors_stages(num_removals)
        elif isinstance(self.stages, int):
            lengths = [self.stages] * num_removals
        else:
            if len(self.stages) < num_removals:
                raise ValueError(
                    f'{len(self.stages)} stages for {num_removals} removals'
                )
            lengths = self.stages[:num_removals]
        unit = iters_per_epoch if self.by_epoch else 1
        positions, end = [], 0
        for length in lengths:
            end += length
            positions.append(end * unit)
        return positions

    def __repr__(self) -> str:
        return (
            f'ProgressiveSchedule(stages={self.stages}, '
            f'by_epoch={self.by_epoch})'
        )


class EpochSchedule(PruneSchedule):
    """Every removal during one prune epoch, spread evenly over its
    iterations, the last one at the end of the epoch, so the scores keep
    adapting between removals.

    Args:
        prune_epoch: the prune epoch, counted from 1.
    """

    name = 'epoch'

    def __init__(self, prune_epoch: Optional[int] = None):
        self.prune_epoch = positive_int(prune_epoch, 'prune_epoch')

    def iterations(self, num_removals: int, iters_per_epoch: int) -> List[int]:
        start = (self.prune_epoch - 1) * iters_per_epoch
        return [
            start + math.ceil(k * iters_per_epoch / num_removals)
            for k in range(1, num_removals + 1)
        ]

    def __repr__(self) -> str:
        return f'EpochSchedule(prune_epoch={self.prune_epoch})'


class CollectSchedule(abc.ABC):
    """Which kind of layer each ``MAPCollectHook`` step removes."""

    #: Name in the points file, the logs and the hook's checkpoint state.
    name: str

    @abc.abstractmethod
    def kinds(self, steps: int) -> List[str]:
        """The kind removed at steps ``1..steps``."""


#: The named MAP collection schedules: attention only (points (a, 1)), GELU
#: only (points (1, t)), alternating, attention first (near the diagonal),
#: or FFN branches only (whole-branch removal: t counts the FFN branches).
COLLECT_PRESETS: Dict[str, Tuple[str, ...]] = {
    'attn': (ATTN,),
    'act': (ACT,),
    'interleaved': (ATTN, ACT),
    'ffn': (FFN,),
}


class CyclicSchedule(CollectSchedule):
    """Step ``k`` (from 1) removes ``kinds[(k - 1) % len(kinds)]``.

    Args:
        kinds: the repeating pattern of layer kinds, e.g. ``['act', 'act',
            'attn']``, or of a family's layer types (a windowed ViT's
            ``'attn_window'``, ``'attn_global'``).
    """

    def __init__(self, kinds: Sequence[str]):
        kinds = tuple(kinds)
        # A family's layer types split a kind: attn_window, attn_global.
        if not kinds or any(k.split('_')[0] not in LAYER_KINDS for k in kinds):
            raise ValueError(f'kinds must be a list of {LAYER_KINDS} or types')
        self.pattern = kinds

    @property
    def name(self) -> str:
        for name, kinds in COLLECT_PRESETS.items():
            if kinds == self.pattern:
                return name
        return '-'.join(self.pattern)

    def kinds(self, steps: int) -> List[str]:
        return [
            self.pattern[step % len(self.pattern)] for step in range(steps)
        ]

    def __repr__(self) -> str:
        return f'CyclicSchedule(kinds={list(self.pattern)})'


for _schedule in (ProgressiveSchedule, EpochSchedule):
    REMOVAL_SCHEDULES.register_module(name=_schedule.name, module=_schedule)
REMOVAL_SCHEDULES.register_module(name='cyclic', module=CyclicSchedule)


def _built(cfg: Mapping, family: Type) -> object:
    schedule = REMOVAL_SCHEDULES.build(cfg)
    if not isinstance(schedule, family):
        raise ValueError(f'this hook needs a {family.__name__}, not {cfg}')
    return schedule


def build_prune_schedule(
    schedule: Union[str, Mapping, PruneSchedule], **options
) -> PruneSchedule:
    """A :class:`PruneSchedule` from a built one, a config dict, or a name
    plus ``options`` (the hook's ``stages``, ``by_epoch``, ``prune_epoch``;
    ``None`` = not given), which must be arguments of that schedule."""
    options = {
        key: value for key, value in options.items() if value is not None
    }
    if isinstance(schedule, str):
        names = [
            name
            for name, module in REMOVAL_SCHEDULES.module_dict.items()
            if issubclass(module, PruneSchedule)
        ]
        if schedule not in names:
            raise ValueError(f'schedule must be in {names}, not {schedule!r}')
        accepted = list(
            inspect.signature(REMOVAL_SCHEDULES.get(schedule)).parameters
        )
        foreign = sorted(set(options) - set(accepted))
        if foreign:
            raise ValueError(f'{schedule!r} takes {accepted}, not {foreign}')
        return _built(dict(type=schedule, **options), PruneSchedule)
    if options:
        raise ValueError(f'give {sorted(options)} inside the schedule config')
    if isinstance(schedule, PruneSchedule):
        return schedule
    return _built(schedule, PruneSchedule)


def build_collect_schedule(
    schedule: Union[str, Mapping, CollectSchedule],
) -> CollectSchedule:
    """A :class:`CollectSchedule` from a built one, a config dict, or one of
    the :data:`COLLECT_PRESETS` names."""
    if isinstance(schedule, CollectSchedule):
        return schedule
    if isinstance(schedule, str):
        if schedule not in COLLECT_PRESETS:
            raise ValueError(
                f'unknown schedule {schedule!r}, not in {[*COLLECT_PRESETS]}'
            )
        return CyclicSchedule(COLLECT_PRESETS[schedule])
    return _built(schedule, CollectSchedule)
