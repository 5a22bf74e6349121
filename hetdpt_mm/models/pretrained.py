"""The ``init_cfg`` checkpoint of a backbone: the structure it gives a
backbone built without one, and loading a pretrained file into a backbone
of a given structure, the file's weights converted to this backbone's form
and spec (``init_cfg``'s ``Pretrained``; docs/user_guides/transfer.md)."""

import os.path as osp
from contextlib import contextmanager
from typing import Dict, Mapping, Optional, Tuple

from mmengine.logging import print_log

from .. import structure
from ..checkpoint.reader import read_backbone_checkpoint
from ..checkpoint.record import EXTRA_STATE_KEY, HetDPTRecord
from ..errors import CheckpointError
from ..spec import PruneSpec
from .gates import GATE_SUFFIXES
from .layers import WHOLE_BRANCH


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

    def _initial_structure(
        self,
        depth: int,
        prune_spec,
        gated: bool,
        merged: Optional[bool],
        defaults: Mapping,
        **semantics,
    ) -> Tuple[PruneSpec, str, Dict[str, str]]:
        """The spec, form and semantics to build
        (:func:`~.structure.initial_structure`); sets
        :attr:`structure_given`."""
        self.structure_given = structure.is_given(prune_spec, gated, merged)
        return structure.initial_structure(
            self.family,
            depth,
            prune_spec,
            gated,
            merged,
            semantics,
            defaults,
            self._checkpoint_record(),
        )

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
                f'init_cfg checkpoint {self.awaited_checkpoint} does not '
                'exist, no weights loaded (docs/user_guides/transfer.md)'
            )

    @contextmanager
    def _converted_load(self):
        self._loading_converted = True
        try:
            yield
        finally:
            self._loading_converted = False

    def load_pretrained(self, source: str, prefix: Optional[str] = None):
        """Load backbone weights from any supported checkpoint, converting
        them to this backbone's form and spec; report what was loaded."""
        loaded = read_backbone_checkpoint(source, prefix=prefix)
        record = loaded.record
        structure.settle(self.record(), True, record, convert=True)
        state = loaded.state
        if record.family != self.family:  # a start: read in our layout
            state = self.codec.canonical_state(state)
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
            raise CheckpointError(
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
