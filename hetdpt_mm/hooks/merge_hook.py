"""MergeCheckpointHook: write the deployable merged model (docs/method.md
§4)."""

import os.path as osp
from collections import OrderedDict
from typing import List, Optional, Tuple

import torch
from mmengine.dist import is_main_process
from mmengine.hooks import Hook
from mmengine.registry import HOOKS

from ..fileio import atomic_path
from ..merge import EMA_KEY, EMA_MODULE, merge_checkpoint
from ..models.lookup import hetdpt_record
from ..sharding import full_state_dict, is_fsdp
from ..spec import META_KEY
from .ema_structure import ema_hook_of, follow_structure_in_ema

#: Meta entries copied into the merged checkpoint besides the HetDPT record.
KEPT_META = ('epoch', 'iter', 'dataset_meta', 'experiment_name')


@HOOKS.register_module()
class MergeCheckpointHook(Hook):
    """After training (and, with ``at_each_save``, at every checkpoint save)
    write ``<out_dir>/<name>_merged.pth``: the whole model with its HetDPTViT
    in the merged form (gates and removed attention dropped, activation-free
    FFNs merged), other modules (head, neck) untouched, a distillation
    teacher left out, and ``meta['hetdpt']`` with spec, arch, semantics,
    ``form='merged'`` and the backbone prefix.  With MMEngine's EMAHook the
    file is laid out as its checkpoints are: the averaged weights in
    ``state_dict``, the trained ones in ``ema_state_dict``, both merged.

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

    def __init__(
        self,
        name: Optional[str] = None,
        out_dir: Optional[str] = None,
        at_each_save: bool = False,
    ):
        self.name = name
        self.out_dir = out_dir
        self.at_each_save = at_each_save

    def before_train(self, runner) -> None:
        if hetdpt_record(runner.model) is None:
            raise ValueError('MergeCheckpointHook needs a HetDPT backbone')
        if (
            self.at_each_save
            and is_fsdp(runner.model)
            and not _saves_full_state_dict(runner)
        ):
            raise ValueError(
                "at_each_save under FSDP needs strategy state_dict_cfg='full'"
            )
        follow_structure_in_ema(runner)  # loading may have rebuilt it

    def output_files(
        self, work_dir: str, config_path: Optional[str]
    ) -> List[str]:
        """The files this hook writes (checked against the run's inputs
        before it starts: :func:`hetdpt_mm.work_dir.check_work_dir`)."""
        name = self.name
        if name is None:
            name = (
                osp.splitext(osp.basename(config_path))[0]
                if config_path
                else 'model'
            )
        return [
            osp.join(self.out_dir or work_dir, f'{name}_{self.suffix}.pth')
        ]

    def output_path(self, runner) -> str:
        return self.output_files(
            runner.work_dir, getattr(runner.cfg, 'filename', None)
        )[0]

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        # Runner.save_checkpoint calls this on the main process only;
        # FlexibleRunner on every rank, where under FSDP with
        # state_dict_cfg='full' only rank 0's checkpoint holds the weights.
        if self.at_each_save and is_main_process():
            self._write(
                runner,
                checkpoint['state_dict'],
                checkpoint.get('meta', {}),
                checkpoint.get(EMA_KEY),
            )

    def after_train(self, runner) -> None:
        # Every rank: under FSDP the whole state dict is gathered to rank 0
        # (a collective); rank 0 writes.
        state_dict = full_state_dict(runner.model)
        if not is_main_process():
            return
        meta = dict(epoch=runner.epoch, iter=runner.iter)
        dataset_meta = getattr(
            runner.train_dataloader.dataset, 'metainfo', None
        )
        if dataset_meta is not None:
            meta['dataset_meta'] = dataset_meta
        state_dict, ema_state_dict = _ema_layout(runner, state_dict)
        self._write(runner, state_dict, meta, ema_state_dict)

    def _write(self, runner, state_dict, meta, ema_state_dict=None) -> None:
        meta = {k: meta[k] for k in KEPT_META if k in meta}
        meta[META_KEY] = hetdpt_record(runner.model)
        checkpoint = dict(state_dict=state_dict, meta=meta)
        if ema_state_dict is not None:
            checkpoint[EMA_KEY] = ema_state_dict
        merged, summary = merge_checkpoint(checkpoint)
        written, report = self._convert(runner, merged)
        path = self.output_path(runner)
        with atomic_path(path) as tmp:
            torch.save(written, tmp)
        runner.logger.info(
            f'HetDPT {self.suffix} checkpoint written to '
            f'{path}\n{summary.format()}{report}'
        )

    def _convert(self, runner, merged: dict) -> Tuple[dict, str]:
        """What becomes of the merged checkpoint before it is written, and
        what to report about it (subclasses prune further)."""
        return merged, ''


def _ema_layout(runner, state_dict):
    """``(state_dict, ema_state_dict)`` as EMAHook saves them when the run
    has one (the averaged weights as the model's), else ``state_dict``
    and ``None``."""
    ema_hook = ema_hook_of(runner)
    if ema_hook is None:
        return state_dict, None
    follow_structure_in_ema(runner)
    averaged = dict(state_dict)
    ema_state = OrderedDict()
    for key, value in ema_hook.ema_model.state_dict().items():
        value = value.detach().cpu()
        if key.startswith(EMA_MODULE):
            ema_state[key] = state_dict[key[len(EMA_MODULE) :]]
            averaged[key[len(EMA_MODULE) :]] = value
        else:
            ema_state[key] = value
    return averaged, ema_state


def _saves_full_state_dict(runner) -> bool:
    """Whether the runner's strategy saves whole (rank-0) checkpoints."""
    strategy = getattr(runner, 'strategy', None)
    check = getattr(strategy, '_is_full_state_dict', None)
    return bool(check()) if check is not None else True
