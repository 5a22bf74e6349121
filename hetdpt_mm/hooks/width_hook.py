"""WidthPruneHook: after depth pruning, write the HetDPT+ model (docs/method.md
section 6) -- the merged model pruned in width -- from the same run."""

import os.path as osp
from typing import Iterator, List, Optional, Tuple

import torch
from mmengine.registry import HOOKS

from ..pruning.width import IMPORTANCES
from ..pruning.width_checkpoint import prune_width_checkpoint
from ..sharding import unwrap_model
from .merge_hook import MergeCheckpointHook


@HOOKS.register_module()
class WidthPruneHook(MergeCheckpointHook):
    """After training, write ``<out_dir>/<name>_plus.pth``: what
    :class:`MergeCheckpointHook` writes, then width-pruned with
    :func:`~hetdpt_mm.pruning.width_checkpoint.prune_width_checkpoint`
    (Torch-Pruning's isomorphic pruning) to ``target_macs`` or by ``ratio``,
    with its widths in the record. So one config runs depth pruning, then width
    pruning; ``configs/hetdpt_plus/`` fine-tunes the result. The log gets the
    search trials, the MACs and parameters per stage (dense, depth-pruned,
    width-pruned) and the per-block widths (also in the checkpoint's
    ``meta['hetdpt_width']``); ``<name>_plus_widths.png`` draws the widths.

    Args:
        target_macs: MACs of the pruned classifier on one image (e.g.
            ``2.4e9``); or
        ratio: a channel pruning ratio.
        importance: ``'taylor'`` (gradients of the classification loss on
            ``calib_images`` training images, taken without batch
            augmentations) or ``'magnitude'``.
        calib_images: images for Taylor importance (Isomorphic Pruning's:
            50 batches of 64).  The pruning runs on the CPU.
        plot: also write the widths plot.
        width_options: more of :func:`~hetdpt_mm.pruning.width.prune_width`'s
            options (``max_ratio``, ``search_steps``, ``attention_products``:
            whether ``target_macs`` counts attention's token x token
            products; the paper's HetDPT+ targets do not).
        name, out_dir, at_each_save: as :class:`MergeCheckpointHook`.
    """

    priority = 'LOWEST'
    suffix = 'plus'

    def __init__(
        self,
        target_macs: Optional[float] = None,
        ratio: Optional[float] = None,
        importance: str = 'taylor',
        calib_images: int = 3200,
        name: Optional[str] = None,
        out_dir: Optional[str] = None,
        at_each_save: bool = False,
        plot: bool = True,
        **width_options,
    ):
        super().__init__(name=name, out_dir=out_dir, at_each_save=at_each_save)
        if (target_macs is None) == (ratio is None):
            raise ValueError('WidthPruneHook takes one of target_macs, ratio')
        if importance not in IMPORTANCES:
            raise ValueError(f'importance {importance!r}: use {IMPORTANCES}')
        self.importance = importance
        self.calib_images = calib_images
        self.plot = plot
        self.width_options = dict(
            width_options, target_macs=target_macs, ratio=ratio
        )

    def _calibration(self, runner) -> Iterator[List[torch.Tensor]]:
        """Labelled training batches, preprocessed as for evaluation (no
        Mixup / CutMix: Taylor importance wants the true labels)."""
        preprocessor = unwrap_model(runner.model).data_preprocessor
        images = 0
        for data in runner.train_dataloader:
            if images >= self.calib_images:
                return
            data = preprocessor(data, False)
            labels = torch.cat(
                [sample.gt_label for sample in data['data_samples']]
            )
            images += len(labels)
            yield [data['inputs'].cpu(), labels.cpu()]

    def output_files(
        self, work_dir: str, config_path: Optional[str]
    ) -> List[str]:
        (path,) = super().output_files(work_dir, config_path)
        plot = [osp.splitext(path)[0] + '_widths.png'] if self.plot else []
        return [path] + plot

    def _convert(self, runner, merged: dict) -> Tuple[dict, str]:
        calibration = (
            self._calibration(runner) if self.importance == 'taylor' else None
        )
        pruned, result = prune_width_checkpoint(
            merged,
            importance=self.importance,
            calibration=calibration,
            logger=runner.logger.info,
            **self.width_options,
        )
        report = '\n' + result.format()
        if self.plot:
            from ..visualization import plot_widths, write_image

            path = self.output_files(
                runner.work_dir, getattr(runner.cfg, 'filename', None)
            )[1]
            write_image(path, plot_widths(result.record.spec))
            report += f'\nper-block widths drawn in {path}'
        return pruned, report
