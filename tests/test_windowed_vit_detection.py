"""ViTDet's Mask R-CNN with a pruned, merged windowed ViT (issue 61): the
demo config (configs/demo/mask-rcnn_hetdpt-vitdet_demo.py, built on the full
ViTDet config with mmdet's projects/ViTDet arguments) starts from a merged
backbone checkpoint, trains two iterations and tests on the toy COCO set;
mmdet's ``init_detector`` rebuilds the pruned backbone from the trained
checkpoint alone, with the config's dense backbone and no backbone file.
The full configs (ViTDet's Mask R-CNN, the SAM encoder's UperNet) take one
training step."""

import os
from pathlib import Path

import pytest
import torch
from helpers import (
    build_model,
    detection_batch,
    randomize_,
    segmentation_batch,
    with_masks,
)
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope

from hetdpt_demo.data import make_detection
from hetdpt_mm import PruneSpec
from hetdpt_mm.checkpoint.reader import read_backbone_checkpoint
from hetdpt_mm.runner import build_runner

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / 'configs/demo/mask-rcnn_hetdpt-vitdet_demo.py'
#: Block 1's global attention and blocks 0 and 2's GELUs removed, block 3
#: both (its residual GELU kept).
SPEC = PruneSpec(4, attn_removed=[1, 3], act_removed=[0, 2, 3])


@pytest.fixture(scope='module')
def trained(tmp_path_factory, one_thread):
    """The toy COCO set, the merged backbone the demo config names (random
    weights), and the config trained for one epoch of two iterations."""
    from mmdet.registry import MODELS

    root = tmp_path_factory.mktemp('vitdet')
    cwd = os.getcwd()
    os.chdir(root)
    try:
        make_detection('data/demo/coco', num_train=4, num_val=2)
        cfg = Config.fromfile(CONFIG)
        args = dict(cfg.model.backbone, init_cfg=None)
        with DefaultScope.overwrite_default_scope('mmdet'):
            backbone = MODELS.build(
                dict(args, prune_spec=SPEC.to_dict(), merged=True)
            )
        path = Path(cfg.hetdpt_checkpoint)
        path.parent.mkdir(parents=True)
        torch.save(dict(state_dict=randomize_(backbone).state_dict()), path)
        cfg.work_dir = 'work_dirs/train'
        cfg.train_dataloader.batch_size = 2
        cfg.train_cfg.update(max_epochs=1, val_interval=1)
        cfg.default_hooks.checkpoint.interval = 1
        runner = build_runner(cfg)
        runner.train()
        yield root, runner, Path(cfg.work_dir) / 'epoch_1.pth'
    finally:
        os.chdir(cwd)


def test_trains_two_iterations_and_tests(trained):
    root, runner, checkpoint = trained
    assert runner.iter == 2
    backbone = runner.model.backbone
    assert (backbone.form, backbone.prune_spec) == ('merged', SPEC)
    scalars = runner.message_hub.log_scalars
    for key in ('loss', 'loss_rpn_cls', 'loss_cls', 'loss_mask'):
        assert torch.isfinite(
            torch.tensor(scalars[f'train/{key}'].current())
        ), key
    record = read_backbone_checkpoint(root / checkpoint).record
    assert (record.family, record.form, record.spec) == (
        'windowed_vit',
        'merged',
        SPEC,
    )
    cfg = Config.fromfile(CONFIG)
    cfg.work_dir = str(root / 'work_dirs/test')
    cfg.load_from = str(root / checkpoint)
    metrics = build_runner(cfg, test=True).test()
    assert {'coco/bbox_mAP', 'coco/segm_mAP'} <= metrics.keys()


def test_init_detector_rebuilds_the_pruned_backbone(trained, tmp_path):
    """The config describes the dense network and its backbone file is
    gone: the structure comes from the detector checkpoint's record."""
    from mmdet.apis import inference_detector, init_detector

    root, runner, checkpoint = trained
    cfg = Config.fromfile(CONFIG)
    cfg.model.backbone.init_cfg.checkpoint = str(tmp_path / 'absent.pth')
    model = init_detector(cfg, str(root / checkpoint), device='cpu')
    backbone = model.backbone
    assert (backbone.form, backbone.prune_spec) == ('merged', SPEC)
    trained_state = runner.model.state_dict()
    for key, value in model.state_dict().items():
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            torch.testing.assert_close(value, trained_state[key], msg=key)
    image = str(sorted(root.glob('data/demo/coco/val2017/*.jpg'))[0])
    runner.model.cfg = model.cfg
    got = inference_detector(model, image).pred_instances
    want = inference_detector(runner.model, image).pred_instances
    torch.testing.assert_close(got.scores, want.scores)
    torch.testing.assert_close(got.bboxes, want.bboxes)


FULL_SPEC = PruneSpec(12, attn_removed=[2, 4, 11], act_removed=[0, 4, 9])


@pytest.mark.parametrize(
    'config, batch',
    [
        (
            'mask-rcnn_hetdpt_vitdet-b_simplefpn_lsj-100e_coco.py',
            lambda: with_masks(detection_batch([(64, 64)] * 2, 80)),
        ),
        (
            'upernet_hetdpt_sam-b_ade20k.py',
            lambda: segmentation_batch([(64, 64)] * 2, 150),
        ),
    ],
)
def test_full_configs_train_one_step(config, batch, one_thread):
    """The full ViT-B configs, merged with a spec removing global and
    windowed attention, at 64x64: one optimizer step (layer-wise decay for
    the detector), then a prediction."""
    cfg = Config.fromfile(ROOT / 'configs' / config)
    cfg.model.backbone.update(
        init_cfg=None, prune_spec=FULL_SPEC.to_dict(), merged=True
    )
    preprocessor = cfg.model.data_preprocessor
    if 'batch_augments' in preprocessor:
        preprocessor.batch_augments[0].size = (64, 64)
    if 'size' in preprocessor:
        preprocessor.size = (64, 64)
    model = build_model(cfg)
    model.init_weights()
    assert (model.backbone.form, model.backbone.prune_spec) == (
        'merged',
        FULL_SPEC,
    )
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    log_vars = model.train().train_step(batch(), optim_wrapper)
    assert torch.isfinite(log_vars['loss'])
    with torch.no_grad():
        assert len(model.eval().test_step(batch())) == 2
