"""HetDPTLayerScaleViT (issue 16): LayerScale ViTs (DeiT-III, DINOv2 with
and without registers, DINOv2-g's SwiGLU).  The dense form is timm's model
with the same weights (each checkpoint layout converted, the position
embedding resampled as timm does), the three forms compute the same
function with LayerScale folded into merged FFNs, SwiGLU activations are
refused, and the configs build and predict."""

import json
from pathlib import Path

import pytest
import timm
import torch
import torch.nn as nn
from helpers import fake_runner, randomize_, timm_state_dict
from mmengine.config import Config
from timm.models.vision_transformer import checkpoint_filter_fn

from hetdpt_benchmark.builders import make_test_batch
from hetdpt_benchmark.options import BenchmarkOptions, resolve_options
from hetdpt_benchmark.run import run_benchmark
from hetdpt_mm import PruneSpec
from hetdpt_mm.checkpoint.reader import read_backbone_checkpoint
from hetdpt_mm.deploy.networks import build_from_config
from hetdpt_mm.errors import CheckpointError
from hetdpt_mm.hooks import HetDPTPruneHook
from hetdpt_mm.merge import merge_checkpoint
from hetdpt_mm.models import HetDPTLayerScaleViT, HetDPTViT

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(embed_dims=48, num_layers=4, num_heads=3, mlp_ratio=4.0)
TINY_SWIGLU = dict(TINY, mlp_ratio=2.66667 * 2, ffn='swiglu')
#: Blocks of all four kinds: attention removed (0), GELU removed (1), full
#: (2), both removed (3).
TINY_SPEC = dict(attn_removed=[0, 3], act_removed=[1, 3])
#: timm model, its constructor overrides, ours for the same network.
MODELS = {
    'dinov2': (
        'vit_small_patch14_dinov2',
        dict(img_size=56),
        dict(arch=TINY, patch_size=14, img_size=56),
    ),
    'dinov2-reg4': (
        'vit_small_patch14_reg4_dinov2',
        dict(img_size=56),
        dict(
            arch=TINY,
            patch_size=14,
            img_size=56,
            reg_tokens=4,
            no_embed_class=True,
        ),
    ),
    'deit3': (
        'deit3_small_patch16_224',
        dict(img_size=64),
        dict(
            arch=TINY,
            patch_size=16,
            img_size=64,
            no_embed_class=True,
            layer_scale_init_value=1e-6,
        ),
    ),
    'dinov2-giant': (
        'vit_giant_patch14_dinov2',
        dict(img_size=56, mlp_ratio=2.66667 * 2),
        dict(arch=TINY_SWIGLU, patch_size=14, img_size=56),
    ),
}


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    pass


def timm_model(name, **overrides):
    timm_name, timm_args, _ = MODELS[name]
    args = dict(
        timm_args,
        embed_dim=48,
        depth=4,
        num_heads=3,
        num_classes=0,
        **overrides,
    )
    model = timm.create_model(timm_name, pretrained=False, **args).eval()
    return randomize_(model, std=0.2)


def ours(name, **kwargs):
    return HetDPTLayerScaleViT(
        **dict(MODELS[name][2], out_type='raw', **kwargs)
    ).eval()


def loaded(path, name, **kwargs):
    backbone = ours(
        name, init_cfg=dict(type='Pretrained', checkpoint=str(path)), **kwargs
    )
    backbone.init_weights()
    return backbone.eval()


def images(size, batch=2, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 3, size, size, generator=generator)


def official_dinov2_layout(state):
    """timm's DINOv2 tensors as facebookresearch/dinov2 saves them (the
    inverse of timm's ``_convert_dinov2``)."""
    fc1, fc2 = (
        state['blocks.0.mlp.fc1.weight'],
        state['blocks.0.mlp.fc2.weight'],
    )
    swiglu = fc1.shape[0] == 2 * fc2.shape[1]
    out = {'mask_token': torch.randn(1, fc1.shape[1])}
    for key, value in state.items():
        if swiglu:
            key = key.replace('mlp.fc1.', 'mlp.w12.').replace(
                'mlp.fc2.', 'mlp.w3.'
            )
        out[key] = value
    if 'reg_token' in state:
        pos_cls = torch.randn_like(state['cls_token'])
        out['register_tokens'] = out.pop('reg_token')
        out['cls_token'] = state['cls_token'] - pos_cls
        out['pos_embed'] = torch.cat([pos_cls, state['pos_embed']], dim=1)
    return out


@pytest.mark.parametrize(
    'name, layout',
    [(name, 'timm') for name in MODELS]
    + [(name, 'official') for name in MODELS if 'dinov2' in name],
)
def test_dense_form_is_timms_model(name, layout, tmp_path):
    """Loaded from a file through init_cfg (recognised, converted), the
    dense backbone computes timm's features, at the stored size and, with
    the position embedding resampled on the fly, at another one."""
    reference = timm_model(name, dynamic_img_size=True)
    state = timm_state_dict(reference)
    if layout == 'official':
        state = official_dinov2_layout(state)
    torch.save(dict(model=state), tmp_path / 'model.pth')
    backbone = loaded(tmp_path / 'model.pth', name)
    size = MODELS[name][1]['img_size']
    other = size + MODELS[name][2]['patch_size']
    for side in (size, other):
        x = images(side)
        with torch.no_grad():
            torch.testing.assert_close(
                backbone(x)[0],
                reference.forward_features(x),
                atol=1e-5,
                rtol=1e-5,
            )


def test_official_deit3_layout(tmp_path):
    """The official DeiT-III release names LayerScale gamma_1 / gamma_2."""
    reference = timm_model('deit3')
    state = {
        k.replace('ls1.gamma', 'gamma_1').replace('ls2.gamma', 'gamma_2'): v
        for k, v in timm_state_dict(reference).items()
    }
    torch.save(dict(model=state), tmp_path / 'deit3.pth')
    backbone = loaded(tmp_path / 'deit3.pth', 'deit3')
    x = images(64)
    with torch.no_grad():
        torch.testing.assert_close(
            backbone(x)[0], reference.forward_features(x), atol=1e-5, rtol=1e-5
        )


@pytest.mark.parametrize('name', ['dinov2', 'dinov2-reg4'])
def test_position_embedding_resampled_on_load_as_timm(name, tmp_path):
    """A checkpoint stored at 6x6 patches (DINOv2's 37x37 in small) loaded
    at 4x4: bicubic and antialiased, as timm's loader resamples it."""
    source = timm_model(name, img_size=84)
    torch.save(timm_state_dict(source), tmp_path / 'big.pth')
    reference = timm_model(name)
    reference.load_state_dict(
        checkpoint_filter_fn(timm_state_dict(source), reference)
    )
    backbone = loaded(tmp_path / 'big.pth', name)
    x = images(56)
    with torch.no_grad():
        torch.testing.assert_close(
            backbone(x)[0], reference.forward_features(x), atol=1e-5, rtol=1e-5
        )


@pytest.mark.parametrize('name', ['dinov2', 'dinov2-reg4', 'deit3'])
@pytest.mark.parametrize(
    'semantics',
    [{}, dict(removed_attn_output='zero', residual_gelu='act_removed')],
)
def test_gated_pruned_merged_compute_the_same(name, semantics, tmp_path):
    dense = timm_model(name)
    torch.save(timm_state_dict(dense), tmp_path / 'dense.pth')
    gated = loaded(
        tmp_path / 'dense.pth',
        name,
        gated=True,
        prune_spec=TINY_SPEC,
        **semantics,
    )
    pruned = loaded(
        tmp_path / 'dense.pth', name, prune_spec=TINY_SPEC, **semantics
    )
    merged = pruned.to_merged()
    # LayerScale folded into the merged FFNs: no gamma left there.
    for index in TINY_SPEC['act_removed']:
        assert isinstance(merged.blocks[index].mlp.fc, nn.Linear)
        assert isinstance(merged.blocks[index].ls2, nn.Identity)
        assert f'blocks.{index}.ls2.gamma' not in merged.state_dict()
    assert isinstance(merged.blocks[2].ls2.gamma, nn.Parameter)
    x = images(MODELS[name][1]['img_size'])
    with torch.no_grad():
        outs = [model(x)[0] for model in (gated, pruned, merged)]
    for out in outs[1:]:
        torch.testing.assert_close(out, outs[0], atol=1e-5, rtol=1e-5)
    assert pruned.prune_spec == merged.prune_spec == gated.prune_spec


def test_removed_attention_leaves_gamma1_times_ln1():
    """Default semantics: a removed attention leaves x + gamma1 * LN1(x)."""
    block = randomize_(ours('dinov2', prune_spec=TINY_SPEC), std=0.2).blocks[0]
    x = torch.randn(2, 5, 48)
    with torch.no_grad():
        mid = x + block.ls1.gamma * block.norm1(x)
        expected = mid + block.ls2.gamma * block.mlp(block.norm2(mid))
        torch.testing.assert_close(block(x), expected)


def test_swiglu_refuses_activation_removal_and_prunes_attention(tmp_path):
    with pytest.raises(ValueError, match=r'block\(s\) \[1, 3\].*SwiGLU'):
        ours('dinov2-giant', prune_spec=TINY_SPEC)
    gated = ours(
        'dinov2-giant', gated=True, prune_spec=dict(attn_removed=[0, 3])
    )
    assert gated.gates('act') == []
    with pytest.raises(ValueError, match=r'block\(s\) \[2\]'):
        gated.set_spec(dict(attn_removed=[0], act_removed=[2]))
    dense = timm_model('dinov2-giant')
    torch.save(timm_state_dict(dense), tmp_path / 'giant.pth')
    spec = dict(attn_removed=[0, 3])
    gated = loaded(
        tmp_path / 'giant.pth', 'dinov2-giant', gated=True, prune_spec=spec
    )
    pruned = loaded(tmp_path / 'giant.pth', 'dinov2-giant', prune_spec=spec)
    merged = pruned.to_merged()
    x = images(56)
    with torch.no_grad():
        outs = [model(x)[0] for model in (gated, pruned, merged)]
    for out in outs[1:]:
        torch.testing.assert_close(out, outs[0], atol=1e-5, rtol=1e-5)


def test_prune_hook_removes_attention_of_a_swiglu_classifier():
    """HetDPTPruneHook drives a gated SwiGLU network through the family
    interface: attention gates only (lowest score first), no GELU gates."""
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
            ),
            head=dict(type='LinearClsHead', num_classes=10, in_channels=48),
        )
    )
    backbone = randomize_(model.backbone, std=0.2)
    runner = fake_runner(model)
    hook = HetDPTPruneHook(counts=dict(attn=2, act=0), stages=1)
    hook.before_train(runner)
    with torch.no_grad():
        backbone.gates('attn')[2].hetdpt_score.fill_(-1.0)
        backbone.gates('attn')[1].hetdpt_score.fill_(-0.5)
    for runner.iter in range(8):
        hook.after_train_iter(runner, runner.iter)
    assert backbone.prune_spec == PruneSpec(4, [1, 2])
    merged = backbone.to_merged()
    x = images(56)
    with torch.no_grad():
        torch.testing.assert_close(merged.eval()(x)[0], backbone.eval()(x)[0])


def test_checkpoints_know_their_family_and_merge(tmp_path):
    """A timm DINOv2 file is a LayerScale ViT (never a plain ViT); the
    checkpoint merge folds LayerScale and rebuilds from its record."""
    dense = timm_model('dinov2-reg4')
    torch.save(timm_state_dict(dense), tmp_path / 'dense.pth')
    record = read_backbone_checkpoint(str(tmp_path / 'dense.pth')).record
    assert record.family == 'layerscale_vit'
    with pytest.raises(CheckpointError, match='layerscale_vit'):
        vit = HetDPTViT(
            arch=TINY,
            init_cfg=dict(
                type='Pretrained', checkpoint=str(tmp_path / 'dense.pth')
            ),
        )
        vit.init_weights()
    merged_ckpt, _ = merge_checkpoint(
        torch.load(tmp_path / 'dense.pth'), spec=TINY_SPEC, arch=TINY
    )
    torch.save(merged_ckpt, tmp_path / 'merged.pth')
    record = read_backbone_checkpoint(str(tmp_path / 'merged.pth')).record
    assert record.form == 'merged' and record.arch['reg_tokens'] == 4
    merged = HetDPTLayerScaleViT.from_record(record, out_type='raw')
    merged.load_pretrained(str(tmp_path / 'merged.pth'))
    pruned = loaded(
        tmp_path / 'dense.pth', 'dinov2-reg4', prune_spec=TINY_SPEC
    )
    x = images(56)
    with torch.no_grad():
        torch.testing.assert_close(
            merged.eval()(x)[0], pruned(x)[0], atol=1e-5, rtol=1e-5
        )


def test_mmpretrain_layer_scale_vit_is_refused_by_the_plain_vit(tmp_path):
    """mmpretrain's ViT with LayerScale is not silently read without its
    gammas: the error names the family that reads it (equal outputs:
    tests/test_stock_vit_args.py)."""
    from mmpretrain.models import VisionTransformer

    model = VisionTransformer(
        arch=dict(
            embed_dims=48, num_layers=2, num_heads=3, feedforward_channels=192
        ),
        img_size=32,
        patch_size=16,
        layer_scale_init_value=1e-5,
    )
    torch.save(model.state_dict(), tmp_path / 'mmpretrain.pth')
    with pytest.raises(
        CheckpointError,
        match="layerscale_vit.*type='HetDPTLayerScaleViT'",
    ):
        HetDPTViT(
            arch=dict(TINY, num_layers=2),
            img_size=32,
            init_cfg=dict(
                type='Pretrained', checkpoint=str(tmp_path / 'mmpretrain.pth')
            ),
        )


def test_backbone_benchmark_of_a_layerscale_vit():
    """tools/benchmark.py backbone --family layerscale_vit: traced
    matrix-product MACs equal the analytic per-block ones."""
    options = resolve_options(
        BenchmarkOptions(
            'backbone',
            family='layerscale_vit',
            arch=json.dumps(TINY),
            spec=json.dumps(TINY_SPEC),
            img_size=[64],
            batch_size=1,
            repeats=1,
            warmup=0,
            threads=1,
        )
    )
    result = run_benchmark(options)
    for model in result['models']:
        assert model['macs']['matmul'] == model['backbone_analytic_macs']
    assert result['models'][2]['speedup']['macs'] > 1.0


def small_checkpoint(path, arch, spec, reg_tokens=0, **kwargs):
    backbone = HetDPTLayerScaleViT(
        arch=arch,
        patch_size=14,
        img_size=56,
        reg_tokens=reg_tokens,
        no_embed_class=bool(reg_tokens),
        prune_spec=spec,
        **kwargs,
    )
    torch.save(
        dict(
            state_dict={
                f'backbone.{k}': v for k, v in backbone.state_dict().items()
            }
        ),
        path,
    )
    return backbone


@pytest.mark.parametrize(
    'name, kinds',
    [
        ('hetdpt/dinov2-g_prune-15l_cifar100.py', dict(attn=15, act=0)),
        ('hetdpt/dinov2-g_prune-15l_cifar100_fsdp.py', dict(attn=15, act=0)),
        ('hetdpt/dinov2-s_prune-5l_cifar100.py', dict(attn=2, act=3)),
    ],
)
def test_cifar100_prune_configs(name, kinds, tmp_path):
    """The prune configs as written, with a tiny dense DINOv2 in the
    checkpoint's place: they build gated, prune the layers they say and
    classify 100 classes."""
    cfg = Config.fromfile(ROOT / 'configs' / name)
    hook = next(h for h in cfg.custom_hooks if h.type == 'HetDPTPruneHook')
    assert hook.counts == kinds
    if name.endswith('_fsdp.py'):  # sharded: tests/test_sharding.py runs it
        assert cfg.runner_type == 'FlexibleRunner'
        assert cfg.strategy.type == 'HetDPTFSDPStrategy'
        assert cfg.strategy.state_dict_cfg == 'full'
        # clipped by the whole gradient's norm (HetDPTFSDPStrategy)
        assert cfg.optim_wrapper.clip_grad == dict(max_norm=5.0)
    backbone_cfg = cfg.model.backbone
    arch = TINY_SWIGLU if 'giant' in backbone_cfg.arch else TINY
    small_checkpoint(tmp_path / 'dense.pth', arch, None)
    backbone_cfg.update(
        arch=arch,
        img_size=56,
        init_cfg=dict(
            type='Pretrained', checkpoint=str(tmp_path / 'dense.pth')
        ),
    )
    cfg.model.head.in_channels = 48
    model = build_from_config(cfg)
    model.init_weights()
    assert model.backbone.form == 'gated'
    with torch.no_grad():
        scores = model(images(56), mode='tensor')
    assert scores.shape == (2, 100)


def test_upernet_config_with_a_small_merged_dinov2(tmp_path):
    """configs/upernet_hetdpt_dinov2-b_ade20k.py as written with a small
    merged DINOv2 (registers) in the checkpoint's place: it builds through
    mmseg, takes the checkpoint's structure and predicts."""
    cfg = Config.fromfile(
        ROOT / 'configs' / 'upernet_hetdpt_dinov2-b_ade20k.py'
    )
    backbone_cfg = cfg.model.backbone
    assert backbone_cfg.type == 'HetDPTLayerScaleViT'
    assert cfg.model.decode_head.in_channels == [768] * 4
    merged = small_checkpoint(
        tmp_path / 'merged.pth', TINY, TINY_SPEC, reg_tokens=4, merged=True
    )
    # A dict arch: the registers of the -reg4 preset are given as such.
    backbone_cfg.update(
        arch=TINY,
        out_indices=(0, 1, 2, 3),
        reg_tokens=4,
        no_embed_class=True,
        init_cfg=dict(
            type='Pretrained', checkpoint=str(tmp_path / 'merged.pth')
        ),
    )
    cfg.model.neck.in_channels = [48] * 4
    cfg.model.neck.out_channels = 48
    cfg.model.decode_head.in_channels = [48] * 4
    cfg.model.decode_head.channels = 16
    cfg.model.auxiliary_head.in_channels = 48
    cfg.model.auxiliary_head.channels = 16
    model = build_from_config(cfg)
    model.init_weights()
    assert model.backbone.form == 'merged'
    assert model.backbone.prune_spec == merged.prune_spec
    assert model.backbone.reg_token.shape[1] == 4
    with torch.no_grad():
        results = model.test_step(
            make_test_batch(cfg.default_scope, 1, (70, 84))
        )
    assert len(results) == 1
