"""Runner construction and command-line options shared by tools/train.py
and tools/test.py."""

import argparse
import gc
import itertools
import logging
import os
import os.path as osp
import re
from typing import Optional, Tuple

import torch
from mmengine.config import Config
from mmengine.dist import master_only
from mmengine.logging import print_log
from mmengine.registry import RUNNERS
from mmengine.runner import Runner
from mmengine.runner.checkpoint import find_latest_checkpoint, load_checkpoint

from .checkpoint.reader import read_backbone_checkpoint
from .checkpoint.safe_load import TRUST_ENV
from .cli import ConfigOptionsAction
from .errors import CheckpointError, UsageError
from .fileio import check_input_file
from .hooks import EpochSeedHook
from .registry import FAMILIES
from .structure import is_given, structure_args
from .work_dir import check_custom_hooks, config_strings


def trust_checkpoints() -> None:
    """Explicit opt-in to full-pickle checkpoint loading (this process and
    the processes it starts)."""
    os.environ[TRUST_ENV] = '1'


def add_runner_arguments(parser: argparse.ArgumentParser) -> None:
    """The options mmdet / mmseg / mmpretrain users type for any run."""
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument(
        '--trust-checkpoint',
        action='store_true',
        help='load checkpoints with full pickle (only for files you trust)',
    )
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=ConfigOptionsAction,
        help='override config settings, key=value',
    )
    parser.add_argument(
        '--launcher',
        default='none',
        choices=['none', 'pytorch', 'slurm', 'mpi'],
    )
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)


def load_config(args: argparse.Namespace) -> Config:
    """The config with the common options applied (work_dir defaults to
    ./work_dirs/<config name>, as in the OpenMMLab tools)."""
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    if args.trust_checkpoint:
        trust_checkpoints()
    check_input_file(args.config, 'config')
    try:
        cfg = Config.fromfile(args.config)
    except (
        SyntaxError,
        ImportError,
        KeyError,
        ValueError,
        TypeError,
        OSError,
    ) as err:
        raise UsageError(f'config {args.config}: {str(err).strip()}') from None
    cfg.launcher = args.launcher
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join(
            './work_dirs', osp.splitext(osp.basename(args.config))[0]
        )
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
    strategy = cfg.get('strategy')
    if isinstance(strategy, dict) and str(strategy.get('type', '')).split('.')[
        -1
    ] in ('FSDPStrategy', 'HetDPTFSDPStrategy'):
        # FSDPStrategy gives FSDP device_id=LOCAL_RANK (a CUDA device); on
        # CPU, FSDP runs with device_id=cpu (docs/user_guides/dinov2.md,
        # Sharding).
        wrapper = dict(
            strategy.get('model_wrapper')
            or dict(type='HetDPTFullyShardedDataParallel')
        )
        wrapper['device_id'] = torch.device('cpu')
        strategy['model_wrapper'] = wrapper
        return
    wrapper = cfg.get('model_wrapper_cfg') or dict(
        type='MMDistributedDataParallel',
        broadcast_buffers=False,
        find_unused_parameters=cfg.get('find_unused_parameters', False),
    )
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
    if latest is not None and not osp.isfile(latest):
        raise UsageError(f'--resume: no file {latest!r}; give --resume PATH')
    if latest is None:
        print_log(
            f'--resume: no checkpoint in {cfg.work_dir} yet; starting '
            f'from load_from={cfg.get("load_from")!r}',
            logger='current',
            level=logging.WARNING,
        )
        return
    cfg.resume, cfg.load_from = True, None


def release_distributed() -> None:
    """Close the process group when a run ends, and free it while the
    interpreter is whole: a group left to interpreter shutdown can abort a
    finished gloo run ("terminate called without an active exception",
    SIGABRT; about 1 run in 8 of tests/test_prune_hook.py's two-rank test),
    failing the launcher.  The DDP wrapper holds the group, and a runner
    and its loops reference each other, so only a garbage collection frees
    them: callers drop their runner before calling this."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        gc.collect()
        torch.distributed.destroy_process_group()


def check_pretrained_exist(cfg, loads_weights: bool = False) -> None:
    """Fail before the runner is built (and its log written) if the model
    names a local file that does not exist: a distillation teacher's
    weights, or (unless the run loads weights, which replace them) an
    ``init_cfg`` checkpoint, e.g. the merged classifier a DETR / UperNet
    config starts from."""
    for key, value in config_strings(cfg.get('model', {}), 'model'):
        if '://' in value or osp.exists(value):
            continue
        if key == 'model.teacher_checkpoint':
            raise UsageError(
                f'{key} = {value!r}: no such file, the distillation '
                "teacher's weights. Download them (the config names the "
                'URL) or distil from a snapshot of the model: --cfg-options '
                'model.teacher=None model.teacher_checkpoint=None'
            )
        if not loads_weights and re.search(
            r'init_cfg(\[\d+\])?\.checkpoint$', key
        ):
            raise UsageError(
                f'{key}: no file {value!r}; make it (docs/user_guides/'
                f'transfer.md) or give --cfg-options {key}=PATH'
            )


def checked_load_or_resume(runner: Runner) -> None:
    """Make ``runner.load_or_resume`` name the checkpoint and what is wrong
    with it (a truncated file, another config's checkpoint, weights that do
    not fit) instead of a bare ``KeyError: 'message_hub'``."""
    load_or_resume = runner.load_or_resume

    def load_or_resume_checked():
        action = 'resume from' if runner._resume else 'load'
        source = (
            runner._load_from or f'the latest checkpoint of {runner.work_dir}'
        )
        try:
            load_or_resume()
        except KeyError as err:
            raise UsageError(
                f"cannot {action} {source}: no {err} (not a training run's)"
            ) from None
        except (CheckpointError, OSError) as err:
            raise UsageError(f'cannot {action} {source}: {err}') from None
        except (ValueError, RuntimeError) as err:
            if isinstance(err, UsageError):
                raise
            raise UsageError(f'cannot {action} {source}: {err}') from None

    runner.load_or_resume = load_or_resume_checked


def add_epoch_seed_hook(cfg) -> None:
    """Every run of ours gets :class:`EpochSeedHook` (exact ``--resume``),
    also from configs that do not name it."""
    hooks = list((cfg.get('default_hooks') or {}).values()) + list(
        cfg.get('custom_hooks') or []
    )
    if not any(
        isinstance(hook, EpochSeedHook)
        or (
            isinstance(hook, dict)
            and hook.get('type') in ('EpochSeedHook', EpochSeedHook)
        )
        for hook in hooks
    ):
        cfg.setdefault('default_hooks', {})['epoch_seed'] = dict(
            type='EpochSeedHook'
        )


def take_checkpoint_structure(cfg, checkpoint: Optional[str] = None) -> None:
    """The runner builds its optimizer before it loads ``load_from`` (or
    resumes), so a backbone whose structure the config leaves open must
    have the checkpoint's structure (pruned, merged, width-pruned) from the
    start: one rebuilt by the load would leave the optimizer training the
    parameters it replaced.  ``checkpoint``: the weights a test loads,
    which replace the backbone's ``init_cfg`` ones (not read, so a test
    needs no download)."""
    backbone = cfg.get('model', {}).get('backbone')
    families = {family.__name__ for family in FAMILIES.values()}
    if (
        not isinstance(backbone, dict)
        or str(backbone.get('type', '')).split('.')[-1] not in families
    ):
        return
    if checkpoint is not None:
        backbone.pop('pretrained', None)
        backbone['init_cfg'] = None
    if is_given(*(backbone.get(k) for k in ('prune_spec', 'gated', 'merged'))):
        return
    resume = cfg.get('resume')
    checkpoint = checkpoint or cfg.get('load_from')
    if resume:
        checkpoint = checkpoint or find_latest_checkpoint(cfg.work_dir)
    elif checkpoint is None or not osp.isfile(checkpoint):
        return  # a URL or a missing file: MMEngine's loading reports it
    try:
        record = read_backbone_checkpoint(
            checkpoint, prefix='backbone.', mmap=True
        ).record
    except (ValueError, OSError) as err:  # CheckpointError too
        if not resume:
            return  # loading it reports what is wrong
        raise UsageError(f'cannot resume from {checkpoint}: {err}') from None
    backbone.update(structure_args(record))


def _backbone_source(
    cfg, weights: Optional[str] = None
) -> Tuple[Optional[str], Optional[str]]:
    """The checkpoint the backbone's structure comes from, and its prefix
    (``None``: found in the file): ``weights`` (the model a test loads),
    else the backbone's ``init_cfg`` file, else the model the run loads
    (``(None, None)`` when none is there)."""
    backbone = cfg.get('model', {}).get('backbone') or {}
    init_cfgs = backbone.get('init_cfg') or []
    sources = [(weights, None)]
    sources += [
        (init_cfg['checkpoint'], init_cfg.get('prefix'))
        for init_cfg in (
            init_cfgs if isinstance(init_cfgs, list) else [init_cfgs]
        )
        if init_cfg.get('type') == 'Pretrained' and init_cfg.get('checkpoint')
    ]
    sources.append((cfg.get('load_from'), None))
    return next(
        (
            (source, prefix)
            for source, prefix in sources
            if source and ('://' in source or osp.isfile(source))
        ),
        (None, None),
    )


def follow_backbone_width(cfg, weights: Optional[str] = None) -> None:
    """A width-pruned backbone (HetDPT+) gives features of the embedding
    width its checkpoint records, not its arch's: set the ``in_channels`` of
    the module that takes them -- the neck, else the heads -- to that width,
    so that configs written for dense or depth-pruned backbones take a
    HetDPT+ checkpoint unchanged.  ``weights``: the checkpoint a test loads
    (it decides before the config's checkpoints)."""
    model = cfg.get('model') or {}
    backbone = model.get('backbone')
    source, prefix = _backbone_source(cfg, weights)
    if not isinstance(backbone, dict) or source is None:
        return
    try:
        widths = read_backbone_checkpoint(
            source, prefix=prefix, mmap=True
        ).record.spec.widths
    except (ValueError, OSError):  # CheckpointError too
        return  # loading it reports what is wrong, where it is loaded
    if widths is None:
        return
    neck = model.get('neck')
    if isinstance(neck, (list, tuple)):
        neck = neck[0]
    takers = (
        {'neck': neck}
        if neck
        else {
            key: model.get(key)
            for key in ('head', 'decode_head', 'auxiliary_head')
        }
    )
    for key, taker in takers.items():
        if not isinstance(taker, dict) or 'in_channels' not in taker:
            continue
        channels = taker['in_channels']
        taker['in_channels'] = (
            [widths.embed_dims] * len(channels)
            if isinstance(channels, (list, tuple))
            else widths.embed_dims
        )
        if taker['in_channels'] == channels:
            continue
        print_log(
            f'model.{key}.in_channels: {channels} -> '
            f'{taker["in_channels"]} (the embedding width of the '
            f'width-pruned backbone in {source})',
            logger='current',
        )


def load_fitting(
    model,
    checkpoint: str,
    where: str,
    strict: bool = True,
    logger: str = 'current',
    fix: str = '',
) -> None:
    """MMEngine's ``load_checkpoint``, with weights that do not fit the
    model (of ``where``) as a :class:`CheckpointError` naming the keys and
    shapes, and then ``fix`` (what the caller's user can do about it)."""
    try:
        load_checkpoint(
            model, checkpoint, map_location='cpu', strict=strict, logger=logger
        )
    except RuntimeError as err:
        summary = load_mismatch(err)
        if summary is None:
            raise
        raise CheckpointError(
            f'{checkpoint} does not fit {where} ({summary}){fix}'
        ) from None


def load_mismatch(err: RuntimeError, shown: int = 4) -> Optional[str]:
    """What MMEngine's strict ``load_checkpoint`` found not to fit (key
    lists cut to ``shown`` keys), or ``None`` for another error."""
    problems = []
    for line in str(err).splitlines():
        line = line.strip()
        if line.startswith(('unexpected key', 'missing keys')):
            what, _, keys = line.partition(': ')
            keys = keys.split(', ')
            more = f', ... ({len(keys)} in all)' if len(keys) > shown else ''
            problems.append(f'{what}: {", ".join(keys[:shown])}{more}')
        elif line.startswith('size mismatch'):
            problems.append(line.rstrip('.'))
    return '; '.join(problems) or None


#: Runners built by this process so far (see :func:`experiment_name`).
_RUNNERS_BUILT = itertools.count(1)


def experiment_name(cfg, number: int) -> Optional[str]:
    """The ``experiment_name`` to give this process's ``number``-th runner:
    ``<config name>_<number>`` for a later one, ``None`` (keep the config's,
    or MMEngine's default: the config name) for the first or where the
    config names it.  MMEngine appends the start second and hands a new
    runner the logger and visualizer of an existing name, so a second
    runner of one config built in the same second would log, and write its
    ``vis_data``, into the first run's work dir."""
    if number == 1 or cfg.get('experiment_name') is not None:
        return None
    stem = (
        osp.splitext(osp.basename(cfg.filename))[0]
        if cfg.filename
        else 'experiment'
    )
    return f'{stem}_{number}'


class _ConfigDumpInLogDir:
    """A runner that dumps its config into its own log folder
    (``<work_dir>/<timestamp>/``), not to ``<work_dir>/<config name>``,
    where the training run of that work dir keeps its own."""

    @master_only
    def dump_config(self) -> None:
        name = self.cfg.filename or f'{self.timestamp}.py'
        self.cfg.dump(osp.join(self.log_dir, osp.basename(name)))


def build_runner(cfg, test: bool = False) -> Runner:
    """The runner of ``cfg``; ``test``: one that only tests, and writes
    nothing over the files of a training run in its work dir (its config
    dump goes into its log folder)."""
    name = experiment_name(cfg, next(_RUNNERS_BUILT))
    if name is not None:
        cfg.experiment_name = name
    prepare_cpu_distributed(cfg)
    add_epoch_seed_hook(cfg)
    check_custom_hooks(cfg)
    take_checkpoint_structure(cfg)
    follow_backbone_width(cfg)
    if not test:
        runner = (
            RUNNERS.build(cfg)
            if 'runner_type' in cfg
            else Runner.from_cfg(cfg)
        )
    else:
        base = RUNNERS.get(cfg.runner_type) if 'runner_type' in cfg else Runner
        if base is None:
            raise KeyError(f'{cfg.runner_type} is not in the runner registry')
        runner = type(base.__name__, (_ConfigDumpInLogDir, base), {}).from_cfg(
            cfg
        )
    checked_load_or_resume(runner)
    return runner
