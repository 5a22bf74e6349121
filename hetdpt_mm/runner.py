"""Runner construction and command-line options shared by tools/train.py
and tools/test.py."""
import argparse
import logging
import os
import os.path as osp
from typing import Optional

import torch
from mmengine.config import Config, DictAction
from mmengine.registry import RUNNERS
from mmengine.logging import print_log
from mmengine.runner import Runner
from mmengine.runner.checkpoint import find_latest_checkpoint

import hetdpt_mm  # noqa: F401  registers modules and the safe loader
from .checkpoint import TRUST_ENV
from .models import FAMILIES
from .record import load_backbone_checkpoint


def trust_checkpoints() -> None:
    """Explicit opt-in to full-pickle checkpoint loading (this process and
    the processes it starts)."""
    os.environ[TRUST_ENV] = '1'


def add_runner_arguments(parser: argparse.ArgumentParser) -> None:
    """The options mmdet / mmseg / mmpretrain users type for any run."""
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument(
        '--trust-checkpoint', action='store_true',
        help='load checkpoints with full pickle (only for files you trust)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, key=value')
    parser.add_argument('--launcher', default='none',
                        choices=['none', 'pytorch', 'slurm', 'mpi'])
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)


def load_config(args: argparse.Namespace) -> Config:
    """The config with the common options applied (work_dir defaults to
    ./work_dirs/<config name>, as in the OpenMMLab tools)."""
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    if args.trust_checkpoint:
        trust_checkpoints()
    cfg = Config.fromfile(args.config)
    cfg.launcher = args.launcher
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(args.config))[0])
    return cfg


def prepare_cpu_distributed(cfg) -> None:
    """MMEngine's ``pytorch`` launcher calls ``torch.cuda.set_device`` and
    gives DDP ``device_ids``; neither works without CUDA.  On a CPU-only
    machine start the (gloo) process group here, which MMEngine then reuses,
    and build DDP without ``device_ids``, so tools/dist_train.sh runs."""
    if cfg.get('launcher', 'none') != 'pytorch' or torch.cuda.is_available():
        return
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend='gloo')
    wrapper = cfg.get('model_wrapper_cfg') or dict(
        type='MMDistributedDataParallel', broadcast_buffers=False,
        find_unused_parameters=cfg.get('find_unused_parameters', False))
    wrapper['device_ids'] = None
    cfg.model_wrapper_cfg = wrapper


def apply_resume(cfg, resume: Optional[str]) -> None:
    """``--resume`` (``'auto'``: the latest checkpoint of the work dir) or
    ``--resume CKPT``.  With nothing to resume yet (a run stopped before its
    first save) the run starts from the config's ``load_from``, and says so,
    instead of from random weights."""
    if resume is None:
        return
    if resume != 'auto':
        cfg.resume, cfg.load_from = True, resume
        return
    latest = find_latest_checkpoint(cfg.work_dir)
    if latest is None:
        print_log(f'--resume: no checkpoint in {cfg.work_dir} yet; starting '
                  f'from load_from={cfg.get("load_from")!r}', logger='current',
                  level=logging.WARNING)
        return
    cfg.resume, cfg.load_from = True, None


def release_distributed() -> None:
    """Close the process group when a run ends; one left to interpreter
    shutdown can abort a finished gloo run ("terminate called without an
    active exception"), failing the launcher."""
    if torch.distributed.is_available() and \
            torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def take_resumed_structure(cfg) -> None:
    """A resumed run builds its optimizer before loading the checkpoint, so
    a backbone whose structure the config leaves open (its ``init_cfg``
    file gone, say) must have the checkpoint's structure from the start,
    not rebuild after the optimizer took its parameters."""
    if not cfg.get('resume'):
        return
    checkpoint = cfg.get('load_from') or find_latest_checkpoint(cfg.work_dir)
    backbone = cfg.get('model', {}).get('backbone')
    if checkpoint is None or not isinstance(backbone, dict) or any(
            backbone.get(key) is not None
            for key in ('prune_spec', 'gated', 'merged')):
        return
    families = {family.__name__ for family in FAMILIES.values()}
    if str(backbone.get('type', '')).split('.')[-1] not in families:
        return
    record = load_backbone_checkpoint(checkpoint, 'backbone.',
                                      mmap=True).record
    backbone.update(prune_spec=record.spec.to_dict(),
                    gated=record.form == 'gated',
                    merged=record.form == 'merged', **record.semantics)


def build_runner(cfg) -> Runner:
    prepare_cpu_distributed(cfg)
    take_resumed_structure(cfg)
    if 'runner_type' in cfg:
        return RUNNERS.build(cfg)
    return Runner.from_cfg(cfg)
