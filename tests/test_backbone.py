"""HetDPTViT: forms, semantics, outputs, weights (issue 3)."""

import pytest
import torch
import torch.nn as nn
from helpers import MIXED_SPEC, randomize_, timm_state_dict
from timm.layers import Attention

from hetdpt_mm import META_KEY, PruneSpec
from hetdpt_mm.errors import CheckpointError
from hetdpt_mm.models import HetDPTViT

torch.set_num_threads(2)


def build(arch='deit-small', **kwargs):
    kwargs.setdefault('prune_spec', MIXED_SPEC)
    return HetDPTViT(arch, **kwargs).eval()


def three_forms(arch, **kwargs):
    gated = randomize_(build(arch, gated=True, **kwargs))
    pruned = build(arch, **kwargs)
    pruned.load_state_dict(gated.state_dict(), strict=False)
    merged = pruned.to_merged().eval()
    return gated, pruned, merged


@pytest.mark.parametrize('arch', ['deit-small', 'deit-base'])
def test_three_forms_compute_the_same_function(arch):
    kwargs = dict(
        out_type='featmap', out_indices=(2, 5, 8, 11), output_cls_token=True
    )
    gated, pruned, merged = three_forms(arch, **kwargs)
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        outs = [model(x) for model in (gated, pruned, merged)]
    for level in range(4):
        (ref_map, ref_cls) = outs[0][level]
        assert ref_map.shape == (2, gated.arch_settings['embed_dims'], 14, 14)
        assert ref_map.abs().mean() > 0.1  # a non-trivial comparison
        for other in outs[1:]:
            feat, cls = other[level]
            # float32 rounding grows with the activations' scale (deit-base
            # reaches ~10 here): the tolerance is relative to it.
            assert (feat - ref_map).abs().max() <= 1e-5 * ref_map.abs().max()
            assert (cls - ref_cls).abs().max() <= 1e-5 * ref_cls.abs().max()


def test_merged_has_plain_dense_layers():
    merged = build('deit-small', merged=True)
    block = merged.blocks[7]  # both removed
    assert isinstance(block.mlp.fc, nn.Linear)
    assert block.mlp.fc.weight.shape == (384, 384)
    assert isinstance(block.residual_act, nn.GELU)
    assert not any('hetdpt' in name for name, _ in merged.named_parameters())
    assert isinstance(merged.blocks[2].residual_act, nn.Identity)
    assert merged.blocks[1].attn.fused_attn  # SDPA


def reference_block(block, x, attn_removed, act_removed, residual_gelu):
    """docs/method.md section 1 written out by hand from the block's
    weights."""
    h = block.norm1(x)
    x = x + (h if attn_removed else block.attn(h))
    mlp = block.mlp
    h = mlp.fc1(block.norm2(x))
    x = x + mlp.fc2(h if act_removed else torch.nn.functional.gelu(h))
    if residual_gelu:
        x = torch.nn.functional.gelu(x)
    return x


@pytest.mark.parametrize('mode', ['both_removed', 'act_removed', 'never'])
def test_block_semantics_match_method(mode):
    model = randomize_(build('deit-tiny', residual_gelu=mode))
    x = torch.randn(2, 5, 192)
    spec = model.prune_spec
    for index, block in enumerate(model.blocks):
        attn_removed = spec.is_removed('attn', index)
        act_removed = spec.is_removed('act', index)
        wants_gelu = {
            'both_removed': attn_removed and act_removed,
            'act_removed': act_removed,
            'never': False,
        }[mode]
        with torch.no_grad():
            expected = reference_block(
                block, x, attn_removed, act_removed, wants_gelu
            )
            assert torch.allclose(block(x), expected, atol=1e-6)


def test_zero_attention_semantics():
    model = randomize_(build('deit-tiny', removed_attn_output='zero'))
    block, x = model.blocks[0], torch.randn(1, 4, 192)
    with torch.no_grad():
        expected = x + block.mlp(block.norm2(x))
        assert torch.allclose(block(x), expected, atol=1e-6)


def test_straight_through_gradient_reaches_the_score():
    model = randomize_(build('deit-tiny', prune_spec=None, gated=True))
    model.train()
    attn = model.blocks[4].attn
    captured = {}

    def keep(module, args, output):
        captured['x'] = args[0]
        output.retain_grad()
        captured['out'] = output

    attn.register_forward_hook(keep)
    model(torch.randn(2, 3, 224, 224))[0].pow(2).sum().backward()
    x, out = captured['x'], captured['out']
    with torch.no_grad():
        f_x = Attention.forward(attn, x)
    expected = ((f_x - x) * out.grad).sum()
    assert torch.allclose(attn.hetdpt_score.grad, expected, rtol=1e-4)


def test_closed_gate_skips_its_layer_and_spec_follows_gates():
    model = build('deit-tiny', prune_spec=None, gated=True)
    model.train()
    model.set_spec(PruneSpec(12, [3], [5]))
    assert model.prune_spec == PruneSpec(12, [3], [5])
    model(torch.randn(1, 3, 224, 224))[0].sum().backward()
    assert model.blocks[3].attn.qkv.weight.grad is None
    assert model.blocks[3].attn.hetdpt_score.grad is None
    assert model.blocks[4].attn.hetdpt_score.grad is not None
    assert model.blocks[5].mlp.act.hetdpt_score.grad is None


def count(module):
    return sum(p.numel() for p in module.parameters())


def test_authors_deit_b_parameter_counts():
    """docs/method.md: 75,526,352 pruned and 54,867,152 merged, backbone plus
    the two linear heads of distilled DeiT-B."""
    heads = 2 * (768 * 1000 + 1000)
    pruned = HetDPTViT('deit-base', distilled=True, prune_spec=MIXED_SPEC)
    assert count(pruned) + heads == 75_526_352
    assert count(pruned) == 73_988_352
    merged = HetDPTViT(
        'deit-base', distilled=True, prune_spec=MIXED_SPEC, merged=True
    )
    assert count(merged) + heads == 54_867_152
    assert count(merged) == 53_329_152
    dense = HetDPTViT('deit-base', distilled=True)
    assert count(dense) + heads == 87_338_192


@pytest.mark.parametrize(
    'name,distilled',
    [
        ('deit_small_patch16_224', False),
        ('deit_small_distilled_patch16_224', True),
    ],
)
def test_reproduces_timm_deit(tmp_path, name, distilled):
    import timm

    reference = randomize_(timm.create_model(name, pretrained=False)).eval()
    path = tmp_path / 'deit.pth'
    torch.save({'model': timm_state_dict(reference)}, path)
    model = HetDPTViT(
        'deit-small',
        distilled=distilled,
        out_type='raw',
        init_cfg=dict(type='Pretrained', checkpoint=str(path)),
    )
    model.init_weights()
    model.eval()
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        expected = reference.forward_features(x)
        (tokens,) = model(x)
    assert (tokens - expected).abs().max() <= 1e-5
    if distilled:
        model.out_type = 'cls_token'
        with torch.no_grad():
            cls, dist = model(x)[0]
            logits = reference.forward_head(expected)  # eval: mean of heads
        assert torch.allclose(cls, expected[:, 0]) and torch.allclose(
            dist, expected[:, 1]
        )
        assert logits.shape == (2, 1000)


@pytest.mark.parametrize(
    'shape,grid',
    [
        ((1, 3, 224, 224), (14, 14)),
        ((2, 3, 512, 512), (32, 32)),
        ((1, 3, 800, 1216), (50, 76)),
        ((1, 3, 250, 330), (16, 21)),
    ],
)
def test_dense_outputs_any_input_size(shape, grid):
    model = build(
        'deit-small',
        out_type='featmap',
        out_indices=(2, 5, 8, 11),
        merged=True,
        img_size=512,
    )
    with torch.no_grad():
        outs = model(torch.randn(shape))
    assert len(outs) == 4
    for out in outs:
        assert out.shape == (shape[0], 384) + grid
        assert torch.isfinite(out).all()


def test_input_smaller_than_a_patch_is_rejected():
    with pytest.raises(ValueError, match='8x20 input is under one patch'):
        build('deit-tiny')(torch.randn(1, 3, 8, 20))


def test_cls_token_output_for_mmpretrain_heads():
    model = build('deit-tiny')
    (out,) = model(torch.randn(3, 3, 224, 224))
    assert out.shape == (3, 192)
    model = build('deit-tiny', distilled=True)
    ((cls, dist),) = model(torch.randn(3, 3, 224, 224))
    assert cls.shape == dist.shape == (3, 192)


def test_position_embedding_is_resized_on_load(tmp_path):
    source = randomize_(build('deit-tiny', merged=True))
    path = tmp_path / 'small.pth'
    torch.save(
        {
            'state_dict': source.state_dict(),
            'meta': {META_KEY: source.record().to_dict()},
        },
        path,
    )
    model = HetDPTViT(
        'deit-tiny',
        img_size=512,
        out_type='featmap',
        init_cfg=dict(type='Pretrained', checkpoint=str(path)),
    )
    model.init_weights()
    assert model.pos_embed.shape == (1, 1 + 32 * 32, 192)
    assert model.form == 'merged'
    assert model.prune_spec == PruneSpec(12, **MIXED_SPEC)


@pytest.mark.parametrize('form', ['pruned', 'merged', 'gated'])
def test_spec_round_trips_through_checkpoint_meta(tmp_path, form):
    source = randomize_(
        build('deit-tiny', gated=form == 'gated', merged=form == 'merged')
    )
    path = tmp_path / 'ckpt.pth'
    torch.save(
        {
            'state_dict': {
                f'backbone.{k}': v for k, v in source.state_dict().items()
            },
            'meta': {META_KEY: source.record().to_dict()},
        },
        path,
    )
    checkpoint = torch.load(path, weights_only=True)
    assert (
        PruneSpec.from_dict(checkpoint['meta'][META_KEY]['spec'])
        == source.prune_spec
    )
    # Stock configs write prefix='backbone' (MMEngine adds the dot).
    for prefix in ('backbone.', 'backbone'):
        model = HetDPTViT(
            'deit-tiny',
            prune_spec=None,
            gated=form == 'gated',
            init_cfg=dict(
                type='Pretrained', checkpoint=str(path), prefix=prefix
            ),
        )
        model.init_weights()
        model.eval()
        assert model.prune_spec == source.prune_spec
        assert model.form == ('merged' if form == 'merged' else form)
        x = torch.randn(1, 3, 224, 224)
        with torch.no_grad():
            assert (model(x)[0] - source(x)[0]).abs().max() <= 1e-5


def test_authors_stage2_checkpoint_loads_with_explicit_spec(tmp_path):
    """Authors' layout: timm keys, removed attention keys absent, no meta."""
    reference = randomize_(build('deit-tiny'))
    state = timm_state_dict(reference)
    state['head.weight'] = torch.zeros(1000, 192)
    path = tmp_path / 'authors.pth'
    torch.save({'model': state}, path)
    with pytest.raises(ValueError, match='removed GELUs are unknown'):
        HetDPTViT(
            'deit-tiny', init_cfg=dict(type='Pretrained', checkpoint=str(path))
        )
    model = HetDPTViT(
        'deit-tiny',
        prune_spec=MIXED_SPEC,
        merged=True,
        init_cfg=dict(type='Pretrained', checkpoint=str(path)),
    )
    model.init_weights()
    model.eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert (model(x)[0] - reference(x)[0]).abs().max() <= 1e-5


@pytest.mark.parametrize(
    'spec,message',
    [
        (dict(attn_removed=[12]), 'out of range'),
        (dict(attn_removed=[-1]), 'out of range'),
        (dict(act_removed=[1, 1]), 'duplicated'),
        (dict(act_removed=[1.0]), 'must hold integers'),
        (dict(act_removed=['2']), 'must hold integers'),
        (dict(depth=6), 'depth 6'),
        (dict(removed=[1]), 'removed'),
    ],
)
def test_invalid_specs_are_named(spec, message):
    with pytest.raises((ValueError, TypeError), match=message):
        HetDPTViT('deit-tiny', prune_spec=spec)


def test_spec_is_sorted_and_serialisable():
    spec = PruneSpec(12, [8, 0], [11, 2])
    assert spec.attn_removed == (0, 8) and spec.ratios == (10 / 12, 10 / 12)
    assert PruneSpec.from_json(spec.to_json()) == spec


def test_mismatched_checkpoints_are_named(tmp_path):
    small = randomize_(build('deit-small', prune_spec=None))
    path = tmp_path / 'small.pth'
    torch.save({'model': timm_state_dict(small)}, path)
    tiny = HetDPTViT(
        'deit-tiny', init_cfg=dict(type='Pretrained', checkpoint=str(path))
    )
    with pytest.raises(
        CheckpointError,
        match=r'blocks\.0\.norm1\.weight: checkpoint \(384,\)',
    ):
        tiny.init_weights()

    pruned = randomize_(build('deit-tiny', merged=True))
    path = tmp_path / 'merged.pth'
    torch.save(
        {
            'state_dict': pruned.state_dict(),
            'meta': {META_KEY: pruned.record().to_dict()},
        },
        path,
    )
    model = HetDPTViT(
        'deit-tiny',
        prune_spec=MIXED_SPEC,
        merged=False,
        init_cfg=dict(type='Pretrained', checkpoint=str(path)),
    )
    with pytest.raises(CheckpointError, match='merged=True'):
        model.init_weights()
    model = HetDPTViT(
        'deit-tiny',
        prune_spec=dict(attn_removed=[0]),
        init_cfg=dict(type='Pretrained', checkpoint=str(path)),
    )
    with pytest.raises(CheckpointError, match='lacks layers'):
        model.init_weights()

    resnet = {'conv1.weight': torch.zeros(64, 3, 7, 7)}
    path = tmp_path / 'resnet.pth'
    torch.save({'state_dict': resnet}, path)
    with pytest.raises(ValueError, match='no backbone of'):
        HetDPTViT(
            'deit-tiny', init_cfg=dict(type='Pretrained', checkpoint=str(path))
        )


def test_loaded_weights_bring_their_structure():
    """What mmdet's init_detector, mmseg's init_model and load_from do:
    build from the config without init_cfg, then load a state dict."""
    _, pruned, merged = three_forms('deit-small')
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        expected = merged(x)[0]
    state = merged.state_dict()
    for source in (
        state,
        {
            k: v
            for k, v in state.items()  # no record:
            if k != '_extra_state'
        },
    ):  # from the tensors
        unconfigured = HetDPTViT('deit-small').eval()
        unconfigured.load_state_dict(source)
        assert unconfigured.form == 'merged'
        assert unconfigured.prune_spec == merged.prune_spec
        with torch.no_grad():
            assert (unconfigured(x)[0] - expected).abs().max() <= 1e-5
    # A structure given in the config must fit the weights.
    other = build('deit-small', prune_spec=dict(attn_removed=[1]))
    with pytest.raises(
        CheckpointError,
        match=r'vit merged PruneSpec.*the config vit pruned',
    ):
        other.load_state_dict(state)
    wider = HetDPTViT('deit-base')
    with pytest.raises(
        CheckpointError,
        match=r"arch=\{'embed_dims': 384.*the config \{'embed_dims': 768",
    ):
        wider.load_state_dict(state)
