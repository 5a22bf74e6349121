"""Layer selection policies: which layer of one kind a gate-owning hook
removes next.

A policy compares layers of one kind only (docs/method.md §2-3): the hook gives
it the kind and the open candidates of that kind, it returns a
:class:`Decision`.  Policies read the backbone through its family interface
(``depth``, ``prune_spec``, ``gates(kind)``, ``gate_scores(kind)``,
``set_spec``), so any gated backbone family works with every policy.

Registered in :data:`~hetdpt_mm.registry.SELECTION_POLICIES`, so a hook's
``selection=dict(type=..., ...)`` picks one:

* :class:`LowestGateScore`: the lowest learned gate score ``m``
  (``HetDPTPruneHook``'s default, docs/method.md §3);
* :class:`TransferEntropy`: the smallest change of the class-feature entropy
  (``MAPCollectHook``'s default, docs/method.md §2, :mod:`.te`).
"""

import abc
import copy
from dataclasses import dataclass
from typing import List, Mapping, Optional, Sequence, Tuple, Union

import torch
from mmengine.dataset import pseudo_collate
from mmengine.optim import OptimWrapperDict
from mmengine.registry import DATASETS
from torch.utils.data import DataLoader, Subset

from ..datasets.subset import select_subset
from ..registry import SELECTION_POLICIES
from ..sharding import unwrap_model
from ..spec import positive_int
from .transfer_entropy import te_select

__all__ = [
    'Decision',
    'SelectionPolicy',
    'LowestGateScore',
    'TransferEntropy',
    'build_selection',
]


@dataclass(frozen=True)
class Decision:
    """The layer a policy removes, with what it based that on.

    Attributes:
        kind: the layer kind.
        index: the block whose ``kind`` layer goes.
        scores: the policy's score of every block (``None`` where it did not
            score one), for the record.
        table: the scores as the policy explains them, for the log.
    """

    kind: str
    index: int
    scores: Tuple[Optional[float], ...]
    table: str


class SelectionPolicy(abc.ABC):
    """Base of the selection policies."""

    #: True when :meth:`select` is cheap and reads only state that every
    #: rank holds identically (e.g. DDP's all-reduced gate scores): every
    #: rank then runs it and the hooks record whether the ranks agree.
    #: False: only rank 0 runs it (and :meth:`setup`).
    runs_on_every_rank = False
    #: True when :meth:`select` only reads parameters, so it runs under
    #: sharded training (FSDP) inside a full-parameter gather on every
    #: rank; False: the hooks refuse the policy under FSDP.
    sharding_safe = False

    @property
    def name(self) -> str:
        """Recorded in the hooks' state: a resume must select the same way."""
        return type(self).__name__

    def setup(self, runner, backbone) -> None:  # noqa: B027  optional
        """Check that the run suits the policy and prepare what
        :meth:`select` needs; called before training."""

    @abc.abstractmethod
    def select(
        self, backbone, kind: str, candidates: Sequence[int]
    ) -> Decision:
        """Choose one of ``candidates``: open ``kind`` layers, at least
        one."""


@SELECTION_POLICIES.register_module()
class LowestGateScore(SelectionPolicy):
    """The candidate with the lowest learned gate score ``m``; ties go to the
    lower block index.  The scores must train with the weights, without
    weight decay (checked in :meth:`setup`)."""

    runs_on_every_rank = True
    sharding_safe = True

    def setup(self, runner, backbone) -> None:
        scores = {
            id(gate.hetdpt_score): f'blocks.{i}.{kind} score'
            for kind in backbone.REMOVABLE_KINDS
            for i, gate in enumerate(backbone.gates(kind))
        }
        optim_wrapper = runner.optim_wrapper
        wrappers = (
            optim_wrapper.values()
            if isinstance(optim_wrapper, OptimWrapperDict)
            else [optim_wrapper]
        )
        seen = set()
        for wrapper in wrappers:
            for group in wrapper.optimizer.param_groups:
                in_group = [p for p in group['params'] if id(p) in scores]
                seen.update(map(id, in_group))
                if in_group and group.get('weight_decay', 0) != 0:
                    raise ValueError(
                        'gate scores (hetdpt_score) have weight_decay: add '
                        'custom_keys={"hetdpt_score": dict(decay_mult=0.0)}'
                    )
        missing = [name for key, name in scores.items() if key not in seen]
        if missing:
            raise ValueError(f'the optimizer does not train {missing[:3]}')

    def select(
        self, backbone, kind: str, candidates: Sequence[int]
    ) -> Decision:
        scores = tuple(backbone.gate_scores(kind).float().tolist())
        index = min(candidates, key=lambda i: (scores[i], i))
        closed = backbone.prune_spec.removed(kind)
        cells = []
        for i, score in enumerate(scores):
            if i in closed:
                mark = ' (closed)'
            elif i not in candidates:
                mark = ' (not a candidate)'
            elif i == index:
                mark = ' <- lowest'
            else:
                mark = ''
            cells.append(f'{i}: {score:+.6f}{mark}')
        table = (
            f'the lowest score among the {len(candidates)} open {kind} '
            f'candidates; {kind} scores m: ' + ', '.join(cells)
        )
        return Decision(kind, index, scores, table)


@SELECTION_POLICIES.register_module()
class TransferEntropy(SelectionPolicy):
    """The candidate whose removal changes the entropy of the final class
    features least (:func:`~.transfer_entropy.te_select`), on a fixed
    calibration set.

    Args:
        calib_images: number of training images the score is computed on (a
            fixed seeded subset, :func:`select_subset`).
        calib_batch_size: batch size of the calibration forward passes.
        calib_seed: seed of the calibration subset.
        calib_dataset: dataset config for calibration; default: the training
            dataset config with the validation pipeline (deterministic).
    """

    def __init__(
        self,
        calib_images: int = 256,
        calib_batch_size: int = 64,
        calib_seed: int = 0,
        calib_dataset: Optional[Mapping] = None,
    ) -> None:
        self.calib_images = positive_int(calib_images, 'calib_images')
        self.calib_batch_size = positive_int(
            calib_batch_size, 'calib_batch_size'
        )
        self.calib_seed = int(calib_seed)
        self.calib_dataset = calib_dataset
        self._calib_set = None
        self._preprocessor = None
        self._batches: Optional[List[torch.Tensor]] = None

    def setup(self, runner, backbone) -> None:
        self._calib_set = self._calibration_set(runner)
        self._preprocessor = unwrap_model(runner.model).data_preprocessor
        self._batches = None

    def _calibration_set(self, runner) -> Subset:
        cfg = self.calib_dataset
        if cfg is None:
            train = runner.cfg.get('train_dataloader') or {}
            val = runner.cfg.get('val_dataloader') or {}
            train_set, val_set = train.get('dataset'), val.get('dataset')
            if not (
                isinstance(train_set, dict)
                and 'pipeline' in train_set
                and isinstance(val_set, dict)
                and 'pipeline' in val_set
            ):
                raise ValueError(
                    'cannot derive the calibration set: give calib_dataset'
                )
            cfg = copy.deepcopy(train_set)
            cfg['pipeline'] = copy.deepcopy(val_set['pipeline'])
        dataset = DATASETS.build(copy.deepcopy(dict(cfg)))
        if self.calib_images > len(dataset):
            raise ValueError(
                f'calib_images={self.calib_images} exceeds the dataset'
            )
        return Subset(
            dataset,
            select_subset(len(dataset), self.calib_images, self.calib_seed),
        )

    def _calibration_batches(self) -> List[torch.Tensor]:
        """Preprocessed calibration images, loaded at the first selection
        and kept on the CPU (every trial of every selection reuses them)."""
        if self._batches is None:
            loader = DataLoader(
                self._calib_set,
                batch_size=self.calib_batch_size,
                shuffle=False,
                num_workers=0,
                collate_fn=pseudo_collate,
            )
            with torch.no_grad():
                self._batches = [
                    self._preprocessor(data, False)['inputs'].cpu()
                    for data in loader
                ]
        return self._batches

    def select(
        self, backbone, kind: str, candidates: Sequence[int]
    ) -> Decision:
        selection = te_select(
            backbone, self._calibration_batches(), kind, candidates
        )
        scores: List[Optional[float]] = [None] * backbone.depth
        for trial in selection.candidates:
            scores[trial.index] = trial.score
        return Decision(
            kind,
            selection.chosen.index,
            tuple(scores),
            selection.format_table(),
        )


def build_selection(
    selection: Union[str, Mapping, SelectionPolicy],
) -> SelectionPolicy:
    """A policy from a built one, a config dict or a registered name."""
    if isinstance(selection, SelectionPolicy):
        return selection
    if isinstance(selection, str):
        selection = dict(type=selection)
    return SELECTION_POLICIES.build(dict(selection))
