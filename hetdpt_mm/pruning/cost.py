"""Latency-aware budget allocation (an extension; the paper has none).

HetDPT budgets by *layer count*, but the two layer types save different
time: removing an attention sublayer saves its projections plus two
``N^2 D`` token-mixing products, while removing a GELU only lets the FFN
merge from ``2 N D 4D`` into ``N D^2`` multiply-adds (a removed FFN branch,
whole-branch removal, saves all ``2 N D 4D``). Attention grows with the
square of the token count ``N``, so at detection resolution (800x1216 ->
3801 tokens vs 197 at 224x224) one removed attention is worth far more.

A cost model maps removed counts ``(n_attn, n_act, n_ffn)`` to a total
cost; the allocators of :mod:`hetdpt_mm.pruning.map.allocation` search all
count pairs against a speedup or accuracy target with MAP predicting the
accuracy.
"""

import abc
import math
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Tuple, Union

from ..analysis import macs_convention
from ..fileio import read_json_file
from ..presets import ARCH_PRESETS
from ..spec import ACT, ATTN, FFN
from .validation import as_int, check_depth, is_finite_number

__all__ = ['ARCH_PRESETS', 'CostModel', 'AnalyticCost', 'MeasuredCost']


class CostModel(abc.ABC):
    """Cost (MACs, milliseconds, ...) of a depth-pruned, merged ViT.

    Subclasses define :meth:`total` and :meth:`describe`; ``depth`` is the
    block count the model was built for, or ``None`` if it does not know.
    """

    depth: Optional[int] = None

    @abc.abstractmethod
    def total(self, n_attn: int, n_act: int = 0, n_ffn: int = 0) -> float:
        """Cost with ``n_attn`` attention sublayers removed, ``n_act``
        GELU-free FFNs merged into one linear each and ``n_ffn`` FFN
        branches removed (whole-branch removal)."""

    def speedup(self, n_attn: int, n_act: int = 0, n_ffn: int = 0) -> float:
        """Dense cost over pruned (merged) cost."""
        return self.total(0) / self.total(n_attn, n_act, n_ffn)

    def split_speedup(self, n_attn: int, n_t: int, t_kind: str = ACT) -> float:
        """The speedup of a MAP split: ``n_attn`` attention sublayers and
        ``n_t`` layers of the kind MAP's ``t`` counts (``'act'``: GELUs,
        ``'ffn'``: FFN branches) removed."""
        return self.speedup(**{f'n_{ATTN}': n_attn, f'n_{t_kind}': n_t})

    @abc.abstractmethod
    def describe(self) -> str:
        """One line naming the cost and where it comes from."""

    def _check_counts(
        self, n_attn: int, n_act: int, n_ffn: int
    ) -> Tuple[int, int, int]:
        names = (f'n_{ATTN}', f'n_{ACT}', f'n_{FFN}')
        counts = tuple(
            as_int(count, name)
            for count, name in zip((n_attn, n_act, n_ffn), names)
        )
        upper = self.depth if self.depth is not None else math.inf
        for name, count in zip(names, counts):
            if not 0 <= count <= upper:
                raise ValueError(f'{name}={count} is outside [0, {upper}]')
        if counts[1] + counts[2] > upper:
            raise ValueError(f'n_act + n_ffn exceed the {upper} blocks')
        return counts


@dataclass(frozen=True)
class AnalyticCost(CostModel):
    """Multiply-accumulate count of a pre-norm ViT for ``N`` tokens.

    Per block: attention ``3ND^2`` (qkv) + ``N^2 D`` (scores) + ``N^2 D``
    (weighted sum) + ``ND^2`` (proj); FFN ``2 N D (mlp_ratio D)``, which a
    removed GELU turns into ``N D^2`` after merging and a removed FFN
    branch into nothing. Patch embedding adds
    ``patches * in_chans * patch^2 * D``; norms, softmax, GELU and heads are
    left out. ``num_heads`` does not change MACs (heads split ``D``).
    Without ``attention_products`` the two ``N^2 D`` products are left out
    (the paper's convention for pruned rows, docs/user_guides/reproduce.md).
    """

    embed_dim: int
    num_heads: int
    mlp_ratio: float = 4.0
    depth: int = 12
    img_size: Union[int, Tuple[int, int]] = (224, 224)
    patch_size: int = 16
    num_prefix_tokens: int = 1
    in_chans: int = 3
    attention_products: bool = True

    def __post_init__(self):
        """Checks what a user gives (``tools/fit_map.py --img-size``); the
        architecture comes from a preset or a built network."""
        size = self.img_size
        height, width = (
            (size, size) if isinstance(size, numbers.Real) else size
        )
        if self.embed_dim % self.num_heads:
            raise ValueError('embed_dim is not divisible by num_heads')
        if not 0 < self.patch_size <= min(height, width):
            raise ValueError(f'img_size {height}x{width} is under one patch')
        object.__setattr__(self, 'img_size', (height, width))

    @classmethod
    def from_build_args(
        cls,
        build_args: Mapping[str, Any],
        img_size=None,
        attention_products: bool = True,
    ) -> 'AnalyticCost':
        """The cost of a ViT of these build arguments (a record's ``arch``,
        its ``arch`` entry a resolved dict), at its own ``img_size``
        unless another is given."""
        dims = build_args['arch']
        return cls(
            attention_products=attention_products,
            embed_dim=dims['embed_dims'],
            num_heads=dims['num_heads'],
            mlp_ratio=dims.get('mlp_ratio', 4.0),
            depth=dims['num_layers'],
            img_size=tuple(img_size or build_args['img_size']),
            patch_size=build_args['patch_size'],
            in_chans=build_args.get('in_channels', 3),
            num_prefix_tokens=int(build_args.get('with_cls_token', True))
            + int(build_args.get('distilled', False)),
        )

    @classmethod
    def from_arch(
        cls, arch: str, img_size=(224, 224), **overrides: Any
    ) -> 'AnalyticCost':
        """A preset from :data:`ARCH_PRESETS` (``deit-tiny/small/base``)."""
        preset = ARCH_PRESETS[arch]
        return cls(
            **{
                'embed_dim': preset['embed_dims'],
                'num_heads': preset['num_heads'],
                'mlp_ratio': preset['mlp_ratio'],
                'depth': preset['num_layers'],
                'img_size': img_size,
                **overrides,
            }
        )

    @property
    def num_patches(self) -> int:
        height, width = self.img_size
        return (height // self.patch_size) * (width // self.patch_size)

    @property
    def num_tokens(self) -> int:
        return self.num_patches + self.num_prefix_tokens

    @property
    def attention_macs(self) -> float:
        n, d = self.num_tokens, self.embed_dim
        products = 2 * n * n * d if self.attention_products else 0
        return 3 * n * d * d + products + n * d * d

    @property
    def ffn_macs(self) -> float:
        n, d = self.num_tokens, self.embed_dim
        return 2 * n * d * int(self.mlp_ratio * d)

    @property
    def merged_ffn_macs(self) -> float:
        return self.num_tokens * self.embed_dim**2

    @property
    def patch_embed_macs(self) -> float:
        return (
            self.num_patches
            * self.in_chans
            * self.patch_size**2
            * self.embed_dim
        )

    @property
    def attention_share(self) -> float:
        """Attention's share of a dense block's MACs."""
        return self.attention_macs / (self.attention_macs + self.ffn_macs)

    def total(self, n_attn: int, n_act: int = 0, n_ffn: int = 0) -> float:
        n_attn, n_act, n_ffn = self._check_counts(n_attn, n_act, n_ffn)
        dense = self.patch_embed_macs + self.depth * (
            self.attention_macs + self.ffn_macs
        )
        return (
            dense
            - n_attn * self.attention_macs
            - n_act * (self.ffn_macs - self.merged_ffn_macs)
            - n_ffn * self.ffn_macs
        )

    def describe(self) -> str:
        height, width = self.img_size
        products = (
            '' if self.attention_products else ' (attention products left out)'
        )
        return (
            f'analytic MACs {macs_convention(self.attention_products)}'
            f'{products}: D={self.embed_dim}, depth '
            f'{self.depth}, {height}x{width} / patch {self.patch_size} -> '
            f'{self.num_tokens} tokens; dense '
            f'{self.total(0, 0) / 1e9:.2f} GMACs; attention '
            f'{100 * self.attention_share:.1f}% of block MACs'
        )


@dataclass(frozen=True)
class MeasuredCost(CostModel):
    """Latency measured on a device, assuming savings add up per sublayer.

    JSON format (any unit, used consistently; only ratios matter)::

        {"dense_total": 86.3,  # latency of the dense model, e.g. ms/batch
         "attn": 2.6,          # saved per removed attention sublayer
         "ffn_saving": 4.1,    # saved per GELU-free FFN merged to one linear
         "ffn_branch": 5.0,    # optional: saved per removed FFN branch
         "depth": 12}          # optional: number of blocks measured

    ``ffn_branch`` is needed only to price removed FFN branches
    (whole-branch removal). Other keys (device, batch size, notes) are
    ignored.
    """

    dense_total: float
    attn: float
    ffn_saving: float
    depth: Optional[int] = None
    source: str = 'measured cost'
    ffn_branch: Optional[float] = None

    def __post_init__(self):
        costs = self.dense_total, self.attn, self.ffn_saving, self.ffn_branch
        costs = [0 if c is None else c for c in costs]
        if not all(map(is_finite_number, costs)) or min(costs) < 0:
            raise ValueError(f'{self.source}: costs must be numbers >= 0')
        depth = None if self.depth is None else check_depth(self.depth)
        object.__setattr__(self, 'depth', depth)
        ffn = max(self.ffn_saving, self.ffn_branch or 0)  # all removed
        if depth and self.dense_total <= depth * (self.attn + ffn):
            raise ValueError(f'{self.source}: saves more than dense_total')

    @classmethod
    def from_json(cls, path: Union[str, Path]) -> 'MeasuredCost':
        data = read_json_file(path, 'measured cost file')
        needed = {'dense_total', 'attn', 'ffn_saving'}
        if not isinstance(data, dict) or not needed <= data.keys():
            raise ValueError(f'{path}: missing keys of {sorted(needed)}')
        return cls(
            dense_total=data['dense_total'],
            attn=data['attn'],
            ffn_saving=data['ffn_saving'],
            depth=data.get('depth'),
            source=str(path),
            ffn_branch=data.get('ffn_branch'),
        )

    def total(self, n_attn: int, n_act: int = 0, n_ffn: int = 0) -> float:
        n_attn, n_act, n_ffn = self._check_counts(n_attn, n_act, n_ffn)
        if n_ffn and self.ffn_branch is None:
            raise ValueError(f'{self.source}: no "ffn_branch" saving given')
        remaining = (
            self.dense_total
            - n_attn * self.attn
            - n_act * self.ffn_saving
            - n_ffn * (self.ffn_branch or 0)
        )
        if remaining <= 0:
            raise ValueError(f'{self.source}: saves more than dense_total')
        return remaining

    def describe(self) -> str:
        branch = (
            ''
            if self.ffn_branch is None
            else f', per FFN branch {self.ffn_branch:g}'
        )
        return (
            f'measured latency from {self.source}: dense '
            f'{self.dense_total:g}, saved per attention {self.attn:g}, '
            f'per merged FFN {self.ffn_saving:g}{branch}'
        )
