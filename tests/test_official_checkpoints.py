"""Every layout of a DeiT / ViT checkpoint loads whole and computes what its
source model computes (issue 13; issue 18 items 3 and 8):

* the official (timm / facebookresearch) distilled DeiT file, the
  mmpretrain-format DeiT classifier and the authors' stage-2 file, through
  the classification configs: both heads' logits equal the source model's;
* mmpretrain's and mmseg's ViT backbone layouts: features equal;
* an ``https://`` checkpoint in torch.hub's cache, for backbone and heads.

The sources are the libraries' own models with random weights, saved as their
releases save them; the configs are the real ones at a tiny width.
"""

import argparse

import pytest
import torch
from helpers import MIXED_SPEC, REPO, randomize_, timm_state_dict
from mmengine.config import Config
from mmengine.registry import MODELS, DefaultScope

import hetdpt_mm  # noqa: F401  registers modules and the safe loader
import hetdpt_mm.models.distill  # noqa: F401  HetDPTDistillClassifier
from hetdpt_mm.checkpoint.safe_load import TRUST_ENV
from hetdpt_mm.errors import CheckpointError
from hetdpt_mm.models import HetDPTViT

torch.set_num_threads(2)
DIMS, DEPTH, HEADS, CLASSES = 48, 12, 3, 10
ARCH = dict(embed_dims=DIMS, num_layers=DEPTH, num_heads=HEADS)
SIZE = dict(img_size=32, patch_size=4)
TOL = 1e-5


def build_from_config(name: str, checkpoint, **backbone) -> torch.nn.Module:
    """The classifier of ``configs/hetdpt/<name>`` at a tiny width, starting
    from ``checkpoint`` (backbone and heads); no teacher file."""
    cfg = Config.fromfile(REPO / 'configs' / 'hetdpt' / name)
    model = cfg.model
    model.backbone.update(arch=ARCH, drop_path_rate=0.0, **SIZE, **backbone)
    model.backbone.init_cfg.checkpoint = str(checkpoint)
    model.head.update(num_classes=CLASSES, in_channels=DIMS)
    model.head.init_cfg.checkpoint = str(checkpoint)
    if 'teacher' in model:
        model.teacher = model.teacher_checkpoint = None
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        classifier = MODELS.build(model)
    classifier.init_weights()
    return classifier.eval()


def head_logits(classifier, x):
    """(class head, distillation head) logits of a DeiT classifier."""
    cls_token, dist_token = classifier.extract_feat(x)[-1]
    return (
        classifier.head.layers.head(cls_token),
        classifier.head.layers.head_dist(dist_token),
    )


def assert_close(got, want):
    for a, b in zip(got, want):
        assert a.shape == b.shape
        assert (a - b).abs().max() <= TOL, (a - b).abs().max()


@pytest.fixture
def x():
    generator = torch.Generator().manual_seed(1)
    return torch.randn(2, 3, 32, 32, generator=generator)


def test_official_distilled_deit_loads_with_both_heads(tmp_path, x):
    from timm.models.deit import VisionTransformerDistilled

    source = randomize_(
        VisionTransformerDistilled(
            embed_dim=DIMS,
            depth=DEPTH,
            num_heads=HEADS,
            num_classes=CLASSES,
            **SIZE,
        ),
        seed=2,
    ).eval()
    path = tmp_path / 'deit_tiny_distilled.pth'
    torch.save(dict(model=source.state_dict()), path)  # as DeiT releases it

    classifier = build_from_config('deit-b_dense_in1k.py', path)
    with torch.no_grad():
        feats = source.forward_features(x)
        want = source.head(feats[:, 0]), source.head_dist(feats[:, 1])
        assert_close(head_logits(classifier, x), want)
        # DeiT's inference: the mean of both heads, in both libraries.
        assert_close([classifier(x, mode='tensor')], [source(x)])


def test_mmpretrain_deit_classifier_loads_with_both_heads(tmp_path, x):
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        source = MODELS.build(
            dict(
                type='ImageClassifier',
                backbone=dict(
                    type='DistilledVisionTransformer',
                    arch=dict(
                        embed_dims=DIMS,
                        num_layers=DEPTH,
                        num_heads=HEADS,
                        feedforward_channels=4 * DIMS,
                    ),
                    **SIZE,
                ),
                head=dict(
                    type='DeiTClsHead', num_classes=CLASSES, in_channels=DIMS
                ),
            )
        )
    randomize_(source, seed=3).eval()
    path = tmp_path / 'deit-tiny-distilled_mmpretrain.pth'
    torch.save(
        dict(state_dict=source.state_dict(), meta=dict(epoch=300)), path
    )

    classifier = build_from_config('deit-b_dense_in1k.py', path)
    with torch.no_grad():
        assert_close(head_logits(classifier, x), head_logits(source, x))
        assert_close(
            [classifier(x, mode='tensor')], [source(x, mode='tensor')]
        )


def authors_stage2_file(tmp_path):
    """A stage-2 checkpoint as their train_stage2.py writes it: the pruned
    model (timm layout, both heads) with optimizer state and its argparse
    namespace; and the model that computes its function."""
    source = randomize_(
        HetDPTViT(arch=ARCH, distilled=True, prune_spec=MIXED_SPEC, **SIZE),
        seed=4,
    ).eval()
    heads = {
        name: randomize_(torch.nn.Linear(DIMS, CLASSES), seed=i)
        for i, name in enumerate(('head', 'head_dist'))
    }
    state = timm_state_dict(source)
    for name, linear in heads.items():
        state.update(
            (f'{name}.{k}', v) for k, v in linear.state_dict().items()
        )
    path = tmp_path / 'checkpoint.pth'
    torch.save(
        dict(
            model=state,
            optimizer={},
            epoch=399,
            args=argparse.Namespace(prune_layer_attn='[0,3,7,8,11]'),
        ),
        path,
    )
    return path, source, heads


def test_authors_stage2_file_loads_with_both_heads(tmp_path, x, monkeypatch):
    path, source, heads = authors_stage2_file(tmp_path)
    # Their file pickles an argparse.Namespace: refused unless trusted.
    with pytest.raises(CheckpointError, match=TRUST_ENV):
        build_from_config('deit-b_finetune-10l_in1k.py', path)
    monkeypatch.setenv(TRUST_ENV, '1')
    classifier = build_from_config('deit-b_finetune-10l_in1k.py', path)
    assert classifier.backbone.prune_spec == source.prune_spec
    with torch.no_grad():
        cls_token, dist_token = source(x)[-1]
        want = heads['head'](cls_token), heads['head_dist'](dist_token)
        assert_close(head_logits(classifier, x), want)


def test_stage2_config_cuts_the_official_dense_file_to_its_spec(tmp_path):
    """Stage 2 starts from the dense distilled classifier with the spec
    applied (the conversion of tools/merge_ckpt.py --spec --form pruned)."""
    from timm.models.deit import VisionTransformerDistilled

    source = randomize_(
        VisionTransformerDistilled(
            embed_dim=DIMS,
            depth=DEPTH,
            num_heads=HEADS,
            num_classes=CLASSES,
            **SIZE,
        ),
        seed=5,
    ).eval()
    path = tmp_path / 'deit_tiny_distilled.pth'
    torch.save(dict(model=source.state_dict()), path)
    classifier = build_from_config('deit-b_finetune-10l_in1k.py', path)
    backbone = classifier.backbone
    assert backbone.form == 'pruned'
    assert backbone.prune_spec.to_dict() == dict(depth=DEPTH, **MIXED_SPEC)
    state = backbone.state_dict()
    assert 'blocks.0.attn.qkv.weight' not in state
    for key in ('blocks.1.attn.qkv.weight', 'blocks.2.mlp.fc1.weight'):
        assert torch.equal(state[key], source.state_dict()[key])
    for name in ('head', 'head_dist'):
        assert torch.equal(
            getattr(classifier.head.layers, name).weight,
            getattr(source, name).weight,
        )


def test_mmpretrain_vit_backbone_layout(tmp_path, x):
    from mmpretrain.models.backbones import VisionTransformer

    source = randomize_(
        VisionTransformer(
            arch=dict(
                embed_dims=DIMS,
                num_layers=DEPTH,
                num_heads=HEADS,
                feedforward_channels=4 * DIMS,
            ),
            out_indices=(5, 11),
            **SIZE,
        ),
        seed=6,
    )
    source.eval()  # (its train() returns None)
    path = tmp_path / 'vit_mmpretrain.pth'
    torch.save(
        dict(
            state_dict={
                f'backbone.{k}': v for k, v in source.state_dict().items()
            }
        ),
        path,
    )
    backbone = HetDPTViT(
        arch=ARCH,
        out_indices=(5, 11),
        **SIZE,
        init_cfg=dict(type='Pretrained', checkpoint=str(path)),
    )
    backbone.init_weights()
    with torch.no_grad():
        assert_close(backbone.eval()(x), source(x))


def test_mmseg_converted_vit_layout(tmp_path, x):
    """mmseg's ViT (nn.MultiheadAttention, no patch-embedding bias) as its
    vit2mmseg converter saves it: a bare state dict."""
    from mmseg.models.backbones import VisionTransformer

    source = randomize_(
        VisionTransformer(
            embed_dims=DIMS,
            num_layers=DEPTH,
            num_heads=HEADS,
            out_indices=(3, 11),
            final_norm=True,
            norm_cfg=dict(type='LN', eps=1e-6),
            interpolate_mode='bicubic',
            **SIZE,
        ),
        seed=7,
    )
    source.eval()  # (its train() returns None)
    assert 'layers.0.attn.attn.in_proj_weight' in source.state_dict()
    path = tmp_path / 'vit_mmseg.pth'
    torch.save(source.state_dict(), path)
    backbone = HetDPTViT(
        arch=ARCH,
        out_type='featmap',
        out_indices=(3, 11),
        **SIZE,
        init_cfg=dict(type='Pretrained', checkpoint=str(path)),
    )
    backbone.init_weights()
    with torch.no_grad():
        assert_close(backbone.eval()(x), source(x))


def test_https_checkpoint_comes_from_the_hub_cache(tmp_path, x, monkeypatch):
    """``init_cfg`` with a release URL (how OpenMMLab configs name
    pretrained weights) loads through torch.hub's cache and the safe
    loader, for the backbone and the heads."""
    from timm.models.deit import VisionTransformerDistilled

    source = randomize_(
        VisionTransformerDistilled(
            embed_dim=DIMS,
            depth=DEPTH,
            num_heads=HEADS,
            num_classes=CLASSES,
            **SIZE,
        ),
        seed=8,
    ).eval()
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch'))
    cache = tmp_path / 'torch' / 'hub' / 'checkpoints'
    cache.mkdir(parents=True)
    torch.save(dict(model=source.state_dict()), cache / 'deit_tiny_d.pth')

    def no_download(url, *args, **kwargs):
        raise AssertionError(f'tried to download {url}')

    monkeypatch.setattr(torch.hub, 'download_url_to_file', no_download)
    classifier = build_from_config(
        'deit-b_dense_in1k.py',
        'https://dl.fbaipublicfiles.com/deit/deit_tiny_d.pth',
    )
    with torch.no_grad():
        assert_close([classifier(x, mode='tensor')], [source(x)])


def test_dropping_the_distillation_token_warns(tmp_path, monkeypatch):
    distilled = HetDPTViT(arch=ARCH, distilled=True, **SIZE)
    path = tmp_path / 'distilled.pth'
    torch.save(dict(model=timm_state_dict(distilled)), path)
    logged = []
    monkeypatch.setattr(
        'hetdpt_mm.models.vit.backbone.print_log',
        lambda msg, logger=None, level=20: logged.append((level, msg)),
    )
    plain = HetDPTViT(
        arch=ARCH,
        **SIZE,
        init_cfg=dict(type='Pretrained', checkpoint=str(path)),
    )
    plain.init_weights()
    assert any(
        level == 30 and 'distillation token' in msg for level, msg in logged
    ), logged


def test_authors_search_file_loads_its_weights(tmp_path, x):
    """Their search network wraps each timm block (``blocks.N.block.*``,
    ``attn.attention.*``, scores ``learn_mask``); its gate flags are not
    saved, so the file gives the dense weights (the spec is in their log)."""
    from timm.models.vision_transformer import VisionTransformer

    source = randomize_(
        VisionTransformer(
            embed_dim=DIMS,
            depth=DEPTH,
            num_heads=HEADS,
            num_classes=CLASSES,
            **SIZE,
        ),
        seed=9,
    ).eval()
    state = {}
    for key, value in source.state_dict().items():
        if key.startswith('blocks.'):
            index, rest = key[len('blocks.') :].split('.', 1)
            rest = rest.replace('attn.', 'attn.attention.')
            key = f'blocks.{index}.block.{rest}'
        state[key] = value
    for index in range(DEPTH):
        for gated in ('attn', 'mlp.act'):
            state[f'blocks.{index}.block.{gated}.learn_mask'] = torch.tensor(
                0.1 * index
            )
    path = tmp_path / 'stage1_step2_checkpoint.pth'
    torch.save(dict(model=state), path)
    backbone = HetDPTViT(
        arch=ARCH,
        **SIZE,
        init_cfg=dict(type='Pretrained', checkpoint=str(path)),
    )
    backbone.init_weights()
    assert backbone.prune_spec.is_dense
    with torch.no_grad():
        assert_close(backbone.eval()(x), [source.forward_features(x)[:, 0]])
