"""HetDPTPruneHook: stage 1, step 2 of HetDPT (METHOD.md section 3) inside
an ordinary MMEngine training run.

The backbone is a ``HetDPTViT(gated=True)``: every attention sublayer and
every FFN GELU has a straight-through gate whose score ``m`` trains with the
weights.  The hook decides how many layers of each type to remove (given
counts, or MAP: a points file or a saved fit plus a budget), then closes gates
one at a time on a schedule, each time the open candidate of that type with
the lowest ``m``.  Attention scores are only ever compared with attention
scores, GELU scores with GELU scores.  Closing a gate keeps every parameter,
so the optimizer, its state and the DDP wrapper stay valid; the closed layer
is no longer computed.  Training after the last removal is the fine-tune.

Schedules (positions are "after training iteration i", counted from 1 over
the whole run, so epoch- and iteration-based loops work alike):

* ``'progressive'`` (the authors'): removals interleave the two types, the
  type with the larger count first, ties to GELU; removal ``k`` ends stage
  ``k`` and ``stages`` gives the stage lengths (epochs, or iterations with
  ``by_epoch=False``; default the authors' 3, 5, 7, ... epochs).
* ``'epoch'``: every removal happens during one prune epoch
  (``prune_epoch``, counted from 1), spread evenly over its iterations in
  the same interleaved order, the last one at the end of the epoch, so the
  scores keep adapting between removals.

Multi-process runs: the decision is taken from rank 0's scores, broadcast to
every rank, so all ranks close the same gate.  Under DDP the scores are
identical anyway (their gradients are all-reduced); each decision also
records every rank's own choice to show it.
"""
import json
import math
from typing import Dict, List, Mapping, Optional, Sequence, Union

from mmengine.dist import all_gather, broadcast, get_world_size
from mmengine.optim import OptimWrapperDict
from mmengine.registry import HOOKS
from torch.nn.parallel import DistributedDataParallel

from ..pruning import MAPFit, allocate, fit_map, load_points
from ..record import read_backbone_checkpoint
from ..spec import ACT, ATTN, LAYER_KINDS, _as_indices
from .spec_meta_hook import HetDPTMetaHook, find_hetdpt_backbones, unwrap_model

SCHEDULES = ('progressive', 'epoch')
#: Key of the hook's schedule state in ``checkpoint['meta']``.
STATE_KEY = 'hetdpt_prune'
KIND_NAMES = {ATTN: 'attention', ACT: 'GELU'}


def authors_stages(n: int) -> List[int]:
    """The authors' stage lengths 3, 5, 7, ... (DeiT-B: prunes after epochs
    3, 8, 15, 24, 35, 48, 63, 80)."""
    return [3 + 2 * k for k in range(n)]


def removal_order(counts: Mapping[str, int]) -> List[str]:
    """Interleave the two types, the one with the larger count first (ties
    to GELU), then the rest of the larger one."""
    first, second = (ATTN, ACT) if counts[ATTN] > counts[ACT] else (ACT,
                                                                     ATTN)
    order = []
    for step in range(max(counts[ATTN], counts[ACT])):
        order += [kind for kind in (first, second) if step < counts[kind]]
    return order


def removal_iterations(num_removals: int, schedule: str,
                       iters_per_epoch: int, by_epoch: bool = True,
                       stages: Union[None, int, Sequence[int]] = None,
                       prune_epoch: Optional[int] = None) -> List[int]:
    """The training iteration (1-based, over the whole run) after which each
    removal happens."""
    if schedule == 'epoch':
        start = (prune_epoch - 1) * iters_per_epoch
        return [start + math.ceil(k * iters_per_epoch / num_removals)
                for k in range(1, num_removals + 1)]
    if stages is None:
        lengths = authors_stages(num_removals)
    elif isinstance(stages, int):
        lengths = [stages] * num_removals
    else:
        if len(stages) < num_removals:
            raise ValueError(
                f'stages gives {len(stages)} stage lengths but the schedule '
                f'has {num_removals} removals (one per stage)')
        lengths = list(stages[:num_removals])
    unit = iters_per_epoch if by_epoch else 1
    positions, end = [], 0
    for length in lengths:
        end += length
        positions.append(end * unit)
    return positions


def _check_positive_ints(values, name: str) -> None:
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f'{name} must hold positive integers, got '
                             f'{value!r}')


@HOOKS.register_module()
class HetDPTPruneHook(HetDPTMetaHook):
    """Progressive within-type depth pruning of a gated HetDPTViT.

    Args:
        counts: ``dict(attn=n_attn, act=n_act)`` layers to remove.
        map_points: a MAP points file (CSV/JSON, see
            :func:`hetdpt_mm.pruning.load_points`); the counts are MAP's
            allocation of ``budget``.
        map_fit: a fit saved by ``tools/fit_map.py --save-fit`` (path or the
            dict itself), used with ``budget`` instead of ``map_points``.
        budget: total number of layers to remove (with ``map_points`` or
            ``map_fit``).
        bounds: per-type count bounds for MAP: ``'full'`` (0..L), ``'paper'``
            (1..L-1) or ``(lo, hi)``.
        degrees: polynomial degrees MAP chooses from by leave-2-out CV.
        schedule: ``'progressive'`` or ``'epoch'`` (see the module doc).
        stages: progressive stage lengths: a list (one per removal, extra
            entries unused), an int (all equal) or ``None`` (3, 5, 7, ...).
        by_epoch: ``stages`` counts epochs (True) or iterations (False).
        prune_epoch: the prune epoch of the ``'epoch'`` schedule (from 1).
        candidates: optional ``dict(attn=[...], act=[...])``: block indices
            that may be removed, per type (default: all).
    """

    priority = 'NORMAL'

    def __init__(self,
                 counts: Optional[Mapping[str, int]] = None,
                 map_points: Optional[str] = None,
                 map_fit: Union[None, str, Mapping] = None,
                 budget: Optional[int] = None,
                 bounds='full',
                 degrees: Sequence[int] = (1, 2, 3, 4),
                 schedule: str = 'progressive',
                 stages: Union[None, int, Sequence[int]] = None,
                 by_epoch: bool = True,
                 prune_epoch: Optional[int] = None,
                 candidates: Optional[Mapping[str, Sequence[int]]] = None):
        sources = [name for name, value in (('counts', counts),
                                            ('map_points', map_points),
                                            ('map_fit', map_fit))
                   if value is not None]
        if len(sources) != 1:
            raise ValueError('HetDPTPruneHook needs exactly one of counts, '
                             f'map_points or map_fit; got {sources or "none"}')
        if counts is not None:
            counts = dict(counts)
            if set(counts) != set(LAYER_KINDS):
                raise ValueError(f'counts must be dict(attn=..., act=...), '
                                 f'got {counts}')
            if budget is not None:
                raise ValueError('budget is for MAP; with explicit counts '
                                 'leave it out')
        elif budget is None:
            raise ValueError(f'{sources[0]} needs a budget (total number of '
                             'layers to remove)')
        if schedule not in SCHEDULES:
            raise ValueError(f'schedule must be one of {SCHEDULES}, got '
                             f'{schedule!r}')
        if schedule == 'epoch':
            _check_positive_ints([prune_epoch], 'prune_epoch')
            if stages is not None:
                raise ValueError('stages belongs to the progressive '
                                 'schedule; the epoch schedule uses '
                                 'prune_epoch')
        elif prune_epoch is not None:
            raise ValueError('prune_epoch belongs to schedule="epoch"')
        if stages is None and not by_epoch and schedule == 'progressive':
            raise ValueError('by_epoch=False needs stages in iterations')
        if stages is not None:
            _check_positive_ints(
                [stages] if isinstance(stages, int) else stages, 'stages')
        if candidates is not None:
            unknown = set(candidates) - set(LAYER_KINDS)
            if unknown:
                raise ValueError(f'candidates keys must be attn and/or act, '
                                 f'got {sorted(unknown)}')
        self.counts_cfg = counts
        self.map_points = map_points
        self.map_fit = map_fit
        self.budget = budget
        self.bounds = bounds
        self.degrees = tuple(degrees)
        self.schedule = schedule
        self.stages = stages if stages is None or isinstance(
            stages, int) else list(stages)
        self.by_epoch = by_epoch
        self.prune_epoch = prune_epoch
        self.candidates_cfg = candidates
        # Resolved in before_train.
        self.counts: Dict[str, int] = {}
        self.order: List[str] = []
        self.positions: List[int] = []
        self.candidates: Dict[str, List[int]] = {}
        self.decisions: List[Dict] = []
        self._loaded_state: Optional[Dict] = None

    # ------------------------------------------------------------ helpers
    @staticmethod
    def _backbone(runner):
        gated = [(prefix, m) for prefix, m in find_hetdpt_backbones(
            runner.model) if m.form == 'gated']
        if len(gated) != 1:
            found = [(p, m.form) for p, m in find_hetdpt_backbones(
                runner.model)]
            raise ValueError(
                'HetDPTPruneHook needs exactly one HetDPTViT built with '
                f'gated=True in the model; found (prefix, form): {found}')
        return gated[0][1]

    def _resolve_counts(self, depth: int, logger) -> Dict[str, int]:
        if self.counts_cfg is not None:
            counts = {kind: self.counts_cfg[kind] for kind in LAYER_KINDS}
            _check_count_values(counts, depth)
            logger.info(f'HetDPT prune counts (given): attn={counts[ATTN]} '
                        f'act={counts[ACT]}')
            return counts
        if self.map_points is not None:
            fit = fit_map(load_points(self.map_points, depth=depth),
                          self.degrees)
            source = f'points {self.map_points}'
        elif isinstance(self.map_fit, Mapping):
            fit, source = MAPFit.from_dict(self.map_fit), 'the given fit'
        else:
            with open(self.map_fit, encoding='utf-8') as file:
                fit = MAPFit.from_dict(json.load(file))
            source = f'fit {self.map_fit}'
        allocation = allocate(fit, self.budget, depth, self.bounds)
        logger.info(
            f'HetDPT MAP from {source} ({len(fit.points)} points), degree '
            f'by leave-2-out CV:\n{fit.format_table()}\n'
            f'{fit.format_polynomial()}\n'
            f'allocation of budget {self.budget} at depth {depth} (bounds '
            f'{allocation.bounds}):\n{allocation.format_table()}\n'
            f'HetDPT prune counts (MAP): attn={allocation.n_attn} '
            f'act={allocation.n_act}')
        return {ATTN: allocation.n_attn, ACT: allocation.n_act}

    def _resolve_candidates(self, depth: int) -> Dict[str, List[int]]:
        resolved = {}
        for kind in LAYER_KINDS:
            given = (self.candidates_cfg or {}).get(kind)
            if given is None:
                resolved[kind] = list(range(depth))
                continue
            resolved[kind] = list(
                _as_indices(given, depth, f'candidates[{kind!r}]'))
            if len(resolved[kind]) < self.counts[kind]:
                raise ValueError(
                    f'{self.counts[kind]} {kind} layers are to be removed '
                    f'but candidates[{kind!r}] lists only '
                    f'{len(resolved[kind])}: {resolved[kind]}')
        return resolved

    @staticmethod
    def _check_wrapper(model) -> None:
        if isinstance(model, DistributedDataParallel) and \
                not model.find_unused_parameters:
            raise ValueError(
                'HetDPTPruneHook under DistributedDataParallel needs '
                'find_unused_parameters=True (set `find_unused_parameters = '
                'True` in the config, or in model_wrapper_cfg): a closed gate '
                'skips its layer, whose parameters then get no gradient')

    @staticmethod
    def _check_optimizer(optim_wrapper, backbone) -> None:
        scores = {id(gate.hetdpt_score): f'blocks.{i}.{kind} score'
                  for kind in LAYER_KINDS
                  for i, gate in enumerate(backbone.gates(kind))}
        wrappers = optim_wrapper.values() if isinstance(
            optim_wrapper, OptimWrapperDict) else [optim_wrapper]
        seen = set()
        for wrapper in wrappers:
            for group in wrapper.optimizer.param_groups:
                in_group = [p for p in group['params'] if id(p) in scores]
                seen.update(map(id, in_group))
                if in_group and group.get('weight_decay', 0) != 0:
                    raise ValueError(
                        f'the gate scores (hetdpt_score) are optimised with '
                        f'weight_decay={group["weight_decay"]}, which pulls '
                        'the importance scores to 0 and biases the '
                        'selection; add paramwise_cfg=dict(custom_keys='
                        '{"hetdpt_score": dict(decay_mult=0.0)}) to '
                        'optim_wrapper')
        missing = [name for key, name in scores.items() if key not in seen]
        if missing:
            raise ValueError(f'the optimizer does not train the gate scores '
                             f'({missing[:3]}...): they must train with the '
                             'weights')

    # -------------------------------------------------------------- hooks
    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        """Runs before the weights load: close the checkpoint's gates and
        keep its schedule state for before_train."""
        record = read_backbone_checkpoint(checkpoint).record
        if record.form == 'gated':
            self._backbone(runner).set_spec(record.spec)
        state = (checkpoint.get('meta') or {}).get(STATE_KEY)
        self._loaded_state = dict(state) if state is not None else None

    def before_train(self, runner) -> None:
        backbone = self._backbone(runner)
        self._check_wrapper(runner.model)
        self._check_optimizer(runner.optim_wrapper, backbone)
        depth = backbone.depth
        self.counts = self._resolve_counts(depth, runner.logger)
        self.candidates = self._resolve_candidates(depth)
        self.order = removal_order(self.counts)
        iters_per_epoch = len(runner.train_dataloader)
        self.positions = removal_iterations(
            len(self.order), self.schedule, iters_per_epoch, self.by_epoch,
            self.stages, self.prune_epoch) if self.order else []
        if self.positions and self.positions[-1] > runner.max_iters:
            last = self.positions[-1]
            raise ValueError(
                f'the prune schedule is longer than the training run: its '
                f'last removal comes after iteration {last} (epoch '
                f'{math.ceil(last / iters_per_epoch)} at {iters_per_epoch} '
                f'iterations per epoch), but the run has {runner.max_iters} '
                f'iterations ({runner.max_epochs} epochs); shorten stages / '
                'prune_epoch or train longer')
        self._restore_or_start(runner, backbone)
        where = ''
        if self.by_epoch:
            where = ' (' + ', '.join(
                f'epoch {(p - 1) // iters_per_epoch + 1} iter '
                f'{(p - 1) % iters_per_epoch + 1}/{iters_per_epoch}'
                for p in self.positions) + ')'
        runner.logger.info(
            f'HetDPT prune schedule ({self.schedule}): order '
            f'{self.order}, after iterations {self.positions}{where}; '
            f'{len(self.decisions)} of {len(self.order)} done; decisions '
            f'from rank 0\'s scores on {get_world_size()} rank(s)')
        if self.positions and self.positions[-1] == runner.max_iters:
            runner.logger.warning('HetDPT: the last removal is at the end '
                                  'of the run, so nothing fine-tunes after '
                                  'it')

    def _restore_or_start(self, runner, backbone) -> None:
        state, self._loaded_state = self._loaded_state, None
        done = sum(p <= runner.iter for p in self.positions)
        if runner.iter == 0:
            if not backbone.prune_spec.is_dense:
                raise ValueError(
                    f'the gated backbone starts with closed gates '
                    f'({backbone.prune_spec}); HetDPTPruneHook removes '
                    'layers from a dense network: start from dense weights, '
                    'or --resume the pruning run')
            self.decisions = []
            return
        if state is None:
            if done:
                raise ValueError(
                    f'resumed at iteration {runner.iter}, after {done} '
                    'scheduled removals, from a checkpoint without HetDPT '
                    'prune state (was it saved by a run with this hook?)')
            self.decisions = []
            return
        for key in ('counts', 'order', 'positions'):
            if state.get(key) != getattr(self, key):
                raise ValueError(
                    f'the checkpoint was saved by a prune schedule with '
                    f'{key}={state.get(key)}, but this configuration gives '
                    f'{getattr(self, key)}; resume with the same schedule')
        self.decisions = [dict(d) for d in state['decisions']]
        replayed = {kind: sorted(d['index'] for d in self.decisions
                                 if d['kind'] == kind) for kind in LAYER_KINDS}
        spec = backbone.prune_spec
        if len(self.decisions) != done or any(
                replayed[kind] != list(spec.removed(kind))
                for kind in LAYER_KINDS):
            raise ValueError(
                f'inconsistent resume state at iteration {runner.iter}: '
                f'{len(self.decisions)} recorded '
                f'decisions {replayed}, {done} due, gates say {spec}')
        runner.logger.info(f'HetDPT prune state restored: {spec}, '
                           f'{done} of {len(self.order)} removals done')

    def after_train_iter(self, runner, batch_idx: int, data_batch=None,
                         outputs=None) -> None:
        step = runner.iter + 1
        while len(self.decisions) < len(self.positions) and \
                self.positions[len(self.decisions)] == step:
            self._remove_next(runner, step)

    def _remove_next(self, runner, step: int) -> None:
        number = len(self.decisions)
        kind = self.order[number]
        backbone = self._backbone(runner)
        if number == 0:
            self._snapshot_teacher(runner)
        local = backbone.gate_scores(kind).float().clone()
        scores = local.clone()
        broadcast(scores, src=0)
        gates = backbone.gates(kind)
        open_candidates = [i for i in self.candidates[kind]
                           if gates[i].is_open]

        def lowest(values):
            return min(open_candidates, key=lambda i: (float(values[i]), i))

        index = lowest(scores)
        rank_choices = [lowest(g) for g in all_gather(local)]
        closed_before = [i for i, gate in enumerate(gates)
                         if not gate.is_open]
        gates[index].set_open(False)
        decision = dict(
            step=number + 1, iter=step, epoch=runner.epoch + 1, kind=kind,
            index=index, scores=[float(s) for s in scores.cpu()],
            candidates=open_candidates, closed_before=closed_before,
            rank_choices=rank_choices)
        self.decisions.append(decision)
        runner.logger.info(self._format_decision(decision, backbone))

    def _format_decision(self, decision: Mapping, backbone) -> str:
        kind = decision['kind']
        cells = []
        for i, score in enumerate(decision['scores']):
            if i in decision['closed_before']:
                mark = ' (closed)'
            elif i not in decision['candidates']:
                mark = ' (not a candidate)'
            elif i == decision['index']:
                mark = ' <- lowest'
            else:
                mark = ''
            cells.append(f'{i}: {score:+.6f}{mark}')
        epoch = f' (epoch {decision["epoch"]})' if self.by_epoch else ''
        return (
            f'HetDPT prune {decision["step"]}/{len(self.order)} after iter '
            f'{decision["iter"]}{epoch}: close '
            f'{KIND_NAMES[kind]} ({kind}) of block {decision["index"]}, the '
            f'lowest score among the {len(decision["candidates"])} open '
            f'{kind} candidates\n  {kind} scores m: ' + ', '.join(cells) +
            f'\n  each rank\'s own choice: {decision["rank_choices"]}\n'
            f'  spec now: {backbone.prune_spec}')

    @staticmethod
    def _snapshot_teacher(runner) -> None:
        """Self-distillation: freeze a copy of the unpruned model as the
        teacher, if the model wants one (HetDPTDistillClassifier)."""
        model = unwrap_model(runner.model)
        if getattr(model, 'wants_teacher_snapshot', False):
            model.snapshot_teacher()
            runner.logger.info('HetDPT self-distillation: the teacher is a '
                               'frozen copy of the model before the first '
                               'removal')

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        super().before_save_checkpoint(runner, checkpoint)
        checkpoint.setdefault('meta', {})[STATE_KEY] = dict(
            counts=dict(self.counts), order=list(self.order),
            positions=list(self.positions),
            decisions=[dict(d) for d in self.decisions],
            schedule=self.schedule)

    def after_train(self, runner) -> None:
        backbone = self._backbone(runner)
        runner.logger.info(
            f'HetDPT pruning: {len(self.decisions)} of {len(self.order)} '
            f'removals done, final {backbone.prune_spec}')


def _check_count_values(counts: Mapping[str, int], depth: int) -> None:
    for kind, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or \
                not 0 <= value <= depth:
            raise ValueError(f'counts[{kind!r}] must be an integer in '
                             f'0..{depth}, got {value!r}')

