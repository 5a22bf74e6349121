"""Collect MAP points in an ordinary classification run (docs/method.md
section 2): :class:`MAPCollectHook` makes a training run of a gated backbone
of any family the iterative *prune -> fast fine-tune -> evaluate* loop whose
``(a, t, accuracy)`` points the Model Accuracy Predictor fits (configs,
schedule and resume: docs/user_guides/map.md)."""

import csv
import io
import os.path as osp
from typing import Dict, List, Mapping, Optional, Union

import torch
from mmengine.dist import is_main_process
from mmengine.registry import HOOKS
from mmengine.runner import EpochBasedTrainLoop

from ..datasets.subset import SubsetSampler, select_subset
from ..fileio import atomic_write_text
from ..pruning.schedules import CollectSchedule, build_collect_schedule
from ..pruning.selection import SelectionPolicy
from ..spec import ACT, ATTN, FFN, LAYER_KINDS, PruneSpec, positive_int
from .gate_hook import GateHookBase, removable_blocks

__all__ = [
    'POINT_COLUMNS',
    'BRANCH_POINT_COLUMNS',
    'STATE_KEY',
    'select_subset',
    'SubsetSampler',
    'MAPCollectHook',
]

#: Columns of the points file (read by hetdpt_mm.pruning.map.load_points).
POINT_COLUMNS = (
    'step',
    'schedule',
    'n_attn',
    'n_act',
    'a',
    't',
    'accuracy',
    'removed_attn',
    'removed_act',
)
#: Its columns when the schedule removes FFN branches (whole-branch
#: removal): MAP's ``t`` then counts the FFN branches kept, as
#: ``HetDPTPruneHook(map_kinds=('attn', 'ffn'))`` reads it.
BRANCH_POINT_COLUMNS = tuple(
    column.replace(f'_{ACT}', f'_{FFN}') for column in POINT_COLUMNS
)
#: Key of the hook's state in ``checkpoint['meta']``.
STATE_KEY = 'hetdpt_map_collect'


@HOOKS.register_module()
class MAPCollectHook(GateHookBase):
    """Remove one layer every ``interval`` epochs and record MAP points.

    The model must be a classifier with a gated HetDPT backbone
    (``gated=True``); the run must be epoch based and have a validation
    dataloader and evaluator.

    Args:
        schedule: ``'attn'``, ``'act'``, ``'interleaved'`` or ``'ffn'``
            (see :data:`~hetdpt_mm.pruning.schedules.COLLECT_PRESETS`), a
            schedule config dict (``dict(type='cyclic', kinds=['act', 'attn',
            'act'])``; ``kinds=['attn', 'ffn']`` for whole branches) or a
            :class:`~hetdpt_mm.pruning.schedules.CollectSchedule`.  A
            schedule removing FFN branches (whole-branch removal) writes
            ``n_ffn`` and ``removed_ffn`` in place of the GELU columns, and
            its ``t`` counts the FFN branches kept
            (``HetDPTPruneHook(map_kinds=('attn', 'ffn'))`` reads it).
        interval: fine-tuning epochs after each removal.
        max_removed: number of removal steps; ``None`` takes as many as
            ``train_cfg.max_epochs // interval`` (at most as many layers as
            the schedule can remove).  Training stops after the last step.
        calib_images, calib_batch_size, calib_seed, calib_dataset: the
            calibration set of the default ``TransferEntropy`` selection
            (see :class:`~hetdpt_mm.pruning.selection.TransferEntropy`);
            ``None``: its defaults (256 images, batches of 64, seed 0, the
            training set with the validation pipeline).
        selection: the policy that picks the layer (see
            :class:`~.gate_hook.GateHookBase`); ``None``:
            ``TransferEntropy`` with the ``calib_*`` arguments.
        metric: the evaluator's key for the accuracy in %.
        out_file: points file, relative to the work dir.
        overwrite: replace an existing points file when starting fresh.
    """

    # Must run before CheckpointHook (VERY_LOW): a checkpoint saved at the
    # end of a step already holds that step's point.
    priority = 'NORMAL'
    STATE_KEY = STATE_KEY
    #: 2 added ``selection``.
    STATE_VERSION = 2

    def __init__(
        self,
        schedule: Union[str, Mapping, CollectSchedule] = 'interleaved',
        interval: int = 10,
        max_removed: Optional[int] = None,
        calib_images: Optional[int] = None,
        calib_batch_size: Optional[int] = None,
        calib_seed: Optional[int] = None,
        calib_dataset: Optional[dict] = None,
        selection: Union[None, str, Mapping, SelectionPolicy] = None,
        metric: str = 'accuracy/top1',
        out_file: str = 'map_points.csv',
        overwrite: bool = False,
    ) -> None:
        calibration = {
            name: value
            for name, value in (
                ('calib_images', calib_images),
                ('calib_batch_size', calib_batch_size),
                ('calib_seed', calib_seed),
                ('calib_dataset', calib_dataset),
            )
            if value is not None
        }
        if selection is None:
            selection = dict(type='TransferEntropy', **calibration)
        elif calibration:
            raise ValueError(f'{sorted(calibration)} belong in selection=...')
        super().__init__(selection)
        self.schedule = build_collect_schedule(schedule)
        self.interval = positive_int(interval, 'interval')
        self.max_removed = (
            None
            if max_removed is None
            else positive_int(max_removed, 'max_removed')
        )
        self.metric = metric
        self.out_file = out_file
        self.overwrite = overwrite
        self._state: Optional[Dict] = None

    # ------------------------------------------------------------ helpers
    def output_files(
        self, work_dir: str, config_path: Optional[str]
    ) -> List[str]:
        """The files this hook writes (see
        :meth:`~.merge_hook.MergeCheckpointHook.output_files`)."""
        return [osp.join(work_dir, self.out_file)]

    def points_path(self, runner) -> str:
        return self.output_files(runner.work_dir, None)[0]

    @property
    def finished(self) -> bool:
        state = self._state
        return (
            len(state['removed']) == state['max_removed']
            and len(state['rows']) == state['max_removed'] + 1
        )

    def _resolve_max_removed(self, runner, start: PruneSpec) -> int:
        """Validate the schedule against the network and the epochs."""
        max_epochs = runner.train_loop.max_epochs
        name = self.schedule.name
        types = self.backbone(runner).layer_types()
        if self.max_removed is None:
            # As many steps as the epochs allow, until a kind runs out.
            kinds = self.schedule.kinds(max_epochs // self.interval)
            steps = 0
            while steps < len(kinds) and not self._too_many(
                start, kinds[: steps + 1], types
            ):
                steps += 1
            if steps == 0:
                raise ValueError(f'no step fits in max_epochs={max_epochs}')
            return steps
        too_many = self._too_many(
            start, self.schedule.kinds(self.max_removed), types
        )
        if too_many:
            raise ValueError(f'schedule {name!r} {too_many}')
        needed = self.interval * self.max_removed
        if needed > max_epochs:
            raise ValueError(
                f'{self.max_removed} steps need max_epochs >= {needed}'
            )
        return self.max_removed

    @staticmethod
    def _too_many(start: PruneSpec, kinds, types) -> str:
        """What ``kinds`` (kinds or layer types of ``types``) removes beyond
        what ``start`` has left, else ''."""
        for name in dict.fromkeys([*LAYER_KINDS, *kinds]):
            kind, blocks = types.get(name, (name, range(start.depth)))
            present = len(
                [i for i in removable_blocks(start, kind) if i in blocks]
            )
            # A kind counts the removals of its layer types too.
            wanted = (
                sum(types.get(k, (k,))[0] == kind for k in kinds)
                if name == kind
                else kinds.count(name)
            )
            if wanted > present:
                return (
                    f'removes {wanted} {name} layers, only {present} are left'
                )
        # Whole-branch removal keeps one branch of every block.
        branches = kinds.count(ATTN) + kinds.count(FFN)
        free = len(removable_blocks(start, FFN))
        if FFN in kinds and branches > free:
            return f'removes {branches} branches of {free} blocks'
        return ''

    def _check_kinds(
        self, backbone, start: PruneSpec, max_removed: int
    ) -> None:
        """The kinds removed must be gated, and MAP's ``t`` counts GELUs or
        FFN branches, not both."""
        types = backbone.layer_types()
        kinds = {
            types.get(name, (name,))[0]
            for name in self.schedule.kinds(max_removed)
        }
        self.check_gates(
            backbone, sorted(kinds), f'schedule {self.schedule.name!r}'
        )
        if FFN in kinds and (ACT in kinds or start.act_removed):
            raise ValueError("MAP's t counts act or ffn: collect them apart")

    @property
    def t_kind(self) -> str:
        """The kind MAP's ``t`` counts: FFN branches when the schedule
        removes them, else GELUs."""
        kinds = self.schedule.kinds(self._state['max_removed'])
        return FFN if FFN in kinds else ACT

    @property
    def point_columns(self):
        return BRANCH_POINT_COLUMNS if self.t_kind == FFN else POINT_COLUMNS

    def _check_runner(self, runner) -> None:
        if not isinstance(runner.train_loop, EpochBasedTrainLoop):
            raise TypeError('MAPCollectHook needs an epoch based train loop')
        if runner.val_loop is None:
            raise ValueError('MAPCollectHook needs a val_dataloader')

    # --------------------------------------------------------------- state
    def state_dict(self) -> Optional[Dict]:
        return self._state

    def upgrade_state(self, state: Dict, version: int) -> Dict:
        # 1 -> 2, the only step: version 1 predates selection policies, it
        # always used TE.
        return dict(state, selection='TransferEntropy')

    # ---------------------------------------------------------------- run
    def before_train(self, runner) -> None:
        self._check_runner(runner)
        backbone = self.backbone(runner)
        self.check_wrapper(runner)
        loop = runner.train_loop
        if runner.iter > 0:
            self._state = self._resumed_state(runner, backbone)
            self.setup_selection(runner, backbone)
            # Drop points written after the checkpoint was saved; the steps
            # they belong to run again.
            self._write_points(runner)
            runner.logger.info(
                f'MAPCollectHook: resumed at epoch {loop.epoch} with '
                f'{len(self._state["rows"])} points and '
                f'{len(self._state["removed"])}/{self._state["max_removed"]} '
                f'removal steps in {self.points_path(runner)}'
            )
        else:
            if self.has_loaded_state:
                runner.logger.info(
                    'MAPCollectHook: the loaded checkpoint comes from an '
                    'earlier MAP collection; starting a new one from its '
                    f'structure {backbone.prune_spec}'
                )
            start = backbone.prune_spec
            max_removed = self._resolve_max_removed(runner, start)
            self._check_kinds(backbone, start, max_removed)
            path = self.points_path(runner)
            if is_main_process() and osp.exists(path) and not self.overwrite:
                raise FileExistsError(
                    f'{path} exists: --resume or overwrite=True'
                )
            self.setup_selection(runner, backbone)
            self._state = dict(
                schedule=self.schedule.name,
                interval=self.interval,
                selection=self.selection.name,
                max_removed=max_removed,
                start_spec=start.to_dict(),
                removed=[],
                rows=[],
            )
            runner.logger.info(
                f'MAPCollectHook: schedule {self.schedule.name!r}, '
                f'{max_removed} steps of {self.interval} epochs from {start},'
                f' layers chosen by {self.selection.name}; points go to '
                f'{path}'
            )
            self._record_point(runner)
        if self.finished:
            runner.logger.info('MAPCollectHook: all steps are done')
            loop.stop_training = True

    def _resumed_state(self, runner, backbone) -> Dict:
        state = self.resumed_state()
        if state is None:
            raise ValueError(f'{self}: the checkpoint has no {STATE_KEY}')
        self.check_resumed_settings(
            state,
            dict(
                schedule=self.schedule.name,
                interval=self.interval,
                selection=self.selection.name,
            ),
        )
        start = PruneSpec.from_dict(state['start_spec'])
        self.check_resumed_gates(
            backbone, start, [tuple(r) for r in state['removed']]
        )
        state['max_removed'] = self._resolve_max_removed(runner, start)
        self._check_kinds(backbone, start, state['max_removed'])
        if state['max_removed'] < len(state['removed']):
            raise ValueError(f'{self}: max_removed < the removals so far')
        return state

    def before_train_epoch(self, runner) -> None:
        state = self._state
        epoch = runner.epoch
        if (
            epoch % self.interval == 0
            and len(state['removed']) == epoch // self.interval
            and len(state['removed']) < state['max_removed']
        ):
            self._remove_next_layer(runner)

    def after_train_epoch(self, runner) -> None:
        state = self._state
        finished_epochs = runner.epoch + 1
        step = len(state['removed'])
        if (
            finished_epochs % self.interval == 0
            and finished_epochs // self.interval == step
            and len(state['rows']) == step
        ):
            self._record_point(runner)
            if self.finished:
                runner.logger.info(
                    f'MAPCollectHook: {step} steps done, stopping; points in '
                    f'{self.points_path(runner)}'
                )
                runner.train_loop.stop_training = True

    # ------------------------------------------------------------- removal
    def _remove_next_layer(self, runner) -> None:
        backbone = self.backbone(runner)
        step = len(self._state['removed']) + 1
        name = self.schedule.kinds(step)[-1]
        kind, blocks = backbone.layer_types()[name]
        present = [
            i
            for i in removable_blocks(backbone.prune_spec, kind)
            if i in blocks
        ]
        decision, _ = self.select_and_close(backbone, kind, present)
        runner.logger.info(f'MAPCollectHook step {step}: {decision.table}')
        self._state['removed'].append([kind, decision.index])
        runner.logger.info(
            f'MAPCollectHook step {step}: removed {kind} layer of block '
            f'{decision.index} ({self.selection.name}); now '
            f'{backbone.prune_spec}; fine-tuning for {self.interval} epochs'
        )

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
                val_loop.evaluator.process(
                    data_samples=model.val_step(data), data_batch=data
                )
        metrics = val_loop.evaluator.evaluate(len(val_loop.dataloader.dataset))
        model.train(was_training)
        if self.metric not in metrics:
            raise KeyError(f'metric={self.metric!r}: not in {sorted(metrics)}')
        return float(metrics[self.metric])

    def _record_point(self, runner) -> None:
        accuracy = self._evaluate(runner)
        backbone = self.backbone(runner)
        spec = backbone.prune_spec
        kind = self.t_kind
        a = (spec.depth - spec.n_attn) / spec.depth
        t = (spec.depth - len(spec.removed(kind))) / spec.depth
        row = {
            'step': len(self._state['rows']),
            'schedule': self.schedule.name,
            'n_attn': spec.n_attn,
            f'n_{kind}': len(spec.removed(kind)),
            'a': round(a, 6),
            't': round(t, 6),
            'accuracy': round(accuracy, 4),
            'removed_attn': ' '.join(map(str, spec.attn_removed)),
            f'removed_{kind}': ' '.join(map(str, spec.removed(kind))),
        }
        # A family's layer types (a windowed ViT's attention split by where
        # it attends): MAP over them reads these columns.
        for name, (of_kind, blocks) in backbone.layer_types().items():
            if name not in LAYER_KINDS:
                row[f'n_{name}'] = len(set(spec.removed(of_kind)) & {*blocks})
        self._state['rows'].append(row)
        self._write_points(runner)
        runner.logger.info(
            f'MAPCollectHook point {row["step"]}: a={a:.4f} t={t:.4f} '
            f'{self.metric}={accuracy:.2f} ({spec})'
        )

    def _write_points(self, runner) -> None:
        """Rewrite the whole points file from the state, atomically."""
        if not is_main_process():
            return
        text = io.StringIO()
        rows = self._state['rows']
        types = (
            [k for k in rows[:1][0] if k not in self.point_columns]
            if rows
            else []
        )
        writer = csv.DictWriter(
            text,
            fieldnames=[*self.point_columns, *types],
            lineterminator='\n',
        )
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(self.points_path(runner), text.getvalue())
