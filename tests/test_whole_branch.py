"""Whole-branch removal (issue 31, item 4; docs/user_guides/dinov2.md): a
removed attention or FFN branch goes with its LayerNorm and LayerScale and
leaves ``x``.  DINOv2-g's Table 6 rows have exactly the paper's parameters, the
gated, pruned and merged forms compute the same function, the record
round-trips, old records read as before, and the prune hook removes FFN
branches (MAP allocating between attention and FFN branches)."""

from pathlib import Path

import pytest
import torch
import torch.nn as nn
from helpers import (
    config_backbone_on_meta,
    fake_runner,
    randomize_,
    timm_state_dict,
)
from mmengine.config import Config

from hetdpt_mm import PruneSpec
from hetdpt_mm.analysis import count_params
from hetdpt_mm.checkpoint.reader import read_backbone_checkpoint
from hetdpt_mm.checkpoint.record import HetDPTRecord
from hetdpt_mm.errors import UsageError
from hetdpt_mm.hooks import HetDPTPruneHook
from hetdpt_mm.merge import merge_checkpoint
from hetdpt_mm.models import HetDPTLayerScaleViT, HetDPTViT

ROOT = Path(__file__).resolve().parents[1]
PAPER_POINTS = ROOT / 'tests' / 'data' / 'map_points_paper.csv'
TINY = dict(embed_dims=48, num_layers=4, num_heads=3, mlp_ratio=4.0)
TINY_SWIGLU = dict(TINY, mlp_ratio=2.66667 * 2, ffn='swiglu')
WHOLE = dict(removed_attn_output='identity')
#: Attention branch removed (0, 3), GELU removed (1), FFN branch removed (2).
SPEC = dict(attn_removed=[0, 3], act_removed=[1], ffn_removed=[2])
SWIGLU_SPEC = dict(attn_removed=[0, 3], ffn_removed=[1, 2])
NETWORKS = {
    'layerscale': (HetDPTLayerScaleViT, TINY, SPEC),
    'swiglu': (HetDPTLayerScaleViT, TINY_SWIGLU, SWIGLU_SPEC),
    'vit': (HetDPTViT, TINY, SPEC),
}


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    pass


def build(name, **kwargs):
    cls, arch, _ = NETWORKS[name]
    return cls(
        arch=arch, patch_size=14, img_size=56, out_type='raw', **kwargs
    ).eval()


def images(seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(2, 3, 56, 56, generator=generator)


def table6_params(config):
    """Parameters of a config's backbone (on the meta device) and head."""
    backbone, head = config_backbone_on_meta(
        ROOT / 'configs' / 'hetdpt' / config
    )
    assert type(backbone) is HetDPTLayerScaleViT
    total = sum(p.numel() for p in backbone.parameters())
    assert count_params(backbone) == total
    return (
        total,
        total + head.in_channels * head.num_classes + head.num_classes,
    )


@pytest.mark.parametrize(
    'config, removed, backbone, paper',
    [
        ('dinov2-g_branch-15l_cifar100.py', (8, 7), 926_965_248, 927.12),
        ('dinov2-g_nose-12l_cifar100.py', (12, 0), 1_021_394_432, 1021.55),
    ],
)
def test_dinov2_giant_table6_parameters(config, removed, backbone, paper):
    cfg = Config.fromfile(ROOT / 'configs' / 'hetdpt' / config)
    spec = PruneSpec(40, **cfg.model.backbone.prune_spec)
    assert (spec.n_attn, spec.n_ffn, spec.n_act) == removed + (0,)
    params, with_head = table6_params(config)
    assert params == backbone
    assert round(with_head / 1e6, 2) == paper


def test_attention_removal_keeping_ln1_and_gamma1_misses_nose():
    """The released semantics keep LN1 and LayerScale of a removed
    attention: 12 attention layers give 1021.60 M, not NOSE's 1021.55 M."""
    with torch.device('meta'):
        backbone = HetDPTLayerScaleViT(
            'dinov2-giant',
            img_size=224,
            prune_spec=dict(attn_removed=list(range(28, 40))),
        )
    params = sum(p.numel() for p in backbone.parameters()) + 153_700
    assert (
        params - table6_params('dinov2-g_nose-12l_cifar100.py')[1]
        == 12 * 3 * 1536
    )  # LN1 weight and bias, gamma1
    assert round(params / 1e6, 2) == 1021.60


@pytest.mark.parametrize('name', list(NETWORKS))
def test_gated_pruned_merged_compute_the_same(name, tmp_path):
    spec = NETWORKS[name][2]
    dense = randomize_(build(name), std=0.2)
    torch.save(timm_state_dict(dense), tmp_path / 'dense.pth')
    init = dict(
        init_cfg=dict(
            type='Pretrained', checkpoint=str(tmp_path / 'dense.pth')
        )
    )
    gated = build(name, gated=True, prune_spec=spec, **WHOLE, **init)
    pruned = build(name, prune_spec=spec, **WHOLE, **init)
    for model in (gated, pruned):
        model.init_weights()
    merged = pruned.to_merged()
    with torch.no_grad():
        outs = [model(images())[0] for model in (gated, pruned, merged)]
    for out in outs[1:]:
        torch.testing.assert_close(out, outs[0], atol=1e-5, rtol=1e-5)
    assert (
        gated.prune_spec
        == pruned.prune_spec
        == merged.prune_spec
        == PruneSpec(4, **spec)
    )
    assert len(gated.gates('ffn')) == 4
    # The removed branches hold no tensors at all.
    keys = merged.state_dict()
    for index in spec['attn_removed']:
        assert not any(
            k.startswith(
                (
                    f'blocks.{index}.norm1.',
                    f'blocks.{index}.ls1.',
                    f'blocks.{index}.attn.',
                )
            )
            for k in keys
        )
    for index in spec['ffn_removed']:
        assert not any(
            k.startswith(
                (
                    f'blocks.{index}.norm2.',
                    f'blocks.{index}.ls2.',
                    f'blocks.{index}.mlp.',
                )
            )
            for k in keys
        )


def test_removed_branches_leave_the_identity():
    backbone = randomize_(
        build('layerscale', prune_spec=SPEC, **WHOLE), std=0.2
    )
    attn_gone, ffn_gone = backbone.blocks[0], backbone.blocks[2]
    x = torch.randn(2, 5, 48)
    with torch.no_grad():
        mlp = ffn_gone.ls1.gamma * ffn_gone.attn(ffn_gone.norm1(x))
        torch.testing.assert_close(ffn_gone(x), x + mlp)
        attn = attn_gone.ls2.gamma * attn_gone.mlp(attn_gone.norm2(x))
        torch.testing.assert_close(attn_gone(x), x + attn)
    dense = sum(p.numel() for p in build('layerscale').parameters())
    kept_ln1 = sum(
        p.numel()
        for p in build(
            'layerscale', prune_spec=dict(attn_removed=[0, 3])
        ).parameters()
    )
    whole = sum(
        p.numel()
        for p in build(
            'layerscale', prune_spec=dict(attn_removed=[0, 3]), **WHOLE
        ).parameters()
    )
    assert kept_ln1 - whole == 2 * 3 * 48  # LN1 weight, bias and gamma1
    assert dense - kept_ln1 == 2 * (48 * 144 + 144 + 48 * 48 + 48)


def test_refused_combinations():
    with pytest.raises(ValueError, match="removed_attn_output='identity'"):
        build('layerscale', prune_spec=dict(ffn_removed=[1]))
    with pytest.raises(ValueError, match='both branches of a block'):
        build(
            'swiglu',
            prune_spec=dict(attn_removed=[1], ffn_removed=[1]),
            **WHOLE,
        )
    with pytest.raises(ValueError, match='in act_removed and in ffn_removed'):
        PruneSpec(4, act_removed=[1], ffn_removed=[1])
    with pytest.raises(ValueError, match='SwiGLU'):  # activations still not
        build('swiglu', prune_spec=dict(act_removed=[1]), **WHOLE)
    with pytest.raises(ValueError, match='no ffn gates'):
        build('layerscale', gated=True).set_spec(dict(ffn_removed=[1]))


@pytest.mark.parametrize('name', ['layerscale', 'swiglu'])
@pytest.mark.parametrize('form', ['pruned', 'merged'])
def test_record_round_trips(name, form, tmp_path):
    spec = NETWORKS[name][2]
    pruned = randomize_(build(name, prune_spec=spec, **WHOLE), std=0.2)
    network = pruned.to_merged() if form == 'merged' else pruned
    record = network.record().to_dict(with_prefix=False)
    assert record['spec'] == dict(depth=4, act_removed=[]) | spec
    assert record['semantics']['removed_attn_output'] == 'identity'
    torch.save(network.state_dict(), tmp_path / 'model.pth')
    loaded = read_backbone_checkpoint(str(tmp_path / 'model.pth'))
    assert loaded.record.same_structure(network.record())
    rebuilt = HetDPTLayerScaleViT.from_record(loaded.record, out_type='raw')
    rebuilt.load_state_dict(torch.load(tmp_path / 'model.pth'))
    with torch.no_grad():
        torch.testing.assert_close(
            rebuilt.eval()(images())[0], network(images())[0]
        )
    # Without a record the tensors say the removed branches and the
    # semantics; as ever, unmerged FFNs cannot say their GELU, and a merged
    # network without merged FFNs reads as pruned.
    torch.save(timm_state_dict(network), tmp_path / 'bare.pth')
    bare = read_backbone_checkpoint(str(tmp_path / 'bare.pth')).record
    act = spec.get('act_removed', []) if form == 'merged' else []
    assert bare.spec == PruneSpec(
        4, spec['attn_removed'], act, ffn_removed=spec['ffn_removed']
    )
    assert dict(bare.semantics) == dict(network.semantics)
    assert bare.form == ('merged' if act else 'pruned')


def test_records_without_ffn_removed_read_as_before():
    old = dict(
        version=2,
        family='vit',
        form='pruned',
        arch=None,
        semantics=dict(
            removed_attn_output='norm', residual_gelu='both_removed'
        ),
        spec=dict(depth=4, attn_removed=[0], act_removed=[1]),
    )
    record = HetDPTRecord.from_dict(old)
    assert record.spec == PruneSpec(4, [0], [1])
    assert record.to_dict(with_prefix=False) == old
    with pytest.raises(Exception, match='ffn'):
        HetDPTRecord.from_dict(dict(old, spec=dict(old['spec'], ffn=[1])))


def test_merge_tool_applies_a_whole_branch_spec(tmp_path):
    """tools/merge_ckpt.py's path: a gated file with closed FFN-branch
    gates merges under its record's whole-branch semantics."""
    gated = randomize_(build('layerscale', gated=True, **WHOLE), std=0.2)
    gated.set_spec(SPEC)
    torch.save(gated.state_dict(), tmp_path / 'gated.pth')
    merged_ckpt, summary = merge_checkpoint(torch.load(tmp_path / 'gated.pth'))
    assert summary.spec == PruneSpec(4, **SPEC)
    torch.save(merged_ckpt, tmp_path / 'merged.pth')
    record = read_backbone_checkpoint(str(tmp_path / 'merged.pth')).record
    merged = HetDPTLayerScaleViT.from_record(record, out_type='raw')
    merged.load_pretrained(str(tmp_path / 'merged.pth'))
    with torch.no_grad():
        torch.testing.assert_close(
            merged.eval()(images())[0],
            gated(images())[0],
            atol=1e-5,
            rtol=1e-5,
        )


def test_prune_hook_removes_ffn_branches_with_map_counts():
    """MAP over (attention, FFN branches): the paper's points at budget 3,
    depth 4 give 1 + 2; the hook closes the lowest-scored FFN branches and
    attention of a gated SwiGLU classifier, and the merged network computes
    what the gated one does."""
    from mmpretrain.registry import MODELS

    model = MODELS.build(
        dict(
            type='ImageClassifier',
            backbone=dict(
                type='HetDPTLayerScaleViT',
                arch=TINY_SWIGLU,
                patch_size=14,
                img_size=56,
                gated=True,
                **WHOLE,
            ),
            head=dict(type='LinearClsHead', num_classes=10, in_channels=48),
        )
    )
    backbone = randomize_(model.backbone, std=0.2)
    runner = fake_runner(model)
    hook = HetDPTPruneHook(
        map_points=str(PAPER_POINTS),
        budget=3,
        map_kinds=('attn', 'ffn'),
        stages=1,
    )
    hook.before_train(runner)
    assert hook.counts == dict(attn=1, act=0, ffn=2)
    assert hook.order == ['ffn', 'attn', 'ffn']
    with torch.no_grad():
        # Block 1's attention scores lowest, but its FFN branch goes first:
        # a block keeps one branch, so the attention of block 3 goes.
        for kind, index, score in (
            ('ffn', 1, -1.0),
            ('ffn', 2, -0.5),
            ('attn', 1, -2.0),
            ('attn', 3, -1.0),
        ):
            backbone.gates(kind)[index].hetdpt_score.fill_(score)
    for runner.iter in range(12):
        hook.after_train_iter(runner, runner.iter)
    assert backbone.prune_spec == PruneSpec(4, [3], ffn_removed=[1, 2])
    assert hook.decisions[1]['candidates'] == [0, 2, 3]
    merged = backbone.to_merged()
    assert isinstance(merged.blocks[1].norm2, nn.Identity)
    with torch.no_grad():
        torch.testing.assert_close(
            merged.eval()(images())[0], backbone.eval()(images())[0]
        )


@pytest.mark.parametrize(
    'backbone, counts, message',
    [
        # FFN branches are gated only under whole-branch removal.
        (
            dict(type='HetDPTViT', arch=TINY),
            dict(attn=1, act=0, ffn=2),
            'no ffn gates',
        ),
        # A SwiGLU FFN has no GELU to remove.
        (
            dict(type='HetDPTLayerScaleViT', arch=TINY_SWIGLU, **WHOLE),
            dict(attn=1, act=1),
            'no act gates',
        ),
    ],
)
def test_prune_hook_refuses_counts_without_gates(backbone, counts, message):
    """Before training, not at the first removal mid-run."""
    from mmpretrain.registry import MODELS

    model = MODELS.build(
        dict(
            type='ImageClassifier',
            backbone=dict(backbone, patch_size=14, img_size=56, gated=True),
            head=dict(type='LinearClsHead', num_classes=10, in_channels=48),
        )
    )
    hook = HetDPTPruneHook(counts=counts, stages=1)
    with pytest.raises(UsageError, match=message):
        hook.before_train(fake_runner(model))
    assert model.backbone.prune_spec.is_dense


def test_prune_hook_refuses_more_branches_than_blocks():
    from mmpretrain.registry import MODELS

    model = MODELS.build(
        dict(
            type='ImageClassifier',
            backbone=dict(
                type='HetDPTLayerScaleViT',
                arch=TINY_SWIGLU,
                patch_size=14,
                img_size=56,
                gated=True,
                **WHOLE,
            ),
            head=dict(type='LinearClsHead', num_classes=10, in_channels=48),
        )
    )
    hook = HetDPTPruneHook(counts=dict(attn=2, act=0, ffn=3), stages=1)
    with pytest.raises(ValueError, match='remove 5 branches of 4'):
        hook.before_train(fake_runner(model, max_epochs=6))
