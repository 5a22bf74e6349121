"""Collect MAP points in an ordinary classification run (METHOD.md §2).

:class:`MAPCollectHook` turns a training run of a gated HetDPTViT into the
iterative *prune -> fast fine-tune -> evaluate* loop that produces the
``(a, t, accuracy)`` points of the Model Accuracy Predictor:

* before training it evaluates the starting network (step 0);
* at the start of every ``interval``-th epoch it removes one more layer
  (closing its gate; the weights carry over), picking the kind from the
  schedule and the block with the transfer-entropy score
  (:mod:`hetdpt_mm.pruning.te`);
* after the ``interval`` epochs of that step it evaluates on the validation
  set and writes the point to ``<work_dir>/map_points.csv``;
* it stops training after ``max_removed`` steps.

:class:`SubsetSampler` makes the fast fine-tune run on a fixed, seeded subset
of the training set.  See docs/map.md for configs and the resume guarantees.
"""
import copy
import csv
import io
import numbers
import os.path as osp
from typing import Dict, List, Optional, Union

import numpy as np
import torch
from mmengine.dataset import DefaultSampler, pseudo_collate
from mmengine.dist import broadcast_object_list, is_main_process
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import DATA_SAMPLERS, DATASETS, HOOKS
from mmengine.runner import EpochBasedTrainLoop
from torch.utils.data import DataLoader, Subset

from ..fileio import atomic_write_text
from ..models import HetDPTViT
from ..pruning.te import te_select
from ..spec import ACT, ATTN, PruneSpec

__all__ = ['SCHEDULES', 'POINT_COLUMNS', 'STATE_KEY', 'schedule_kinds',
           'select_subset', 'SubsetSampler', 'MAPCollectHook']

#: Which kind of layer each step removes: attention only (points (a, 1)),
#: GELU only (points (1, t)), or alternating, attention first.
SCHEDULES = ('attn', 'act', 'interleaved')
#: Columns of the points file (read by hetdpt_mm.pruning.map.load_points).
POINT_COLUMNS = ('step', 'schedule', 'n_attn', 'n_act', 'a', 't', 'accuracy',
                 'removed_attn', 'removed_act')
#: Key of the hook's state in ``checkpoint['meta']``.
STATE_KEY = 'hetdpt_map_collect'
STATE_VERSION = 1


def schedule_kinds(schedule: str, steps: int) -> List[str]:
    """The kind of layer removed at steps ``1..steps`` of ``schedule``."""
    if schedule not in SCHEDULES:
        raise ValueError(f'unknown MAP schedule {schedule!r}; use one of '
                         f'{SCHEDULES}')
    if schedule == 'interleaved':
        return [(ATTN, ACT)[step % 2] for step in range(steps)]
    return [schedule] * steps


def select_subset(length: int, subset: Union[int, float],
                  seed: int = 0) -> List[int]:
    """Sorted indices of a deterministic random subset of ``range(length)``.

    An ``int`` subset is a count (``1..length``), a ``float`` a fraction in
    ``(0, 1]`` (rounded, at least one item).  The same ``seed`` always picks
    the same items, on every rank and after a resume.
    """
    if isinstance(subset, bool) or not isinstance(subset, numbers.Real):
        raise TypeError(f'subset must be an image count (int) or a fraction '
                        f'(float), got {subset!r}')
    if isinstance(subset, numbers.Integral):
        count = int(subset)
        if not 1 <= count <= length:
            raise ValueError(f'subset count {count} is out of range: the '
                             f'dataset has {length} items')
    else:
        if not 0 < subset <= 1:
            raise ValueError(f'subset fraction must be in (0, 1], got '
                             f'{subset}')
        count = max(1, int(round(subset * length)))
    order = np.random.default_rng(seed).permutation(length)[:count]
    return sorted(int(i) for i in order)


@DATA_SAMPLERS.register_module()
class SubsetSampler(DefaultSampler):
    """:class:`DefaultSampler` over a fixed subset of the dataset.

    The subset is :func:`select_subset` ``(len(dataset), subset,
    subset_seed)``: the same items in every epoch and after a resume; only
    their order changes (``shuffle``, ``seed`` as in DefaultSampler).  Epochs
    get shorter accordingly.  Use it as ``train_dataloader.sampler`` for the
    fast fine-tune of MAP collection: ``dict(type='SubsetSampler',
    subset=0.5)``.
    """

    def __init__(self, dataset, subset: Union[int, float],
                 subset_seed: int = 0, shuffle: bool = True,
                 seed: Optional[int] = None, round_up: bool = True) -> None:
        self.subset_indices = select_subset(len(dataset), subset,
                                            subset_seed)
        # DefaultSampler shuffles and shards positions in the subset.
        super().__init__(self.subset_indices, shuffle=shuffle, seed=seed,
                         round_up=round_up)

    def __iter__(self):
        return (self.subset_indices[position]
                for position in super().__iter__())


def _positive_int(value, name: str, allow_none: bool = False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(
            value, numbers.Integral) or value < 1:
        raise ValueError(f'MAPCollectHook: {name} must be a positive '
                         f'integer, got {value!r}')
    return int(value)


@HOOKS.register_module()
class MAPCollectHook(Hook):
    """Remove one layer every ``interval`` epochs and record MAP points.

    The model must be a classifier with a gated ``HetDPTViT`` backbone
    (``gated=True``); the run must be epoch based and have a validation
    dataloader and evaluator.

    Args:
        schedule: ``'attn'``, ``'act'`` or ``'interleaved'`` (see
            :data:`SCHEDULES`).
        interval: fine-tuning epochs after each removal.
        max_removed: number of removal steps; ``None`` takes as many as
            ``train_cfg.max_epochs // interval`` (at most as many layers as
            the schedule can remove).  Training stops after the last step.
        calib_images: number of training images the TE score is computed on
            (a fixed seeded subset, :func:`select_subset`).
        calib_batch_size: batch size of the calibration forward passes.
        calib_seed: seed of the calibration subset.
        calib_dataset: dataset config for calibration; default: the training
            dataset config with the validation pipeline (deterministic).
        metric: the evaluator's key for the accuracy in %.
        out_file: points file, relative to the work dir.
        overwrite: replace an existing points file when starting fresh.
    """

    # Must run before CheckpointHook (VERY_LOW): a checkpoint saved at the
    # end of a step already holds that step's point.
    priority = 'NORMAL'

    def __init__(self,
                 schedule: str = 'interleaved',
                 interval: int = 10,
                 max_removed: Optional[int] = None,
                 calib_images: int = 256,
                 calib_batch_size: int = 64,
                 calib_seed: int = 0,
                 calib_dataset: Optional[dict] = None,
                 metric: str = 'accuracy/top1',
                 out_file: str = 'map_points.csv',
                 overwrite: bool = False) -> None:
        if schedule not in SCHEDULES:
            raise ValueError(f'MAPCollectHook: unknown schedule {schedule!r};'
                             f' use one of {SCHEDULES}')
        self.schedule = schedule
        self.interval = _positive_int(interval, 'interval')
        self.max_removed = _positive_int(max_removed, 'max_removed',
                                         allow_none=True)
        self.calib_images = _positive_int(calib_images, 'calib_images')
        self.calib_batch_size = _positive_int(calib_batch_size,
                                              'calib_batch_size')
        self.calib_seed = int(calib_seed)
        if calib_dataset is not None and not isinstance(calib_dataset, dict):
            raise TypeError('MAPCollectHook: calib_dataset must be a dataset '
                            f'config dict, got {calib_dataset!r}')
        self.calib_dataset = calib_dataset
        self.metric = metric
        self.out_file = out_file
        self.overwrite = overwrite
        self._state: Optional[Dict] = None
        self._loaded_state: Optional[Dict] = None
        self._calib_set = None
        self._calib_batches: Optional[List[torch.Tensor]] = None

    # ------------------------------------------------------------ helpers
    @staticmethod
    def _model(runner):
        return runner.model.module if is_model_wrapper(
            runner.model) else runner.model

    def _backbone(self, runner):
        backbone = getattr(self._model(runner), 'backbone', None)
        if not isinstance(backbone, HetDPTViT) or backbone.form != 'gated':
            found = type(backbone).__name__
            if isinstance(backbone, HetDPTViT):
                found += f' in the {backbone.form} form'
            raise TypeError(
                'MAPCollectHook removes layers by closing gates: the model '
                "needs backbone=dict(type='HetDPTViT', gated=True, ...), got "
                f'{found}')
        return backbone

    def points_path(self, runner) -> str:
        return osp.join(runner.work_dir, self.out_file)

    @property
    def finished(self) -> bool:
        state = self._state
        return (len(state['removed']) == state['max_removed']
                and len(state['rows']) == state['max_removed'] + 1)

    def _resolve_max_removed(self, runner, start: PruneSpec) -> int:
        """Validate the schedule against the network and the epochs."""
        max_epochs = runner.train_loop.max_epochs
        present = {kind: start.depth - len(start.removed(kind))
                   for kind in (ATTN, ACT)}
        kind_names = {ATTN: 'attention', ACT: 'GELU'}
        if self.max_removed is None:
            # As many steps as the epochs allow, until a kind runs out.
            steps = 0
            removed = {ATTN: 0, ACT: 0}
            for kind in schedule_kinds(self.schedule,
                                       max_epochs // self.interval):
                removed[kind] += 1
                if removed[kind] > present[kind]:
                    break
                steps += 1
            if steps == 0:
                raise ValueError(
                    f'MAPCollectHook: no step fits: train_cfg.max_epochs='
                    f'{max_epochs}, interval={self.interval} epochs, '
                    f'schedule {self.schedule!r} on {start}')
            return steps
        kinds = schedule_kinds(self.schedule, self.max_removed)
        for kind in (ATTN, ACT):
            if kinds.count(kind) > present[kind]:
                raise ValueError(
                    f'MAPCollectHook: schedule {self.schedule!r} with '
                    f'max_removed={self.max_removed} removes '
                    f'{kinds.count(kind)} {kind_names[kind]} layers, but '
                    f'only {present[kind]} are present in {start}')
        needed = self.interval * self.max_removed
        if needed > max_epochs:
            raise ValueError(
                f'MAPCollectHook: {self.max_removed} steps of {self.interval} '
                f'epochs need train_cfg.max_epochs >= {needed}, got '
                f'{max_epochs}')
        return self.max_removed

    def _check_runner(self, runner) -> None:
        if not isinstance(runner.train_loop, EpochBasedTrainLoop):
            raise TypeError(
                'MAPCollectHook counts steps in epochs: use an epoch based '
                'train loop (train_cfg=dict(by_epoch=True, ...)), got '
                f'{type(runner.train_loop).__name__}')
        if runner.val_loop is None:
            raise ValueError('MAPCollectHook evaluates every step: the config '
                             'needs val_dataloader, val_cfg and val_evaluator')

    # ----------------------------------------------------------- checkpoint
    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        if self._state is not None:
            checkpoint.setdefault('meta', {})[STATE_KEY] = copy.deepcopy(
                self._state)

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        # Called before the weights are loaded and before the runner knows
        # whether this is a resume: before_train decides what to do with it.
        meta = checkpoint.get('meta') or {}
        self._loaded_state = copy.deepcopy(meta.get(STATE_KEY))

    # ---------------------------------------------------------------- run
    def before_train(self, runner) -> None:
        self._check_runner(runner)
        backbone = self._backbone(runner)
        loop = runner.train_loop
        resumed = loop.epoch > 0 or loop.iter > 0
        if resumed:
            self._state = self._resumed_state(runner, backbone)
            if is_main_process():
                self._calib_set = self._calibration_set(runner)
            # Drop points written after the checkpoint was saved; the steps
            # they belong to run again.
            self._write_points(runner)
            runner.logger.info(
                f'MAPCollectHook: resumed at epoch {loop.epoch} with '
                f'{len(self._state["rows"])} points and '
                f'{len(self._state["removed"])}/{self._state["max_removed"]} '
                f'removal steps in {self.points_path(runner)}')
        else:
            if self._loaded_state is not None:
                runner.logger.info(
                    'MAPCollectHook: the loaded checkpoint comes from an '
                    'earlier MAP collection; starting a new one from its '
                    f'structure {backbone.prune_spec}')
            start = backbone.prune_spec
            max_removed = self._resolve_max_removed(runner, start)
            path = self.points_path(runner)
            if is_main_process():
                if osp.exists(path) and not self.overwrite:
                    raise FileExistsError(
                        f'MAPCollectHook: {path} already exists (points of '
                        'an earlier run?); continue that run with --resume, '
                        'use another --work-dir, or set overwrite=True')
                self._calib_set = self._calibration_set(runner)
            self._state = dict(version=STATE_VERSION, schedule=self.schedule,
                               interval=self.interval, max_removed=max_removed,
                               start_spec=start.to_dict(), removed=[],
                               rows=[])
            runner.logger.info(
                f'MAPCollectHook: schedule {self.schedule!r}, {max_removed} '
                f'steps of {self.interval} epochs from {start}; points go to '
                f'{path}')
            self._record_point(runner)
        if self.finished:
            runner.logger.info('MAPCollectHook: all steps are done')
            loop.stop_training = True

    def _resumed_state(self, runner, backbone) -> Dict:
        state = self._loaded_state
        if state is None:
            raise RuntimeError(
                'MAPCollectHook: resuming from a checkpoint without MAP '
                f'collection state (no meta[{STATE_KEY!r}]); resume from a '
                'checkpoint of the same MAP run or start a new run')
        if state.get('version') != STATE_VERSION:
            raise RuntimeError(f'MAPCollectHook: unsupported state version '
                               f'{state.get("version")!r}')
        for name in ('schedule', 'interval'):
            if state[name] != getattr(self, name):
                raise ValueError(
                    f'MAPCollectHook: the checkpoint was collected with '
                    f'{name}={state[name]!r}, the config says '
                    f'{getattr(self, name)!r}; resume with the same setting')
        start = PruneSpec.from_dict(state['start_spec'])
        expected = start
        for kind, index in state['removed']:
            expected = expected.with_removed(kind, index)
        if backbone.prune_spec != expected:
            raise RuntimeError(
                f'MAPCollectHook: the checkpoint gates give '
                f'{backbone.prune_spec} but its MAP state expects {expected}')
        state = copy.deepcopy(state)
        state['max_removed'] = self._resolve_max_removed(runner, start)
        if state['max_removed'] < len(state['removed']):
            raise ValueError(
                f'MAPCollectHook: the checkpoint has already removed '
                f'{len(state["removed"])} layers, more than the '
                f'{state["max_removed"]} steps configured now')
        return state

    def before_train_epoch(self, runner) -> None:
        state = self._state
        epoch = runner.epoch
        if (epoch % self.interval == 0
                and len(state['removed']) == epoch // self.interval
                and len(state['removed']) < state['max_removed']):
            self._remove_next_layer(runner)

    def after_train_epoch(self, runner) -> None:
        state = self._state
        finished_epochs = runner.epoch + 1
        step = len(state['removed'])
        if (finished_epochs % self.interval == 0
                and finished_epochs // self.interval == step
                and len(state['rows']) == step):
            self._record_point(runner)
            if self.finished:
                runner.logger.info(
                    f'MAPCollectHook: {step} steps done, stopping; points in '
                    f'{self.points_path(runner)}')
                runner.train_loop.stop_training = True

    # ------------------------------------------------------------- removal
    def _remove_next_layer(self, runner) -> None:
        backbone = self._backbone(runner)
        step = len(self._state['removed']) + 1
        kind = schedule_kinds(self.schedule, step)[-1]
        # Rank 0 scores, every rank applies the same decision.
        decision = [None]
        if is_main_process():
            selection = te_select(backbone, self._calibration_batches(runner),
                                  kind)
            runner.logger.info(f'MAPCollectHook step {step}: '
                               f'{selection.format_table()}')
            decision = [selection.chosen.index]
        broadcast_object_list(decision)
        index = int(decision[0])
        backbone.set_spec(backbone.prune_spec.with_removed(kind, index))
        self._state['removed'].append([kind, index])
        runner.logger.info(
            f'MAPCollectHook step {step}: removed {kind} layer of block '
            f'{index}; now {backbone.prune_spec}; fine-tuning for '
            f'{self.interval} epochs')

    def _calibration_set(self, runner):
        cfg = self.calib_dataset
        if cfg is None:
            train = runner.cfg.get('train_dataloader') or {}
            val = runner.cfg.get('val_dataloader') or {}
            train_set, val_set = train.get('dataset'), val.get('dataset')
            if not (isinstance(train_set, dict) and 'pipeline' in train_set
                    and isinstance(val_set, dict) and 'pipeline' in val_set):
                raise ValueError(
                    'MAPCollectHook: cannot derive the calibration dataset '
                    '(training dataset config with the validation pipeline) '
                    'from this config; set calib_dataset=dict(...)')
            cfg = copy.deepcopy(train_set)
            cfg['pipeline'] = copy.deepcopy(val_set['pipeline'])
        dataset = DATASETS.build(copy.deepcopy(cfg))
        if self.calib_images > len(dataset):
            raise ValueError(
                f'MAPCollectHook: calib_images={self.calib_images} but the '
                f'calibration dataset has {len(dataset)} images')
        return Subset(dataset, select_subset(len(dataset), self.calib_images,
                                             self.calib_seed))

    def _calibration_batches(self, runner) -> List[torch.Tensor]:
        """Preprocessed calibration images, loaded once and kept on the CPU
        (every removal trial of every step reuses them)."""
        if self._calib_batches is None:
            model = self._model(runner)
            loader = DataLoader(self._calib_set,
                                batch_size=self.calib_batch_size,
                                shuffle=False, num_workers=0,
                                collate_fn=pseudo_collate)
            with torch.no_grad():
                self._calib_batches = [
                    model.data_preprocessor(data, False)['inputs'].cpu()
                    for data in loader
                ]
        return self._calib_batches

    # ---------------------------------------------------------- evaluation
    def _evaluate(self, runner) -> float:
        """Top-1 accuracy (``metric``) on the validation dataloader, with the
        runner's evaluator (all ranks take part)."""
        val_loop = runner.val_loop
        model = runner.model
        was_training = model.training
        model.eval()
        with torch.no_grad():
            for data in val_loop.dataloader:
                val_loop.evaluator.process(data_samples=model.val_step(data),
                                           data_batch=data)
        metrics = val_loop.evaluator.evaluate(len(val_loop.dataloader.dataset))
        model.train(was_training)
        if self.metric not in metrics:
            raise KeyError(f'MAPCollectHook: the evaluator returned '
                           f'{sorted(metrics)}, not metric={self.metric!r}')
        return float(metrics[self.metric])

    def _record_point(self, runner) -> None:
        accuracy = self._evaluate(runner)
        spec = self._backbone(runner).prune_spec
        a, t = spec.ratios
        row = dict(step=len(self._state['rows']), schedule=self.schedule,
                   n_attn=spec.n_attn, n_act=spec.n_act, a=round(a, 6),
                   t=round(t, 6), accuracy=round(accuracy, 4),
                   removed_attn=' '.join(map(str, spec.attn_removed)),
                   removed_act=' '.join(map(str, spec.act_removed)))
        self._state['rows'].append(row)
        self._write_points(runner)
        runner.logger.info(
            f'MAPCollectHook point {row["step"]}: a={a:.4f} t={t:.4f} '
            f'{self.metric}={accuracy:.2f} ({spec})')

    def _write_points(self, runner) -> None:
        """Rewrite the whole points file from the state, atomically."""
        if not is_main_process():
            return
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=POINT_COLUMNS,
                                lineterminator='\n')
        writer.writeheader()
        writer.writerows(self._state['rows'])
        atomic_write_text(self.points_path(runner), text.getvalue())
