"""MergeCheckpointHook: write the deployable merged model (METHOD.md §4)."""
import os.path as osp
from typing import Optional, Tuple

import torch
from mmengine.dist import master_only
from mmengine.hooks import Hook
from mmengine.registry import HOOKS
from mmengine.runner.checkpoint import weights_to_cpu

from ..fileio import atomic_path
from ..merge import merge_checkpoint
from ..spec import META_KEY
from .spec_meta_hook import hetdpt_record, unwrap_model

#: Meta entries copied into the merged checkpoint besides the HetDPT record.
KEPT_META = ('epoch', 'iter', 'dataset_meta', 'experiment_name')


@HOOKS.register_module()
class MergeCheckpointHook(Hook):
    """After training (and, with ``at_each_save``, at every checkpoint save)
    write ``<out_dir>/<name>_merged.pth``: the whole model with its HetDPTViT
    in the merged form (gates and removed attention dropped, activation-free
    FFNs merged), other modules (head, neck) untouched, a distillation
    teacher left out, and ``meta['hetdpt']`` with spec, arch, semantics,
    ``form='merged'`` and the backbone prefix.

    ``HetDPTViT`` (``init_cfg=dict(type='Pretrained', checkpoint=...,
    prefix='backbone.')``) rebuilds the merged network from that file with no
    other arguments; the whole classifier loads it with ``load_from``.

    Args:
        name: file name stem; default the config's name (or ``'model'``).
        out_dir: default the work directory.
        at_each_save: also refresh the file whenever a checkpoint is saved.
    """

    priority = 'VERY_LOW'
    #: ``<name>_<suffix>.pth``.
    suffix = 'merged'

    def __init__(self, name: Optional[str] = None,
                 out_dir: Optional[str] = None, at_each_save: bool = False):
        self.name = name
        self.out_dir = out_dir
        self.at_each_save = at_each_save

    def before_train(self, runner) -> None:
        if hetdpt_record(runner.model) is None:
            raise ValueError('MergeCheckpointHook needs a model with a '
                             'HetDPTViT backbone')

    def output_path(self, runner) -> str:
        name = self.name
        if name is None:
            filename = getattr(runner.cfg, 'filename', None)
            name = osp.splitext(osp.basename(filename))[0] if filename \
                else 'model'
        return osp.join(self.out_dir or runner.work_dir,
                        f'{name}_{self.suffix}.pth')

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        # Runs on the main process only (Runner.save_checkpoint is).
        if self.at_each_save:
            self._write(runner, checkpoint['state_dict'],
                        checkpoint.get('meta', {}))

    @master_only
    def after_train(self, runner) -> None:
        model = unwrap_model(runner.model)
        meta = dict(epoch=runner.epoch, iter=runner.iter)
        dataset_meta = getattr(runner.train_dataloader.dataset, 'metainfo',
                               None)
        if dataset_meta is not None:
            meta['dataset_meta'] = dataset_meta
        self._write(runner, weights_to_cpu(model.state_dict()), meta)

    def _write(self, runner, state_dict, meta) -> None:
        meta = {k: meta[k] for k in KEPT_META if k in meta}
        meta[META_KEY] = hetdpt_record(runner.model)
        merged, summary = merge_checkpoint(
            dict(state_dict=state_dict, meta=meta))
        written, report = self._convert(runner, merged)
        path = self.output_path(runner)
        with atomic_path(path) as tmp:
            torch.save(written, tmp)
        runner.logger.info(f'HetDPT {self.suffix} checkpoint written to '
                           f'{path}\n{summary.format()}{report}')

    def _convert(self, runner, merged: dict) -> Tuple[dict, str]:
        """What becomes of the merged checkpoint before it is written, and
        what to report about it (subclasses prune further)."""
        return merged, ''
