"""A merged file made from timm / official weights (issue 51 item 1) loads
where docs/user_guides/pruning.md sends it ("to deploy or evaluate it"):
mmpretrain's ``get_model(cfg, pretrained=...)``,
``ImageClassificationInferencer``, ``load_from`` / tools/test.py
(MMEngine's ``load_checkpoint``) and a backbone's
``init_cfg=dict(type='Pretrained', prefix='backbone.')``, each with the
pruned structure its record carries and the logits of the merged network
the project builds from the dense file."""

import json

import numpy as np
import pytest
import timm
import torch
from helpers import (
    REPO,
    load_tool,
    randomize_,
    write_tiny_config,
    write_tiny_deit_inputs,
)
from mmengine.config import Config
from mmengine.runner import load_checkpoint

from hetdpt_mm.checkpoint.safe_load import load_checkpoint_file

SPEC = dict(attn_removed=[0, 3], act_removed=[2, 5])
VIT = dict(embed_dim=96, depth=6, num_heads=3, img_size=32, patch_size=4)
VIT_ARCH = dict(embed_dims=96, num_layers=6, num_heads=3, mlp_ratio=4)
#: family: (demo config, our backbone's arguments besides the config's,
#: timm model and its arguments, --arch, input size); at 32² timm shrinks
#: the Swin's windows (and bias tables) in the last two stages.
FAMILIES = {
    'vit': (
        'vit-demo_digits.py',
        {},
        ('deit_tiny_patch16_224', VIT),
        VIT_ARCH,
        32,
    ),
    'layerscale_vit': (
        'vit-demo_digits.py',
        dict(type='HetDPTLayerScaleViT', no_embed_class=True),
        ('deit3_small_patch16_224', VIT),
        VIT_ARCH,
        32,
    ),
    'swin': (
        'swin-demo_digits.py',
        {},
        (
            'swin_tiny_patch4_window7_224',
            dict(
                embed_dim=32,
                depths=(2, 2, 2, 2),
                num_heads=(1, 2, 4, 8),
                img_size=32,
                window_size=4,
            ),
        ),
        None,
        32,
    ),
}


def classifier_config(family: str, **backbone) -> Config:
    config, args = FAMILIES[family][:2]
    cfg = Config.fromfile(f'configs/demo/{config}')
    cfg.model.backbone.update(args, **backbone)
    return cfg


@pytest.fixture(params=sorted(FAMILIES))
def merged_timm_file(request, tmp_path):
    """A seeded tiny timm model saved in timm (or the official) layout,
    merged by tools/merge_ckpt.py; returns (family, timm file, merged
    file)."""
    (timm_name, timm_args), arch = FAMILIES[request.param][2:4]
    model = timm.create_model(
        timm_name, pretrained=False, num_classes=10, **timm_args
    )
    source = tmp_path / 'timm.pth'
    state = randomize_(model, seed=3).state_dict()
    # The DeiT-III release wraps timm's keys in {'model': ...}.
    official = request.param == 'layerscale_vit'
    torch.save(dict(model=state) if official else state, source)
    merged = tmp_path / 'merged.pth'
    argv = [str(source), str(merged), '--spec', json.dumps(SPEC)]
    if arch is not None:
        argv += ['--arch', json.dumps(arch)]
    assert load_tool('merge_ckpt').main(argv) == 0
    return request.param, source, merged


def assert_merged(model, reference, x) -> None:
    backbone = model.backbone
    assert backbone.form == 'merged'
    assert list(backbone.prune_spec.attn_removed) == SPEC['attn_removed']
    assert list(backbone.prune_spec.act_removed) == SPEC['act_removed']
    with torch.no_grad():
        got = model.eval()(x, mode='tensor')
    assert (got - reference).abs().max() <= 1e-5


def test_merged_timm_file_loads_in_every_documented_api(merged_timm_file):
    from mmpretrain.apis import ImageClassificationInferencer, get_model
    from mmpretrain.registry import MODELS

    family, source, merged = merged_timm_file
    # The project's merged network, built from the dense timm file by the
    # config path (init_cfg conversion), not from the merged file.
    cfg = classifier_config(
        family,
        prune_spec=SPEC,
        merged=True,
        init_cfg=dict(type='Pretrained', checkpoint=str(source)),
    )
    cfg.model.head.init_cfg = dict(
        type='PretrainedHeads', checkpoint=str(source)
    )
    cfg.model.pop('init_cfg')
    reference_model = MODELS.build(cfg.model)
    reference_model.init_weights()
    size = FAMILIES[family][4]
    x = torch.randn(
        2, 3, size, size, generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        reference = reference_model.eval()(x, mode='tensor')

    dense = classifier_config(family)
    assert_merged(get_model(dense, pretrained=str(merged)), reference, x)
    inferencer = ImageClassificationInferencer(
        dense, pretrained=str(merged), device='cpu'
    )
    assert_merged(inferencer.model, reference, x)
    image = np.random.default_rng(0).integers(
        0, 255, (size, size, 3), np.uint8
    )
    assert inferencer(image)[0]['pred_scores'].shape == (10,)
    # load_from and tools/test.py: MMEngine's load_checkpoint into the model
    # the dense config builds.
    model = MODELS.build(dense.model)
    load_checkpoint(model, str(merged), map_location='cpu', strict=True)
    assert_merged(model, reference, x)
    # mmdet / mmseg configs: the backbone alone, by prefix.
    backbone_cfg = dict(
        classifier_config(family).model.backbone,
        init_cfg=dict(
            type='Pretrained', checkpoint=str(merged), prefix='backbone.'
        ),
    )
    backbone = MODELS.build(backbone_cfg)
    backbone.init_weights()
    assert backbone.form == 'merged'
    with torch.no_grad():
        features = backbone.eval()(x)
        want = reference_model.backbone(x)
    for got, expected in zip(features, want):
        assert (got[0] - expected[0]).abs().max() <= 1e-5
    record = load_checkpoint_file(merged)['meta']['hetdpt']
    assert record['prefix'] == 'backbone.' and record['form'] == 'merged'


def test_the_merged_file_of_a_distillation_run_is_the_student_alone(
    tmp_path, monkeypatch, one_thread
):
    """Issue 60 item 1: a prune run with a dense teacher (the DeiT-B prune
    config, tiny) writes a merged file whose model, built from that config
    by mmpretrain's get_model, its inferencer and tools/test.py, is the
    pruned student alone: the teacher is training state."""
    from mmpretrain.apis import ImageClassificationInferencer, get_model

    from hetdpt_mm import runner as hetdpt_runner

    files = write_tiny_deit_inputs(tmp_path)
    config = write_tiny_config(
        REPO / 'configs/hetdpt/deit-b_prune-10l_in1k.py',
        tmp_path,
        files['distilled'],
        teacher=files['dense'],
    )
    cfg = Config.fromfile(config)
    cfg.test_dataloader, cfg.test_evaluator = (
        cfg.val_dataloader,
        cfg.val_evaluator,
    )
    cfg.dump(config)
    monkeypatch.chdir(tmp_path)
    # one removal per iteration: the 10 layers in the first 10 of 12
    options = [
        'custom_hooks.0.by_epoch=False',
        'custom_hooks.0.stages=1',
        'train_cfg.max_epochs=6',
        'param_scheduler.0.end=1',
        'param_scheduler.1.begin=1',
    ]
    argv = [str(config), '--work-dir', 'run', '--cfg-options', *options]
    assert load_tool('train').main(argv) == 0
    merged = tmp_path / 'run/deit-b_prune-10l_in1k_merged.pth'
    state = load_checkpoint_file(merged)['state_dict']
    student = sum(
        value.numel()
        for key, value in state.items()
        if not key.endswith('_extra_state')
    )
    assert not any(key.startswith('teacher.') for key in state)

    def assert_student(model):
        assert model.teacher is None
        assert model.backbone.form == 'merged'
        spec = model.backbone.prune_spec
        assert spec.n_attn + spec.n_act == 10
        assert sum(p.numel() for p in model.parameters()) == student

    assert_student(get_model(str(config), pretrained=str(merged)))
    inferencer = ImageClassificationInferencer(
        str(config), pretrained=str(merged), device='cpu'
    )
    assert_student(inferencer.model)
    runners = []
    build_runner = hetdpt_runner.build_runner
    monkeypatch.setattr(
        hetdpt_runner,
        'build_runner',
        lambda *args, **kwargs: (
            runners.append(build_runner(*args, **kwargs)) or runners[-1]
        ),
    )
    assert load_tool('test').main([str(config), str(merged)]) == 0
    assert_student(runners[0].model)
