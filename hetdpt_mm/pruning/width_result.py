"""What a width-pruning run reports: its search trials and the MACs and
parameters of each stage (``tools/prune_width.py``'s report)."""

from dataclasses import dataclass, field
from typing import Any, Dict, List

import torch.nn as nn

from ..analysis import macs_convention
from ..checkpoint.record import HetDPTRecord
from ..spec import ACT, ATTN


@dataclass
class WidthTrial:
    """One trial of the search for a MACs target: a channel ratio and the
    MACs and parameters it gives."""

    ratio: float
    macs: int
    params: int


def _scaled(count: int) -> str:
    """``17.676 G``, ``54.87 M``."""
    return f'{count / 1e9:.3f} G' if count >= 1e9 else f'{count / 1e6:.2f} M'


@dataclass
class StageCost:
    """MACs and parameters of the classifier (one image) at one stage of
    the pipeline: ``dense``, ``depth-pruned (merged)``, ``width-pruned``."""

    stage: str
    macs: int
    params: int


@dataclass
class WidthPruneResult:
    """What :func:`prune_width` returns: the rebuilt network and its heads,
    its record, the cost before and after, the channel ratio and the trials
    of the search for it."""

    backbone: nn.Module
    heads: Dict[str, nn.Linear]
    record: HetDPTRecord
    macs_before: int
    params_before: int
    macs_after: int
    params_after: int
    ratio: float = 0.0
    trials: List[WidthTrial] = field(default_factory=list)
    #: Largest difference between the Torch-Pruning model's outputs and the
    #: rebuilt network's on a random batch.
    rebuild_error: float = 0.0
    #: Cost per stage, from the dense network of the same architecture to
    #: the width-pruned one (:func:`pipeline_stages`).
    stages: List[StageCost] = field(default_factory=list)
    #: Whether the MACs count attention's token x token products.
    attention_products: bool = True

    @property
    def macs_convention(self) -> str:
        return macs_convention(self.attention_products)

    def stage_table(self) -> str:
        """MACs and parameters per stage as a markdown table."""
        dense = self.stages[0]
        lines = [
            f'| stage | MACs ({self.macs_convention}) | params | '
            'dense / stage MACs | dense / stage params |',
            '| --- | ---: | ---: | ---: | ---: |',
        ]
        for stage in self.stages:
            lines.append(
                f'| {stage.stage} | {_scaled(stage.macs)} | '
                f'{_scaled(stage.params)} | '
                f'{dense.macs / stage.macs:.2f}x | '
                f'{dense.params / stage.params:.2f}x |'
            )
        return '\n'.join(lines)

    def block_table(self) -> str:
        """Per-block widths as a markdown table."""
        spec = self.record.spec
        widths = spec.widths
        lines = [
            f'embedding width: {widths.embed_dims}',
            '',
            '| block | attention | heads x dim | FFN |',
            '| ---: | --- | --- | --- |',
        ]
        for index in range(spec.depth):
            heads, head_dim, hidden = widths.block(index)
            attn = 'removed' if spec.is_removed(ATTN, index) else 'kept'
            if hidden is None:
                ffn = f'merged {widths.embed_dims} x {widths.embed_dims}'
            else:
                ffn = f'{hidden} hidden' + (
                    ' (no GELU)' if spec.is_removed(ACT, index) else ''
                )
            lines.append(
                f'| {index} | {attn} | {heads} x {head_dim} | {ffn} |'
            )
        return '\n'.join(lines)

    def report(self) -> Dict[str, Any]:
        """Plain data for the checkpoint's meta and JSON reports."""
        return dict(
            macs_convention=self.macs_convention,
            macs_before=self.macs_before,
            macs_after=self.macs_after,
            params_before=self.params_before,
            params_after=self.params_after,
            ratio=self.ratio,
            trials=[vars(trial) for trial in self.trials],
            rebuild_error=self.rebuild_error,
            stages=[vars(stage) for stage in self.stages],
        )

    def format(self) -> str:
        return '\n'.join(
            [
                self.stage_table(),
                '',
                f'channel ratio: {self.ratio:.4f}'
                + (
                    f' ({len(self.trials)} trials for the MACs target)'
                    if self.trials
                    else ''
                ),
                f'rebuilt network vs Torch-Pruning model: max |diff| '
                f'{self.rebuild_error:.2e}',
                '',
                self.block_table(),
            ]
        )
