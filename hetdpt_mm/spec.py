"""The one description of a depth-pruned ViT structure: a :class:`PruneSpec`
(removed attention sublayers, GELUs and FFN branches, and after width
pruning the :class:`Widths` of every block), validated once where it is
made and carried in a :class:`~hetdpt_mm.checkpoint.record.HetDPTRecord`.
"""

import itertools
import json
import numbers
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple

from .fileio import loads_json, read_json_file

#: Key of the HetDPT record in a checkpoint's ``meta`` (written by the hooks
#: for people and tools that read meta; loaders read the record itself).
META_KEY = 'hetdpt'

#: The kinds of layers HetDPT removes: attention sublayers and FFN GELUs
#: (docs/method.md section 1), and whole FFN branches (LayerNorm, FFN and
#: LayerScale; docs/user_guides/dinov2.md, *Whole-branch removal*).
ATTN = 'attn'
ACT = 'act'
FFN = 'ffn'
LAYER_KINDS = (ATTN, ACT, FFN)
#: The kinds as reports name them.
KIND_NAMES = {ATTN: 'attention', ACT: 'GELU', FFN: 'FFN branch'}

#: What a removed attention sublayer leaves on its residual branch;
#: ``'identity'`` removes whole branches (attention and FFN, each with its
#: LayerNorm and LayerScale) and makes FFN branches removable.
REMOVED_ATTN_OUTPUTS = ('norm', 'zero', 'identity')
#: The semantics value of whole-branch removal.
WHOLE_BRANCH = 'identity'
#: When the extra GELU is applied to the residual stream after a block.
RESIDUAL_GELU_MODES = ('both_removed', 'act_removed', 'never')
#: The semantics options of every family, with their allowed values.
SEMANTICS_CHOICES = dict(
    removed_attn_output=REMOVED_ATTN_OUTPUTS, residual_gelu=RESIDUAL_GELU_MODES
)

#: Forms in which the weights of a pruned network can be stored.
FORMS = ('gated', 'pruned', 'merged')


def read_json_value(value: str, what: str, file: bool = False) -> Any:
    """An option's inline JSON, else with ``file`` a JSON file's, else the
    name given."""
    if value.lstrip().startswith(('{', '[')):
        return loads_json(value, what)
    if not file:
        return value
    path = os.path.expanduser(value)
    if not os.path.exists(path):
        raise FileNotFoundError(f'{what} file {path} does not exist')
    return read_json_file(path, f'{what} file')


def _integers(values: Any, name: str, optional: bool = False) -> Tuple:
    """``values`` as a tuple of ints (or ``None`` if ``optional``), refusing
    bools and 2.0: almost always a mistake in a hand-written spec."""
    listed = isinstance(values, Iterable) and not isinstance(
        values, (str, bytes)
    )
    bad = [
        v
        for v in (values if listed else [values])
        if not (v is None and optional)
        and (isinstance(v, bool) or not isinstance(v, numbers.Integral))
    ]
    if bad or not listed:
        raise TypeError(f'{name} must hold integers, got {bad[:1] or values}')
    return tuple(None if v is None else int(v) for v in values)


def _as_indices(values: Iterable, depth: int, name: str) -> Tuple[int, ...]:
    indices = _integers(values, name)
    for value in indices:
        if not 0 <= value < depth:
            raise ValueError(
                f'{name} index {value} is out of range for depth {depth}'
            )
    duplicates = sorted(i for i, n in Counter(indices).items() if n > 1)
    if duplicates:
        raise ValueError(f'{name} has duplicated indices {duplicates}')
    return tuple(sorted(indices))


def positive_int(value: Any, name: str) -> int:
    """A count or length given in a config: an integer of at least 1."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or value < 1
    ):
        raise ValueError(f'{name} must be a positive integer, got {value!r}')
    return int(value)


@dataclass(frozen=True)
class Widths:
    """Widths of a width-pruned network (HetDPT+): the embedding width and
    each block's heads, head dimension and FFN hidden width (``None``: an
    FFN width-pruned merged, one ``D x D`` linear)."""

    embed_dims: int
    num_heads: Tuple[int, ...]
    head_dims: Tuple[int, ...]
    ffn_hidden: Tuple[Optional[int], ...]

    FIELDS = ('embed_dims', 'num_heads', 'head_dims', 'ffn_hidden')

    def __post_init__(self):
        object.__setattr__(
            self,
            'embed_dims',
            positive_int(self.embed_dims, 'widths.embed_dims'),
        )
        for name in self.FIELDS[1:]:
            values = _integers(
                getattr(self, name), f'widths.{name}', name == 'ffn_hidden'
            )
            object.__setattr__(self, name, values)
        blocks = self.num_heads, self.head_dims, self.ffn_hidden
        counts = [v for v in itertools.chain(*blocks) if v is not None]
        if len(set(map(len, blocks))) != 1 or min(counts, default=0) < 0:
            raise ValueError('widths need one count >= 0 per block')

    def block(self, index: int) -> Tuple[int, int, Optional[int]]:
        """``(num_heads, head_dim, ffn_hidden)`` of block ``index``."""
        return (
            self.num_heads[index],
            self.head_dims[index],
            self.ffn_hidden[index],
        )

    def check_pruned_from(self, dim: int, num_heads: int, hidden: int):
        """Width pruning only removes, and the tensors show only heads x
        head_dim: a head split beyond the architecture's is a lying record."""
        most = (num_heads, dim // num_heads, hidden)
        beyond = [
            i
            for i in range(len(self.num_heads))
            if any((n or 0) > m for n, m in zip(self.block(i), most))
        ]
        if self.embed_dims > dim or beyond:
            raise ValueError(
                f'widths of blocks {beyond} exceed the architecture; use '
                'the record tools/prune_width.py wrote'
            )

    def to_dict(self) -> Dict[str, Any]:
        lists = {name: list(getattr(self, name)) for name in self.FIELDS[1:]}
        return dict(embed_dims=self.embed_dims, **lists)

    @classmethod
    def from_dict(cls, data: Mapping) -> 'Widths':
        return cls(**data)


@dataclass(frozen=True)
class PruneSpec:
    """Removed attention sublayers, GELUs and whole FFN branches of a
    ``depth``-block ViT, and its :class:`Widths` when width-pruned."""

    depth: int
    attn_removed: Tuple[int, ...] = field(default=())
    act_removed: Tuple[int, ...] = field(default=())
    widths: Optional[Widths] = None
    ffn_removed: Tuple[int, ...] = field(default=())

    def __post_init__(self):
        object.__setattr__(self, 'depth', positive_int(self.depth, 'depth'))
        for name in ('attn_removed', 'act_removed', 'ffn_removed'):
            indices = _as_indices(getattr(self, name), self.depth, name)
            object.__setattr__(self, name, indices)
        both = sorted(set(self.act_removed) & set(self.ffn_removed))
        if both:
            raise ValueError(f'{both} in act_removed and in ffn_removed')
        if self.widths is not None:
            self._check_widths()

    def _check_widths(self) -> None:
        """Removed attention has 0 heads of dimension 0, a kept one at
        least 1; only a removed GELU leaves no FFN hidden width."""
        if self.ffn_removed or len(self.widths.num_heads) != self.depth:
            raise ValueError(
                f'widths need {self.depth} blocks, no ffn_removed'
            )
        wrong = []
        for index in range(self.depth):
            heads, head_dim, hidden = self.widths.block(index)
            removed = index in self.attn_removed
            if (
                (heads == 0, head_dim == 0) != (removed, removed)
                or hidden == 0
                or (hidden is None and index not in self.act_removed)
            ):
                wrong.append(index)
        if wrong:
            raise ValueError(f'widths of blocks {wrong} contradict the spec')

    @property
    def n_attn(self) -> int:
        return len(self.attn_removed)

    @property
    def n_act(self) -> int:
        return len(self.act_removed)

    @property
    def n_ffn(self) -> int:
        return len(self.ffn_removed)

    @property
    def num_removed(self) -> int:
        return self.n_attn + self.n_act + self.n_ffn

    @property
    def ratios(self) -> Tuple[float, float]:
        """Retained ratios ``(a, t)`` of attention and GELU layers (MAP)."""
        return (
            (self.depth - self.n_attn) / self.depth,
            (self.depth - self.n_act) / self.depth,
        )

    def removed(self, kind: str) -> Tuple[int, ...]:
        if kind not in LAYER_KINDS:
            raise ValueError(f'unknown layer kind {kind!r}, not {LAYER_KINDS}')
        return getattr(self, f'{kind}_removed')

    def is_removed(self, kind: str, index: int) -> bool:
        return index in self.removed(kind)

    @property
    def is_dense(self) -> bool:
        return self.num_removed == 0

    def with_removed(self, kind: str, index: int) -> 'PruneSpec':
        """A new spec with one more layer of ``kind`` removed."""
        if self.widths is not None:
            raise ValueError('layers are removed before width pruning')
        removed = {kind: self.removed(kind) for kind in LAYER_KINDS}
        removed[kind] = removed[kind] + (index,)
        return PruneSpec(
            self.depth, removed[ATTN], removed[ACT], ffn_removed=removed[FFN]
        )

    def with_widths(self, widths: Optional[Widths]) -> 'PruneSpec':
        return PruneSpec(
            self.depth,
            self.attn_removed,
            self.act_removed,
            widths,
            self.ffn_removed,
        )

    def to_dict(self) -> Dict[str, Any]:
        data = dict(
            depth=self.depth,
            attn_removed=list(self.attn_removed),
            act_removed=list(self.act_removed),
        )
        # Written only when used: a spec without removed FFN branches has
        # the fields it always had.
        if self.ffn_removed:
            data['ffn_removed'] = list(self.ffn_removed)
        if self.widths is not None:
            data['widths'] = self.widths.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping) -> 'PruneSpec':
        """A spec's dict; Python refuses another type, a missing or an
        unknown field."""
        data = {**data}
        if data.get('widths') is not None:
            data['widths'] = Widths.from_dict(data['widths'])
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> 'PruneSpec':
        return cls.from_dict(loads_json(text, 'prune spec'))

    @classmethod
    def coerce(cls, value, depth: Optional[int] = None) -> 'PruneSpec':
        """A PruneSpec, a dict, JSON, a JSON file's path or ``None``
        (dense)."""
        if isinstance(value, str):
            value = read_json_value(value, 'prune spec', file=True)
        if isinstance(value, cls):
            spec = value
        elif value is None:
            spec = cls(depth)
        else:
            spec = cls.from_dict({'depth': depth, **value})
        if depth is not None and spec.depth != depth:
            raise ValueError(
                f'prune spec is for depth {spec.depth}, not {depth}'
            )
        return spec

    def __str__(self) -> str:
        text = (
            f'PruneSpec(depth={self.depth}, '
            f'attn_removed={list(self.attn_removed)}, '
            f'act_removed={list(self.act_removed)}'
        )
        if self.ffn_removed:
            text += f', ffn_removed={list(self.ffn_removed)}'
        if self.widths is not None:
            text += f', embed_dims={self.widths.embed_dims}, '
            text += f'num_heads={list(self.widths.num_heads)}'
        return text + ')'
