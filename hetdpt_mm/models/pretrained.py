"""The ``init_cfg`` checkpoint of a backbone: the structure it gives a
backbone built without one, and loading a pretrained file into a backbone
of a given structure, the file's weights converted to this backbone's form
and spec (``init_cfg``'s ``Pretrained``; docs/user_guides/transfer.md)."""

import os.path as osp
from contextlib import contextmanager
from typing import Dict, Mapping, Optional, Tuple

from mmengine.logging import print_log

from ..checkpoint.reader import read_backbone_checkpoint
from ..checkpoint.record import EXTRA_STATE_KEY, HetDPTRecord
from ..checkpoint.safe_load import CheckpointError, StateDictMismatch
from ..registry import get_family
from ..spec import LAYER_KINDS, PruneSpec
from .gates import GATE_SUFFIXES
from .layers import SEMANTICS_CHOICES, WHOLE_BRANCH


def absent_local_file(source: str) -> bool:
    return '://' not in source and not osp.exists(osp.expanduser(source))


class PretrainedLoading:
    """Mixin of :class:`~hetdpt_mm.models.family.HetDPTBackbone`."""

    #: Set while :meth:`_load_checked` loads weights it converted itself.
    _loading_converted: bool = False

    # ------------------------------------------- construction (init_cfg)
    def _pretrained_cfg(self) -> Optional[dict]:
        cfgs = (
            self.init_cfg
            if isinstance(self.init_cfg, list)
            else [self.init_cfg]
        )
        for cfg in cfgs:
            if isinstance(cfg, Mapping) and cfg.get('type') == 'Pretrained':
                return dict(cfg)
        return None

    def _checkpoint_record(self) -> Optional[HetDPTRecord]:
        """The structure of the ``init_cfg`` checkpoint (memory-mapped, so
        only its records and key names are touched).  A local file that is
        not there (a config's training start, read at inference time) gives
        none: the weights loaded later bring their own structure."""
        cfg = self._pretrained_cfg()
        if cfg is None:
            return None
        source = cfg['checkpoint']
        if absent_local_file(source):
            print_log(
                f'{type(self).__name__}: init_cfg checkpoint {source} '
                'does not exist; building the configured structure '
                '(weights loaded later set theirs)',
                logger='current',
                level=30,
            )
            return None
        return read_backbone_checkpoint(
            source, prefix=cfg.get('prefix'), mmap=True
        ).record

    def _resolve_structure(
        self,
        depth: int,
        prune_spec,
        gated: bool,
        merged: Optional[bool],
        defaults: Mapping,
        **given_semantics,
    ) -> Tuple[PruneSpec, str, Dict[str, str]]:
        """The spec, form and semantics to build: the constructor's
        arguments where given, else the ``init_cfg`` checkpoint's record,
        else dense, unmerged and the family's ``defaults`` semantics
        (``given_semantics``: the semantics arguments, ``None`` = not
        given).  Sets :attr:`structure_given`."""
        self.structure_given = (
            gated or prune_spec is not None or merged is not None
        )
        record = self._checkpoint_record()
        if prune_spec is None and record is not None and record.act_unknown:
            raise CheckpointError(
                f'{record.source} has no attention weights for blocks '
                f'{list(record.spec.attn_removed)} but no HetDPT record, so '
                "its removed GELUs are unknown (e.g. an authors' stage-2 "
                'checkpoint): pass prune_spec=dict(attn_removed=[...], '
                'act_removed=[...]) to the backbone'
            )
        if record is not None and record.family != self.family:
            raise self._other_family(record.source, record.family)
        if prune_spec is None:
            spec = record.spec if record is not None else PruneSpec(depth)
        else:
            spec = PruneSpec.coerce(prune_spec, depth)
        if spec.depth != depth:
            raise ValueError(
                f'{record.source if record else "the checkpoint"} has '
                f'{spec.depth} blocks but arch has {depth}'
            )
        if gated and merged:
            raise ValueError('a gated (search) backbone cannot be merged')
        if gated:
            form = 'gated'
        elif merged is None:
            form = (
                'merged'
                if record is not None and record.form == 'merged'
                else 'pruned'
            )
        else:
            form = 'merged' if merged else 'pruned'
        semantics = dict(defaults)
        if record is not None:
            semantics.update(record.semantics)
        for name, value in given_semantics.items():
            allowed = SEMANTICS_CHOICES[name]
            if value is not None:
                semantics[name] = value
            if semantics[name] not in allowed:
                raise ValueError(
                    f'{name} must be one of {allowed}, got {semantics[name]!r}'
                )
        return spec, form, semantics

    def _init_from_cfg(self) -> bool:
        """``init_weights`` for what ``init_cfg`` asks: load its checkpoint
        (converted to this structure) or run MMEngine's initialisers.
        ``False`` when the family's own random initialisation is to run: no
        ``init_cfg``, or a checkpoint that is absent, whose weights must
        then come from a whole model loaded later (the toolboxes'
        inference APIs, ``load_from``, ``--resume``)."""
        cfg = self._pretrained_cfg()
        if cfg is not None and absent_local_file(cfg['checkpoint']):
            self.awaited_checkpoint = cfg['checkpoint']
            return False
        if cfg is not None:
            self.load_pretrained(cfg['checkpoint'], cfg.get('prefix'))
            return True
        if self.init_cfg is not None:
            super().init_weights()
            return True
        return False

    def _check_weights_arrived(self) -> None:
        """Called by ``forward``: without the awaited checkpoint's weights
        the network would compute with random ones."""
        if self.awaited_checkpoint is not None:
            raise CheckpointError(
                f'{type(self).__name__}: init_cfg checkpoint '
                f'{self.awaited_checkpoint} does not exist and no weights '
                'were loaded since; make it (docs/user_guides/transfer.md) or '
                'load a whole model checkpoint'
            )

    @contextmanager
    def _converted_load(self):
        self._loading_converted = True
        try:
            yield
        finally:
            self._loading_converted = False

    def _other_family(self, source: str, family: str) -> StateDictMismatch:
        return StateDictMismatch(
            f'{source} holds a {family} backbone, this is {self.family}: '
            f"build type='{get_family(family).__name__}'"
        )

    def load_pretrained(self, source: str, prefix: Optional[str] = None):
        """Load backbone weights from any supported checkpoint, converting
        them to this backbone's form and spec; report what was loaded."""
        loaded = read_backbone_checkpoint(source, prefix=prefix)
        record = loaded.record
        if record.family != self.family:
            raise self._other_family(source, record.family)
        self._check_compatible(record.spec, source)
        state = loaded.state
        if record.form == 'gated':
            # A search checkpoint's weights are those of its own spec.
            state = self.convert_weights(
                state, record.spec, 'pruned', record.semantics
            )
        # Gates follow this backbone's spec, never a pretrained file.
        state = {k: v for k, v in state.items() if not self._is_gate_key(k)}
        state = self.convert_weights(
            state, self.prune_spec, self.form, self.semantics
        )
        self._load_checked(self._adapt_pretrained(state), source)

    @classmethod
    def convert_weights(
        cls, state: Mapping, spec: PruneSpec, form: str, semantics: Mapping
    ) -> Dict:
        """The family's ``convert_state_dict`` to a network of ``semantics``:
        only whole-branch removal changes which tensors a network holds, so
        only then are the semantics passed (families without it take
        ``(state, spec, form)``)."""
        if semantics.get('removed_attn_output') != WHOLE_BRANCH:
            return cls.codec.convert_state_dict(state, spec, form)
        return cls.codec.convert_state_dict(
            state, spec, form, semantics=semantics
        )

    @staticmethod
    def _is_gate_key(key: str) -> bool:
        return key.endswith(GATE_SUFFIXES)

    def _check_compatible(self, source_spec: PruneSpec, source: str):
        """Weights pruned further than this backbone cannot restore the
        layers they lost; pruning further than the checkpoint is fine."""
        if source_spec.depth != self.depth:
            raise StateDictMismatch(
                f'{source} has {source_spec.depth} blocks, the backbone '
                f'{self.depth}'
            )
        spec = self.prune_spec
        for kind in LAYER_KINDS:
            lost = sorted(
                set(source_spec.removed(kind)) - set(spec.removed(kind))
            )
            if lost:
                raise StateDictMismatch(
                    f'{source} was pruned with {kind} layers {lost} removed, '
                    f'but this backbone keeps them: the spec does not match '
                    f'the checkpoint (checkpoint {source_spec}, backbone '
                    f'{spec})'
                )

    def _closed_gate_keys(self) -> set:
        """State-dict keys of layers behind closed gates (never run)."""
        if self.form != 'gated':
            return set()
        names = {id(m): name for name, m in self.named_modules()}
        return {
            f'{names[id(gate)]}.{key}'
            for kind in self.REMOVABLE_KINDS
            for gate in self.gates(kind)
            if not gate.is_open
            for key in gate.state_dict()
            if not self._is_gate_key(key)
        }

    def _load_checked(self, state: Mapping, source: str) -> None:
        own = {
            k: v for k, v in self.state_dict().items() if k != EXTRA_STATE_KEY
        }
        mismatched = [
            f'{k}: checkpoint {tuple(v.shape)} vs backbone '
            f'{tuple(own[k].shape)}'
            for k, v in state.items()
            if k in own and v.shape != own[k].shape
        ]
        if mismatched:
            raise StateDictMismatch(
                f'{source}: shape mismatch for ' + '; '.join(mismatched)
            )
        unexpected = sorted(k for k in state if k not in own)
        expected = [k for k in own if not self._is_gate_key(k)]
        closed = self._closed_gate_keys()
        missing = [k for k in expected if k not in state and k not in closed]
        unused = [k for k in expected if k not in state and k in closed]
        with self._converted_load():
            self.load_state_dict(state, strict=False)
        loaded = len(expected) - len(missing) - len(unused)
        lines = [
            f'{type(self).__name__}: loaded {loaded}/{len(expected)} '
            f'backbone tensors from {source} ({self.form}, '
            f'{self.prune_spec})'
        ]
        if missing:
            lines.append(f'  missing in checkpoint (left at init): {missing}')
        if unused:
            lines.append(
                f'  not in checkpoint, behind closed gates: '
                f'{len(unused)} tensors'
            )
        if unexpected:
            lines.append(
                f'  ignored (not part of this backbone): {unexpected}'
            )
        print_log(
            '\n'.join(lines), logger='current', level=30 if missing else 20
        )
