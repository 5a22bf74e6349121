"""A second backbone family written only against the family interface
(hetdpt_mm/models/family.py): a 4-block token mixer whose FFN is named
``ffn.inp`` / ``ffn.act`` / ``ffn.out`` (merged: ``ffn.fused``) and whose
attention is ``mixer``.  The unchanged prune hook prunes it, the unchanged
merge merges it, and loading its state dict rebuilds its structure."""

import re
from collections import OrderedDict
from typing import Dict, Mapping, Optional

import pytest
import torch
import torch.nn as nn
from helpers import fake_runner, randomize_
from timm.layers import Attention

from hetdpt_mm.checkpoint.reader import read_backbone_checkpoint
from hetdpt_mm.errors import CheckpointError
from hetdpt_mm.hooks import HetDPTMetaHook, HetDPTPruneHook
from hetdpt_mm.merge import merge_checkpoint
from hetdpt_mm.models import FAMILIES, HetDPTBackbone, merge_ffn_weights
from hetdpt_mm.models.gates import GATE_SUFFIXES, GatedAttention, GatedGELU
from hetdpt_mm.models.layers import AttentionBypass
from hetdpt_mm.spec import ACT, ATTN, PruneSpec

BLOCK = re.compile(r'^layers\.(\d+)\.(.+)$')


class ToyFFN(nn.Module):
    def __init__(self, dim: int, act: nn.Module):
        super().__init__()
        self.inp, self.act, self.out = (
            nn.Linear(dim, 2 * dim),
            act,
            nn.Linear(2 * dim, dim),
        )

    def forward(self, x):
        return self.out(self.act(self.inp(x)))


class ToyFusedFFN(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.fused = nn.Linear(dim, dim)

    def forward(self, x):
        return self.fused(x)


class ToyBlock(nn.Module):
    def __init__(self, dim, form, attn_removed, act_removed):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        if form == 'gated':
            self.mixer, act = GatedAttention(dim, num_heads=2), GatedGELU()
            self.mixer.set_open(not attn_removed)
            act.set_open(not act_removed)
        else:
            self.mixer = (
                AttentionBypass()
                if attn_removed
                else Attention(dim, num_heads=2)
            )
            act = nn.Identity() if act_removed else nn.GELU()
        self.ffn = (
            ToyFusedFFN(dim)
            if form == 'merged' and act_removed
            else ToyFFN(dim, act)
        )

    def forward(self, x):
        x = x + self.mixer(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class ToyCodec:
    """The toy family's tensors (a family's ``codec``)."""

    @classmethod
    def recognizes(cls, state):
        return 'stem.weight' in state and any(map(BLOCK.match, state))

    @classmethod
    def canonical_state(cls, state):
        return state  # one layout

    @staticmethod
    def _layout(state):
        depth = 1 + max(
            int(BLOCK.match(k).group(1)) for k in state if BLOCK.match(k)
        )
        return depth, dict(
            attn=[
                i
                for i in range(depth)
                if f'layers.{i}.mixer.qkv.weight' not in state
            ],
            merged=[
                i
                for i in range(depth)
                if f'layers.{i}.ffn.fused.weight' in state
            ],
            gated=any(k.endswith(GATE_SUFFIXES) for k in state),
        )

    @classmethod
    def record_from_tensors(cls, state, source):
        from hetdpt_mm.checkpoint.record import HetDPTRecord

        depth, layout = cls._layout(state)
        form = 'merged' if layout['merged'] else 'pruned'
        return HetDPTRecord(
            PruneSpec(depth, layout['attn'], layout['merged']),
            form,
            family='toy',
            source=source,
            origin='tensors',
        )

    @classmethod
    def check_record(cls, record, state):
        if record.form == 'gated':
            return
        depth, layout = cls._layout(state)
        merged = (
            list(record.spec.act_removed) if record.form == 'merged' else []
        )
        if (depth, layout['attn'], layout['merged']) != (
            record.spec.depth,
            list(record.spec.attn_removed),
            merged,
        ):
            raise CheckpointError(
                f'{record.source}: toy record does not match the tensors'
            )

    @classmethod
    def convert_state_dict(cls, state, spec, form):
        out = OrderedDict()
        for key, value in state.items():
            match = BLOCK.match(key)
            if match and form != 'gated':
                index, rest = int(match.group(1)), match.group(2)
                if rest.endswith(GATE_SUFFIXES) or (
                    spec.is_removed(ATTN, index) and rest.startswith('mixer.')
                ):
                    continue
            out[key] = value
        for index in spec.act_removed:
            prefix = f'layers.{index}.ffn.'
            if form == 'merged' and f'{prefix}inp.weight' in out:
                weight, bias = merge_ffn_weights(
                    out.pop(f'{prefix}inp.weight'),
                    out.pop(f'{prefix}inp.bias'),
                    out.pop(f'{prefix}out.weight'),
                    out.pop(f'{prefix}out.bias'),
                )
                out[f'{prefix}fused.weight'] = weight
                out[f'{prefix}fused.bias'] = bias
        return out

    @classmethod
    def build_args_from_tensors(cls, state, arch: Optional[Mapping] = None):
        weight = state['stem.weight']
        return dict(
            dim=weight.shape[0],
            depth=cls._layout(state)[0],
            in_features=weight.shape[1],
        )

    @classmethod
    def layer_macs(
        cls, arch, img_size, attention_products=True
    ) -> Dict[str, object]:
        tokens, dim, depth = img_size[0], arch['dim'], arch['depth']
        products = 2 * tokens**2 * dim if attention_products else 0
        return dict(
            attn=[4 * tokens * dim**2 + products] * depth,
            ffn=[4 * tokens * dim**2] * depth,
            merged_ffn=[tokens * dim**2] * depth,
            rest=tokens * arch['in_features'] * dim,
        )


class ToyNet(HetDPTBackbone):
    family = 'toy'
    codec = ToyCodec
    RECORD_ARCH_KEYS = frozenset({'depth', 'dim', 'in_features'})

    def __init__(
        self,
        dim=16,
        depth=4,
        in_features=12,
        prune_spec=None,
        gated=False,
        merged=False,
        init_cfg=None,
    ):
        super().__init__(init_cfg=init_cfg)
        self._args = dict(dim=dim, depth=depth, in_features=in_features)
        self.stem = nn.Linear(in_features, dim)
        form = 'gated' if gated else 'merged' if merged else 'pruned'
        self._build_structure(PruneSpec.coerce(prune_spec, depth), form, {})

    # the network
    @property
    def depth(self):
        return len(self.layers)

    def gates(self, kind):
        if self.form != 'gated':
            raise RuntimeError('no gates')
        return [
            layer.mixer if kind == ATTN else layer.ffn.act
            for layer in self.layers
        ]

    def build_args(self):
        return dict(self._args)

    def _build_structure(self, spec, form, semantics):
        self.form, self.semantics, self._spec = form, dict(semantics), spec
        self.layers = nn.ModuleList(
            ToyBlock(
                self._args['dim'],
                form,
                spec.is_removed(ATTN, i),
                spec.is_removed(ACT, i),
            )
            for i in range(spec.depth)
        )

    def forward(self, x):
        x = self.stem(x)
        for layer in self.layers:
            x = layer(x)
        return (x.mean(dim=1),)


class ToyClassifier(nn.Module):
    def __init__(self, backbone):
        super().__init__()
        self.backbone, self.head = backbone, nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.backbone(x)[0])


@pytest.fixture
def toy_family():
    yield ToyNet
    FAMILIES.pop('toy')  # other tests see the families of the package


def test_a_second_family_is_pruned_merged_and_rebuilt(toy_family):
    torch.manual_seed(0)
    model = ToyClassifier(ToyNet(gated=True))
    randomize_(model, std=0.2)
    scores = dict(attn=[0.3, -0.2, 0.5, 0.1], act=[0.4, 0.2, -0.1, 0.3])
    with torch.no_grad():
        for kind, values in scores.items():
            for gate, value in zip(model.backbone.gates(kind), values):
                gate.hetdpt_score.fill_(value)

    # The prune hook, unchanged: lowest score within each type.
    runner = fake_runner(model)
    hook = HetDPTPruneHook(counts=dict(attn=1, act=2), stages=1)
    hook.before_train(runner)
    for position in hook.positions:
        runner.iter = position - 1
        hook.after_train_iter(runner, batch_idx=0)
    spec = PruneSpec(4, attn_removed=[1], act_removed=[1, 2])
    assert model.backbone.prune_spec == spec

    # The merge, unchanged: activation-free FFNs fused, attention dropped.
    checkpoint = dict(state_dict=model.state_dict(), meta={})
    HetDPTMetaHook().before_save_checkpoint(runner, checkpoint)
    merged, summary = merge_checkpoint(checkpoint)
    record = read_backbone_checkpoint(merged).record
    assert (record.family, record.form, record.spec) == ('toy', 'merged', spec)
    assert summary.backbone_after < summary.backbone_before
    assert 'backbone.layers.1.ffn.fused.weight' in merged['state_dict']
    assert not any('layers.1.mixer' in k for k in merged['state_dict'])

    # Loading the merged state dict into a dense model rebuilds it.
    rebuilt = ToyClassifier(ToyNet())
    rebuilt.load_state_dict(merged['state_dict'])
    assert rebuilt.backbone.form == 'merged'
    assert rebuilt.backbone.prune_spec == spec
    x = torch.randn(2, 5, 12)
    with torch.no_grad():
        torch.testing.assert_close(
            rebuilt.eval()(x), model.eval()(x), atol=1e-5, rtol=1e-5
        )

    # The record names the family: another family refuses it.
    with pytest.raises(CheckpointError, match='unknown backbone family'):
        ToyNet.from_record(record.__class__(spec, 'merged', family='nope'))
