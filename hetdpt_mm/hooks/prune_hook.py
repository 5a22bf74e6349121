"""HetDPTPruneHook: stage 1, step 2 of HetDPT (docs/method.md section 3) inside
an ordinary MMEngine training run.

The hook decides how many layers of each type to remove (given counts, or
MAP), then closes gates one at a time on a schedule
(:mod:`hetdpt_mm.pruning.schedules`), comparing layers only with layers of
their own type.  Closing a gate keeps every parameter, so the optimizer, its
state and the DDP wrapper stay valid.  Rank 0 decides and broadcasts
(:class:`~.gate_hook.GateHookBase`)."""

import os.path as osp
from typing import Dict, List, Mapping, Optional, Sequence, Union

from mmengine.dist import get_world_size, is_main_process
from mmengine.registry import HOOKS

from ..fileio import atomic_write_text
from ..pruning.schedules import build_prune_schedule
from ..pruning.selection import SelectionPolicy
from ..sharding import is_fsdp, unwrap_model
from ..spec import ACT, ATTN, FFN, LAYER_KINDS, PruneSpec
from .ema_structure import follow_structure_in_ema
from .gate_hook import KIND_NAMES, GateHookBase, removable_blocks
from .prune_counts import check_count_sources, resolve_counts

#: Key of the hook's schedule state in ``checkpoint['meta']``.
STATE_KEY = 'hetdpt_prune'


@HOOKS.register_module()
class HetDPTPruneHook(GateHookBase):
    """Progressive within-type depth pruning of a gated HetDPTViT.

    Args:
        counts: layers to remove per kind: ``dict(attn=n_attn,
            act=n_act)``, with whole-branch removal also ``ffn=n_ffn``; a
            family's layer types (``backbone.layer_types()``) count apart:
            a windowed ViT's ``attn_window=..., attn_global=..., act=...``,
            each chosen within its own blocks.
        map_points: a MAP points file (CSV/JSON, see
            :func:`hetdpt_mm.pruning.load_points`); the counts are MAP's
            allocation of ``budget``.
        map_fit: a fit saved by ``tools/fit_map.py --save-fit`` (path or the
            dict itself), used with ``budget`` instead of ``map_points``.
        budget: total number of layers to remove (with ``map_points`` or
            ``map_fit``).
        map_kinds: the two kinds MAP's retained ratios ``(a, t)`` count:
            ``('attn', 'act')`` (the paper's) or ``('attn', 'ffn')``
            (whole-branch removal: ``t`` counts the FFN branches kept); or
            three or more layer types, e.g. ``('attn_window',
            'attn_global', 'act')``, whose points file has an
            ``n_<type>`` column each (:func:`~hetdpt_mm.pruning.fit_types`).
            A points file whose columns count the other pair (``n_ffn`` /
            ``n_act``), or a fit whose ``t_kind`` does, is refused before
            training (:class:`~.prune_counts.UsageError`); ratios alone
            say nothing and are read as ``map_kinds``.
        bounds: per-type count bounds for MAP: ``'full'`` (0..L), ``'paper'``
            (1..L-1) or ``(lo, hi)``.
        degrees: polynomial degrees MAP chooses from by leave-2-out CV.
        schedule: ``'progressive'`` or ``'epoch'`` (see the module doc), a
            schedule config dict (``dict(type='progressive', stages=2)``) or
            a :class:`~hetdpt_mm.pruning.schedules.PruneSchedule`.
        stages: with ``schedule='progressive'``: stage lengths: a list (one
            per removal, extra entries unused), an int (all equal) or
            ``None`` (3, 5, 7, ...).
        by_epoch: with ``schedule='progressive'``: ``stages`` counts epochs
            (True, the default) or iterations (False).
        prune_epoch: with ``schedule='epoch'``: the prune epoch (from 1).
        candidates: optional ``dict(attn=[...], act=[...])``: block indices
            that may be removed, per type (default: all).
        selection: the policy that picks the layer (see
            :class:`~.gate_hook.GateHookBase`); default: the lowest gate score.
        spec_file: after training, write the final spec as JSON to this
            file (relative to the work directory), for a stage-2 run to
            fine-tune (``prune_spec=<that file>``); the spec is also in
            every checkpoint's record.
        log_score_grads: log, every iteration, the mean magnitude of the
            gate-score gradients ``|dL/dm|`` over the open layers of each
            type as the training scalars ``score_grad_attn`` and
            ``score_grad_act`` (docs/method.md §2, gradient disparity); the
            gradients are read as backward computes them, before clipping.
            Not under FSDP (its flattened shards hide the scores).
    """

    priority = 'NORMAL'
    STATE_KEY = STATE_KEY
    #: 2 added ``version`` and ``selection``.
    STATE_VERSION = 2

    def __init__(
        self,
        counts: Optional[Mapping[str, int]] = None,
        map_points: Optional[str] = None,
        map_fit: Union[None, str, Mapping] = None,
        budget: Optional[int] = None,
        map_kinds: Sequence[str] = (ATTN, ACT),
        bounds='full',
        degrees: Sequence[int] = (1, 2, 3, 4),
        schedule='progressive',
        stages: Union[None, int, Sequence[int]] = None,
        by_epoch: Optional[bool] = None,
        prune_epoch: Optional[int] = None,
        candidates: Optional[Mapping[str, Sequence[int]]] = None,
        selection: Union[str, Mapping, SelectionPolicy] = 'LowestGateScore',
        spec_file: Optional[str] = None,
        log_score_grads: bool = False,
    ):
        counts, map_kinds = check_count_sources(
            counts, map_points, map_fit, budget, map_kinds
        )
        unknown = sorted(set(candidates or ()) - set(LAYER_KINDS))
        if unknown:
            raise ValueError(f'candidates keys {unknown}: use {LAYER_KINDS}')
        super().__init__(selection)
        self.schedule = build_prune_schedule(
            schedule, stages=stages, by_epoch=by_epoch, prune_epoch=prune_epoch
        )
        self.counts_cfg = counts
        self.map_points = map_points
        self.map_fit = map_fit
        self.budget = budget
        self.map_kinds = map_kinds
        self.bounds = bounds
        self.degrees = tuple(degrees)
        self.candidates_cfg = candidates
        self.spec_file = spec_file
        self.log_score_grads = log_score_grads
        # |dL/dm| of the open gates of each kind in the current iteration.
        self._score_grads: Dict[str, List[float]] = {
            kind: [] for kind in LAYER_KINDS
        }
        # Resolved in before_train.
        self.counts: Dict[str, int] = {}
        self.order: List[str] = []
        self.positions: List[int] = []
        self.candidates: Dict[str, List[int]] = {}
        self.types: Dict[str, tuple] = {}
        self.decisions: List[Dict] = []

    # ------------------------------------------------------------ helpers
    def _resolve_counts(
        self, depth: int, logger, types: Optional[Mapping] = None
    ) -> Dict[str, int]:
        return resolve_counts(
            depth,
            logger,
            types=types or {},
            counts=self.counts_cfg,
            map_points=self.map_points,
            map_fit=self.map_fit,
            budget=self.budget,
            map_kinds=self.map_kinds,
            bounds=self.bounds,
            degrees=self.degrees,
        )

    def _resolve_candidates(
        self, depth: int, types: Mapping
    ) -> Dict[str, List[int]]:
        resolved = {}
        for name in (*LAYER_KINDS, *self.counts):
            kind, blocks = types.get(name, (name, range(depth)))
            given = (self.candidates_cfg or {}).get(kind)
            if given is None:
                resolved[name] = list(blocks)
                continue
            # A spec removing exactly the candidates validates them as
            # block indices of this depth.
            listed = dict.fromkeys(LAYER_KINDS, ())
            listed[kind] = given
            try:
                spec = PruneSpec(
                    depth, listed[ATTN], listed[ACT], ffn_removed=listed[FFN]
                )
            except (TypeError, ValueError) as error:
                raise type(error)(f'candidates[{kind!r}]: {error}') from error
            resolved[name] = [i for i in spec.removed(kind) if i in blocks]
            if len(resolved[name]) < self.counts.get(name, 0):
                raise ValueError(f'candidates[{kind!r}] are fewer than counts')
        return resolved

    # -------------------------------------------------------------- hooks
    def before_train(self, runner) -> None:
        backbone = self.backbone(runner)
        self.check_wrapper(runner)
        if is_fsdp(runner.model) and getattr(
            unwrap_model(runner.model), 'wants_teacher_snapshot', False
        ):
            raise ValueError('no teacher snapshot under FSDP: use DDP')
        self.setup_selection(runner, backbone)
        if self.log_score_grads:
            self._watch_score_grads(runner, backbone)
        depth = backbone.depth
        types = backbone.layer_types()
        unknown = set(self.counts_cfg or ()) - set(types) - set(LAYER_KINDS)
        if unknown:
            raise ValueError(f'counts {sorted(unknown)}: no such layer types')
        self.counts = self._resolve_counts(depth, runner.logger, types)
        self.types = {
            name: types.get(name, (name, range(depth))) for name in self.counts
        }
        removed = {
            kind: sum(
                count
                for name, count in self.counts.items()
                if self.types[name][0] == kind
            )
            for kind in LAYER_KINDS
        }
        self.check_gates(
            backbone,
            [kind for kind, count in removed.items() if count],
            f'counts={self.counts}',
        )
        branches = removed[ATTN] + removed[FFN]
        if self.counts.get(FFN) and branches > depth:
            raise ValueError(f'counts remove {branches} branches of {depth}')
        self.candidates = self._resolve_candidates(depth, types)
        self.order = self.schedule.order(self.counts)
        iters_per_epoch = len(runner.train_dataloader)
        self.positions = (
            self.schedule.iterations(len(self.order), iters_per_epoch)
            if self.order
            else []
        )
        if self.positions and self.positions[-1] > runner.max_iters:
            raise ValueError(
                'the prune schedule is longer than the run: train longer'
            )
        self._restore_or_start(runner, backbone)
        follow_structure_in_ema(runner)
        where = ''
        if self.schedule.by_epoch:
            where = (
                ' ('
                + ', '.join(
                    f'epoch {(p - 1) // iters_per_epoch + 1} iter '
                    f'{(p - 1) % iters_per_epoch + 1}/{iters_per_epoch}'
                    for p in self.positions
                )
                + ')'
            )
        runner.logger.info(
            f'HetDPT prune schedule ({self.schedule.name}): order '
            f'{self.order}, after iterations {self.positions}{where}; '
            f'{len(self.decisions)} of {len(self.order)} done; decisions by '
            f'{self.selection.name} on rank 0, on {get_world_size()} '
            'rank(s)'
        )
        if self.positions and self.positions[-1] == runner.max_iters:
            runner.logger.warning(
                'HetDPT: the last removal is at the end '
                'of the run, so nothing fine-tunes after '
                'it'
            )

    def _watch_score_grads(self, runner, backbone) -> None:
        if is_fsdp(runner.model):
            raise ValueError('log_score_grads does not work under FSDP')
        for kind in backbone.REMOVABLE_KINDS:
            for gate in backbone.gates(kind):
                # A closed gate's score gets no gradient: only open ones
                # report, so the mean is over the open layers.
                gate.hetdpt_score.register_hook(
                    lambda grad, kind=kind: self._score_grads[kind].append(
                        float(grad.abs())
                    )
                )

    def _log_score_grads(self, runner) -> None:
        for kind, grads in self._score_grads.items():
            if grads:
                runner.message_hub.update_scalar(
                    f'train/score_grad_{kind}', sum(grads) / len(grads)
                )
            grads.clear()

    def _restore_or_start(self, runner, backbone) -> None:
        if runner.iter == 0:
            if not backbone.prune_spec.is_dense:
                raise ValueError(
                    'closed gates at the start: load dense weights or --resume'
                )
            self.decisions = []
            return
        state = self.resumed_state()
        if state is not None:
            self.check_resumed_settings(
                state,
                dict(
                    counts=self.counts,
                    order=self.order,
                    positions=self.positions,
                    selection=self.selection.name,
                ),
            )
        # A checkpoint without the hook's state has made no removal.
        self.decisions = [dict(d) for d in (state or {}).get('decisions', [])]
        done = sum(p <= runner.iter for p in self.positions)
        if len(self.decisions) != done:
            raise ValueError(
                f'{self}: {done} removals due, {len(self.decisions)} made'
            )
        self.check_resumed_gates(
            backbone,
            PruneSpec(backbone.depth),
            [(d['kind'], d['index']) for d in self.decisions],
        )
        runner.logger.info(
            f'HetDPT prune state restored: '
            f'{backbone.prune_spec}, {done} of '
            f'{len(self.order)} removals done'
        )

    def output_files(
        self, work_dir: str, config_path: Optional[str]
    ) -> List[str]:
        """The files this hook writes (see
        :meth:`~.merge_hook.MergeCheckpointHook.output_files`)."""
        if self.spec_file is None:
            return []
        return [osp.join(work_dir, self.spec_file)]

    def upgrade_state(self, state: Dict, version: int) -> Dict:
        # 1 -> 2, the only step: version 1 predates selection policies, its
        # decisions are the lowest gate scores.
        return dict(state, selection='LowestGateScore')

    def state_dict(self) -> Dict:
        return dict(
            counts=dict(self.counts),
            order=list(self.order),
            positions=list(self.positions),
            decisions=[dict(d) for d in self.decisions],
            schedule=self.schedule.name,
            selection=self.selection.name,
        )

    def after_train_iter(
        self, runner, batch_idx: int, data_batch=None, outputs=None
    ) -> None:
        if self.log_score_grads:
            self._log_score_grads(runner)
        step = runner.iter + 1
        while (
            len(self.decisions) < len(self.positions)
            and self.positions[len(self.decisions)] == step
        ):
            self._remove_next(runner, step)

    def _remove_next(self, runner, step: int) -> None:
        number = len(self.decisions)
        name = self.order[number]
        kind = self.types[name][0]
        backbone = self.backbone(runner)
        if number == 0:
            self._snapshot_teacher(runner)
        spec = backbone.prune_spec
        closed_before = list(spec.removed(kind))
        removable = removable_blocks(spec, kind)
        open_candidates = [i for i in self.candidates[name] if i in removable]
        decision, rank_choices = self.select_and_close(
            backbone, kind, open_candidates
        )
        record = dict(
            step=number + 1,
            iter=step,
            epoch=runner.epoch + 1,
            kind=kind,
            index=decision.index,
            scores=list(decision.scores),
            candidates=open_candidates,
            closed_before=closed_before,
            rank_choices=rank_choices,
            # Every layer's score of both types at this moment, for the
            # record (e.g. to rank them across types, as HetDPT does not);
            # a type without gates (SwiGLU FFNs: no GELU) is left out.
            gate_scores={
                k: backbone.gate_scores(k).float().tolist()
                for k in backbone.REMOVABLE_KINDS
                if backbone.gates(k)
            },
        )
        if name != kind:  # a layer type of the family (attn_global, ...)
            record['type'] = name
        self.decisions.append(record)
        epoch = f' (epoch {record["epoch"]})' if self.schedule.by_epoch else ''
        ranks = (
            ''
            if rank_choices is None
            else f"\n  each rank's own choice: {rank_choices}"
        )
        table = decision.table.replace('\n', '\n  ')
        runner.logger.info(
            f'HetDPT prune {record["step"]}/{len(self.order)} after iter '
            f'{step}{epoch}: close {KIND_NAMES[kind]} ({kind}) of block '
            f'{decision.index}, chosen by {self.selection.name}\n  {table}'
            f'{ranks}\n  spec now: {backbone.prune_spec}'
        )
        follow_structure_in_ema(runner)

    @staticmethod
    def _snapshot_teacher(runner) -> None:
        """Self-distillation: freeze a copy of the unpruned model as the
        teacher, if the model wants one (HetDPTDistillClassifier)."""
        model = unwrap_model(runner.model)
        if getattr(model, 'wants_teacher_snapshot', False):
            model.snapshot_teacher()
            runner.logger.info(
                'HetDPT self-distillation: the teacher is a '
                'frozen copy of the model before the first '
                'removal'
            )

    def after_train(self, runner) -> None:
        backbone = self.backbone(runner)
        runner.logger.info(
            f'HetDPT pruning: {len(self.decisions)} of {len(self.order)} '
            f'removals done, final {backbone.prune_spec}'
        )
        if self.spec_file is not None and is_main_process():
            (path,) = self.output_files(runner.work_dir, None)
            atomic_write_text(path, backbone.prune_spec.to_json() + '\n')
            runner.logger.info(f'HetDPT spec written to {path}')
