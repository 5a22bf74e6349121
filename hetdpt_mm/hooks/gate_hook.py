"""The shared base of the hooks that remove layers by closing gates
(:class:`~.prune_hook.HetDPTPruneHook`,
:class:`~.map_collect_hook.MAPCollectHook`).

:class:`GateHookBase` owns what both need: finding the one gated backbone,
the selection policy and its rank-0 decision broadcast to every rank,
closing the chosen gate, the hook's versioned state in
``checkpoint['meta'][STATE_KEY]`` and the checks of a resume.  Once found
(:func:`~hetdpt_mm.models.lookup.find_hetdpt_backbones`), the backbone is
used only through its family interface (``depth``, ``prune_spec``, ``gates``,
``gate_scores``, ``set_spec``, ``form``).
"""

import copy
from typing import Dict, Iterable, List, Mapping, Optional, Tuple, Union

from mmengine.dist import (
    all_gather_object,
    broadcast_object_list,
    is_main_process,
)
from torch.nn.parallel import DistributedDataParallel

from ..errors import UsageError
from ..models.lookup import find_hetdpt_backbones
from ..pruning.selection import Decision, SelectionPolicy, build_selection
from ..sharding import full_params, is_fsdp
from ..spec import FFN, KIND_NAMES, PruneSpec
from .spec_meta_hook import HetDPTMetaHook

__all__ = [
    'KIND_NAMES',
    'removable_blocks',
    'GateHookBase',
]


def removable_blocks(spec: PruneSpec, kind: str) -> List[int]:
    """The blocks whose ``kind`` layer can go next: still present, and
    allowed beside the block's other removals (a block loses its GELU or
    its FFN branch, not both, and keeps one of its two branches)."""
    excluded = set(spec.removed(kind)) | set(spec.ffn_removed)
    if kind == FFN:
        excluded |= set(spec.attn_removed) | set(spec.act_removed)
    return [index for index in range(spec.depth) if index not in excluded]


class GateHookBase(HetDPTMetaHook):
    """Base of the hooks that close gates of a gated backbone.

    Subclasses set :attr:`STATE_KEY` and :attr:`STATE_VERSION`, return their
    state from :meth:`state_dict` (saved with ``version`` at every
    checkpoint) and read a resumed one with :meth:`resumed_state`, which
    upgrades older versions with :meth:`upgrade_state`.  Being a
    :class:`HetDPTMetaHook`, they also write the backbone's spec record.

    Args:
        selection: the policy choosing the layer to remove: a
            :class:`~hetdpt_mm.pruning.selection.SelectionPolicy`, a config
            dict (``dict(type='LowestGateScore')``) or a registered name.
    """

    #: Key of the hook's state in ``checkpoint['meta']``.
    STATE_KEY: str
    #: Layout version of that state.  A state without ``version`` is
    #: version 1 (HetDPTPruneHook wrote none at first).
    STATE_VERSION: int

    def __init__(self, selection: Union[str, Mapping, SelectionPolicy]):
        self.selection = build_selection(selection)
        self._loaded_state: Optional[Dict] = None
        self._model = None

    def __repr__(self) -> str:
        # MMEngine appends the hook to a TypeError a hook raises.
        return type(self).__name__

    # ------------------------------------------------------------ backbone
    def backbone(self, runner):
        """The model's one gated backbone (a distillation teacher's are not
        counted)."""
        found = [
            (prefix, backbone.form, backbone)
            for prefix, backbone in find_hetdpt_backbones(runner.model)
        ]
        gated = [backbone for _, form, backbone in found if form == 'gated']
        if len(gated) != 1:
            # A config asking for gated=True gets the structure of a merged
            # or pruned file it loads (load_from, init_cfg).
            described = (
                ', '.join(
                    f'{type(b).__name__} in the {form} form at {prefix!r}'
                    for prefix, form, b in found
                )
                or 'none'
            )
            raise UsageError(
                f'{self} needs one gated=True backbone, found: {described}'
            )
        return gated[0]

    def check_gates(self, backbone, kinds: Iterable[str], asked: str) -> None:
        """Raise :class:`UsageError` unless ``backbone`` gates every
        one of ``kinds`` (``asked``: what asks for them, for the message)."""
        for kind in kinds:
            gated = kind in backbone.REMOVABLE_KINDS and backbone.gates(kind)
            if not gated:
                raise UsageError(
                    f'{asked}: no {kind} gates (docs/user_guides/dinov2.md)'
                )

    def check_wrapper(self, runner) -> None:
        """Closed gates leave parameters without gradients: DDP must expect
        unused parameters."""
        model = runner.model
        if (
            isinstance(model, DistributedDataParallel)
            and not model.find_unused_parameters
        ):
            raise ValueError(
                f'{self} under DDP needs find_unused_parameters=True'
            )

    # ----------------------------------------------------------- selection
    @property
    def selects_here(self) -> bool:
        """Whether this rank runs the policy (rank 0 always)."""
        return self.selection.runs_on_every_rank or is_main_process()

    def setup_selection(self, runner, backbone) -> None:
        """The policy's checks and preparation, before training."""
        # The wrapped model: under FSDP every rank gathers the full
        # parameters around each selection (``select_and_close``).
        self._model = runner.model
        if is_fsdp(runner.model) and not self.selection.sharding_safe:
            raise ValueError(
                f'under FSDP use LowestGateScore, not {self.selection.name}'
            )
        if self.selects_here:
            self.selection.setup(runner, backbone)

    def select_and_close(
        self, backbone, kind: str, candidates: List[int]
    ) -> Tuple[Decision, Optional[List[int]]]:
        """Rank 0's decision among ``candidates`` (open ``kind`` layers),
        applied on every rank, so all ranks close the same gate; also each
        rank's own choice when the policy runs on every rank (else None)."""
        # Under FSDP each rank holds a shard of the scores: every rank
        # gathers them whole (a collective) before anyone selects.
        model = self._model if self._model is not None else backbone
        with full_params(model):
            own = (
                self.selection.select(backbone, kind, candidates)
                if self.selects_here
                else None
            )
        shared = [own]
        broadcast_object_list(shared)
        decision = shared[0]
        rank_choices = (
            [d.index for d in all_gather_object(own)]
            if self.selection.runs_on_every_rank
            else None
        )
        backbone.set_spec(
            backbone.prune_spec.with_removed(decision.kind, decision.index)
        )
        return decision, rank_choices

    # --------------------------------------------------------------- state
    def state_dict(self) -> Optional[Dict]:
        """The state to save (without ``version``), None for nothing yet."""
        raise NotImplementedError

    def upgrade_state(self, state: Dict, version: int) -> Dict:
        """``state`` of layout ``version`` in layout ``version + 1``."""
        raise NotImplementedError

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        super().before_save_checkpoint(runner, checkpoint)
        state = self.state_dict()
        if state is not None:
            checkpoint.setdefault('meta', {})[self.STATE_KEY] = dict(
                copy.deepcopy(state), version=self.STATE_VERSION
            )

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        """Runs before the runner says whether it resumes: keep the
        hook's state for :meth:`resumed_state` (the gates load with the
        weights: they are buffers)."""
        state = (checkpoint.get('meta') or {}).get(self.STATE_KEY)
        self._loaded_state = (
            copy.deepcopy(dict(state)) if state is not None else None
        )

    @property
    def has_loaded_state(self) -> bool:
        return self._loaded_state is not None

    def resumed_state(self) -> Optional[Dict]:
        """The loaded checkpoint's state in the current layout (without
        ``version``), or None when it had none; consumed by the call."""
        state, self._loaded_state = self._loaded_state, None
        if state is None:
            return None
        version = state.pop('version', 1)
        if version not in range(1, self.STATE_VERSION + 1):
            raise ValueError(f'{self}: unsupported state version {version!r}')
        for older in range(version, self.STATE_VERSION):
            state = self.upgrade_state(state, older)
        return state

    # -------------------------------------------------------------- resume
    def check_resumed_settings(self, state: Mapping, current: Mapping) -> None:
        """The settings in ``current`` must equal those the checkpoint was
        saved with."""
        for key, value in current.items():
            if state.get(key) != value:
                raise ValueError(
                    f'resume with {key}={state.get(key)!r}, not {value!r}'
                )

    def check_resumed_gates(
        self, backbone, start: PruneSpec, removals: Iterable[Tuple[str, int]]
    ) -> None:
        """The gates loaded from the checkpoint must be ``start`` with the
        recorded ``removals`` applied."""
        expected = start
        for kind, index in removals:
            expected = expected.with_removed(kind, index)
        if backbone.prune_spec != expected:
            raise ValueError(
                f'gates {backbone.prune_spec} differ from the state {expected}'
            )
