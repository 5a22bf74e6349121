"""The family interface: what the hooks, the merge, the cost model and the
benchmark need from a backbone whose layers HetDPT removes.

A family is one :class:`HetDPTBackbone` subclass and its codec
(:class:`FamilyCodec`) in their own folder, registered by ``family`` so that
a checkpoint's record finds the class that rebuilds it; adding one touches
nothing in the hooks or tools (docs/advanced/adding_a_family.md).  The
record travels in every state dict, so every loading path rebuilds the
structure before it loads the tensors."""

from typing import (
    ClassVar,
    Dict,
    FrozenSet,
    List,
    Mapping,
    Optional,
    Protocol,
    Tuple,
)

import torch
import torch.nn as nn
from mmengine.logging import print_log
from mmengine.model import BaseModule

from .. import structure
from ..checkpoint.record import (
    EXTRA_STATE_KEY,
    HetDPTRecord,
    RecordInStateDict,
    decode_record,
    with_record,
)
from ..checkpoint.safe_load import source_of
from ..errors import CheckpointError
from ..registry import FAMILIES
from ..spec import (
    ACT,
    ATTN,
    FFN,
    LAYER_KINDS,
    SEMANTICS_CHOICES,
    WHOLE_BRANCH,
    PruneSpec,
)
from .layers import gated_ffn
from .pretrained import PretrainedLoading


class FamilyCodec(Protocol):
    """What a family knows of its tensors apart from the module (timm's
    ``checkpoint_filter_fn`` style): each family's ``codec.py`` module
    provides these functions, and callers reach them as ``family.codec``."""

    def recognizes(self, state: Mapping) -> bool:
        """Whether ``state`` holds the family's weights (any layout)."""

    def canonical_state(self, state: Mapping) -> Mapping:
        """``state`` (any layout :meth:`recognizes` accepts) in the family's
        own layout, which every other function reads."""

    def record_from_tensors(self, state: Mapping, source: str) -> HetDPTRecord:
        """The record that the key names of ``state`` imply."""

    def check_record(self, record: HetDPTRecord, state: Mapping) -> None:
        """Raise :class:`CheckpointError` when the tensors contradict the
        record (the one check every reader runs)."""

    def convert_state_dict(
        self, state: Mapping, spec: PruneSpec, form: str
    ) -> Dict:
        """The family's one tensor surgery; a family with whole-branch
        removal also takes ``semantics`` (see ``convert_weights``)."""

    def build_args_from_tensors(
        self, state: Mapping, arch: Optional[Mapping] = None
    ) -> Dict:
        """Constructor arguments of a backbone holding ``state``."""

    def layer_macs(
        self, arch: Mapping, img_size, attention_products: bool = True
    ) -> Dict[str, object]:
        """Multiply-accumulates of the network at ``img_size``: lists by
        block index of its attention sublayer (``'attn'``; with its two
        token x token products unless ``attention_products`` is false),
        FFN (``'ffn'``) and merged FFN (``'merged_ffn'``), and the number
        for everything else (``'rest'``).  Blocks of a family may differ
        (Swin's stages)."""

    def arch_settings(self, arch) -> Dict:
        """``arch`` (a preset name or dict) with every setting spelled out."""

    def arch_depth(self, arch) -> int:
        """Blocks of ``arch`` (over all stages), which specs index."""


class HetDPTBackbone(PretrainedLoading, RecordInStateDict, BaseModule):
    """Base class of prunable backbones; see the module docstring."""

    family: ClassVar[Optional[str]] = None
    #: The family's codec (:class:`FamilyCodec`, usually its codec module).
    codec: ClassVar[FamilyCodec]
    #: The constructor arguments a record's ``arch`` may give: those of
    #: :meth:`build_args` (some only where not the default), which fix the
    #: structure.  A record never names how to load (``pretrained``,
    #: ``init_cfg``, paths, URLs).
    RECORD_ARCH_KEYS: ClassVar[FrozenSet[str]] = frozenset()
    #: Arguments of a small network (the demo's size) for the contract test.
    SMALL_ARGS: ClassVar[Mapping] = {}
    #: The ``arch`` tools build when none is given (``tools/benchmark.py``).
    DEFAULT_ARCH: ClassVar = None
    #: Whether HetDPT+ width pruning (``tools/prune_width.py``) supports it.
    WIDTH_PRUNABLE: ClassVar[bool] = False
    #: The layer kinds the family removes, which ``gates`` answers.
    REMOVABLE_KINDS: ClassVar[Tuple[str, ...]] = (ATTN, ACT)
    #: Families whose dense weights start this one (ViTDet from MAE's ViT).
    STARTS_FROM: ClassVar[Tuple[str, ...]] = ()
    #: Whether it takes ``token_merge`` (docs/user_guides/token_merge.md).
    MERGES_TOKENS: ClassVar[bool] = False
    #: Toolbox -> its stock backbone's defaults that differ from ours.
    TOOLBOX_DEFAULTS: ClassVar[Mapping[str, Mapping]] = {}
    #: Whether a given structure (spec, form) must fit the loaded weights.
    structure_given: bool = False
    #: The ``init_cfg`` checkpoint absent at ``init_weights`` (weights due).
    awaited_checkpoint: Optional[str] = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get('family'):
            FAMILIES[cls.family] = cls

    @classmethod
    def toolbox_args(cls, toolbox: str, args: Mapping) -> Dict:
        """``args`` as ``toolbox``'s registry passes them to the family."""
        return {**cls.TOOLBOX_DEFAULTS[toolbox], **args}

    @classmethod
    def sized_args(cls, img_size) -> Dict:
        """Constructor arguments that size the network for inputs of
        ``img_size``; the default: none (any size works)."""
        return {}

    @classmethod
    def from_record(cls, record: HetDPTRecord, **kwargs) -> 'HetDPTBackbone':
        """A backbone with the exact structure of ``record``
        (:func:`hetdpt_mm.structure.build`)."""
        return structure.build(record, **kwargs)

    # ------------------------------------------------ the record, verified
    @classmethod
    def validate_record(cls, record: HetDPTRecord) -> None:
        """Raise :class:`CheckpointError` unless the record's ``arch`` and
        semantics are structural arguments of this family."""
        unknown = sorted(set(record.arch or ()) - cls.RECORD_ARCH_KEYS)
        unknown += [
            f'{name}={value!r}'
            for name, value in record.semantics.items()
            if value not in SEMANTICS_CHOICES.get(name, ())
        ]
        if unknown:
            raise CheckpointError(f'{record.source}: {unknown} not structural')

    @classmethod
    def verify_record(cls, record: HetDPTRecord, state: Mapping) -> None:
        structure.verify(record, state)

    @staticmethod
    def _freeze(modules) -> None:
        """Eval mode and no gradients (frozen stages)."""
        for module in modules:
            module.eval()
            module.requires_grad_(False)

    # ------------------------------------------------ instance: structure
    # Subclasses set self.form, self.semantics and self._spec and build
    # their modules with _build_structure().
    form: str
    semantics: Dict[str, str]

    _build_args: Dict

    @property
    def depth(self) -> int:
        raise NotImplementedError

    def all_blocks(self) -> List[nn.Module]:
        """Every block, by global index."""
        raise NotImplementedError

    def gates(self, kind: str) -> List[nn.Module]:
        """The gated layers of one of :attr:`REMOVABLE_KINDS` by block
        index (gated form only; none where the network gates none)."""
        if self.form != 'gated':
            raise RuntimeError(f'a {self.form} backbone has no gates')
        if kind not in self.REMOVABLE_KINDS:
            raise ValueError(f'unknown layer kind {kind!r}')
        blocks = self.all_blocks()
        if kind == ATTN:
            return [block.attn for block in blocks]
        if kind == ACT:
            return [block.mlp.act for block in blocks]
        # FFN branches are gated only under whole-branch removal.
        gates = [gated_ffn(block) for block in blocks]
        return [] if None in gates else gates

    def build_args(self) -> Dict:
        """Constructor arguments that fix the shapes of this network."""
        return dict(self._build_args)

    def layer_types(self) -> Dict[str, Tuple[str, List[int]]]:
        """The layer types MAP and the prune hook count, by name: a spec
        kind and its blocks.  Each of :attr:`REMOVABLE_KINDS` over every
        block, and the partitions of a kind a family adds (the windowed
        ViTs' ``attn_window`` and ``attn_global``), which specs and records
        never name."""
        blocks = list(range(self.depth))
        return {kind: (kind, blocks) for kind in self.REMOVABLE_KINDS}

    def _frozen_modules(self) -> List[nn.Module]:
        """The modules ``frozen_stages`` keeps in eval mode."""
        return []

    def train(self, mode: bool = True):
        super().train(mode)
        if mode:
            for module in self._frozen_modules():
                module.eval()
        return self

    def _build_structure(
        self, spec: PruneSpec, form: str, semantics: Mapping
    ) -> None:
        """(Re)build the modules that depend on the spec, form and
        semantics (starting with :meth:`_set_structure`)."""
        raise NotImplementedError

    def _set_structure(
        self, spec: PruneSpec, form: str, semantics: Mapping
    ) -> Dict:
        """Keep the spec, form and semantics; returns a copy of the block
        arguments to build the blocks from."""
        whole_branch = semantics['removed_attn_output'] == WHOLE_BRANCH
        if FFN not in self.REMOVABLE_KINDS and (
            whole_branch or spec.ffn_removed
        ):
            raise ValueError('whole-branch removal is for plain ViTs')
        self.form = form
        self.semantics = dict(semantics)
        self._spec = spec  # fixed for pruned/merged; gates own it if gated
        return dict(self._block_args)

    def _adapt_pretrained(self, state: Dict) -> Dict:
        """Family-specific adaptation of loaded tensors (e.g. resizing a
        position embedding); the default keeps them."""
        return state

    @property
    def prune_spec(self) -> PruneSpec:
        """The current structure (read from the gates in the gated form)."""
        if self.form != 'gated':
            return self._spec
        closed = {
            kind: [
                i
                for i, gate in enumerate(self.gates(kind))
                if not gate.is_open
            ]
            for kind in self.REMOVABLE_KINDS
        }
        return PruneSpec(
            self.depth,
            closed[ATTN],
            closed[ACT],
            ffn_removed=closed.get(FFN, ()),
        )

    def gate_scores(self, kind: str) -> torch.Tensor:
        """Learned importance ``m`` of every layer of ``kind`` (detached)."""
        return torch.stack(
            [gate.hetdpt_score.detach() for gate in self.gates(kind)]
        )

    def set_spec(self, spec) -> None:
        """Open and close the gates to match ``spec`` (gated form only)."""
        spec = PruneSpec.coerce(spec, self.depth)
        for kind in LAYER_KINDS:
            gates = self.gates(kind) if kind in self.REMOVABLE_KINDS else []
            if spec.removed(kind) and not gates:
                raise ValueError(f'no {kind} gates to close for {spec}')
            for index, gate in enumerate(gates):
                gate.set_open(not spec.is_removed(kind, index))

    def record(self, form: Optional[str] = None) -> HetDPTRecord:
        """This backbone's record (``form`` overrides the stored form, e.g.
        ``'merged'`` for the file a merge will write)."""
        return HetDPTRecord(
            spec=self.prune_spec,
            form=form or self.form,
            family=self.family,
            arch=self.build_args(),
            semantics=dict(self.semantics),
        )

    def to_merged(self) -> 'HetDPTBackbone':
        """A new merged-form backbone computing the same function."""
        merged = structure.build(self.record('merged'), **self._output_args())
        state = self.convert_weights(
            self.state_dict(), self.prune_spec, 'merged', self.semantics
        )
        merged.load_state_dict(with_record(state, merged.record()))
        return merged.train(self.training)

    def _output_args(self) -> Dict:
        """Constructor arguments that choose outputs, not shapes."""
        return {}

    def class_feature(self, inputs: torch.Tensor) -> torch.Tensor:
        """The feature of ``inputs`` a classification head reads, as the
        family's classifiers compute it (MAP collection's transfer-entropy
        score measures it).  The default: the last output, the first of a
        tuple (a ViT's ``(cls, dist)``)."""
        output = self(inputs)[-1]
        if isinstance(output, (tuple, list)):
            output = output[0]
        return output

    # ------------------------------------------- the record in state dicts
    def state_record(self) -> Dict:
        return self.record().to_dict(with_prefix=False)

    def set_extra_state(self, state) -> None:
        # _load_from_state_dict has verified and adopted the record before
        # torch hands it over here.
        pass

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        own = {
            k[len(prefix) :]: v
            for k, v in state_dict.items()
            if k.startswith(prefix)
        }
        if own and not self._loading_converted:
            loaded, tensors = self._read_loaded(own)
            if loaded is not None:
                target = structure.settle(
                    self.record(), self.structure_given, loaded, tensors
                )
                self._rebuild(target)
            if tensors is not own:  # another layout: a stock checkpoint
                for key in own:
                    del state_dict[prefix + key]
                state_dict.update(
                    (prefix + k, v)
                    for k, v in self._adapt_pretrained(dict(tensors)).items()
                )
            self.awaited_checkpoint = None
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _read_loaded(
        self, own: Mapping
    ) -> Tuple[Optional[HetDPTRecord], Mapping]:
        """The record of loaded weights (relative to this backbone: written,
        else inferred from the tensors; ``None`` for tensors of no family)
        and the tensors, in the family's layout where they were in another
        one."""
        if EXTRA_STATE_KEY in own:
            source = source_of(own[EXTRA_STATE_KEY]) or 'the loaded state dict'
            record = HetDPTRecord.from_dict(
                decode_record(own[EXTRA_STATE_KEY], source),
                source,
                origin='extra_state',
            )
            structure.verify(record, own)
            return record, own
        record, tensors = structure.read_tensors(own, 'the loaded state dict')
        if record is not None:
            structure.verify(record, tensors)
        return record, own if set(tensors) == set(own) else tensors

    def _rebuild(self, record: HetDPTRecord) -> None:
        """Rebuild as ``record``'s structure where it is not this one's."""
        mine = self.record()
        if record.same_structure(mine):
            return
        print_log(
            f'{type(self).__name__}: rebuilding as {record.describe()} to '
            f'load weights of that structure (was {mine.describe()})',
            logger='current',
        )
        self._build_structure(record.spec, record.form, dict(record.semantics))
        self.train(self.training)  # new modules start in training mode
