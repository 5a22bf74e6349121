"""The toolboxes' own loading paths rebuild the backbone a checkpoint holds
(issue 18, item 1; item 2, checkpoints of mmdet's own tools/train.py, is
test_dense_prediction.py::test_mmdet_tools_train_matches_ours), depth-pruned
(HetDPT) or depth- and width-pruned (HetDPT+, issue 17), for every family
(issue 16).

Per variant, demo detectors, segmentors and classifiers (the ViT's DETR,
UperNet and classifier, depth- or depth- and width-pruned; the Swin's Mask
R-CNN, UperNet and classifier; the LayerScale ViT's UperNet and classifier)
are trained for one iteration with a merged backbone; their checkpoints are
then opened, with the stock demo configs (whose classification checkpoint is
absent, or which describe the dense network), through every API OpenMMLab
users call.  Each must give the
predictions of the model tools/test.py builds (our runner, ``load_from``).
For a HetDPT+ backbone the stock config only gets the ``in_channels`` of the
module taking the backbone's features set to the embedding width
(docs/user_guides/hetdpt_plus.md); the backbone's widths come from the
checkpoint.
"""

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Union

import pytest
import torch
from helpers import randomize_
from mmengine.config import Config
from mmengine.registry import MODELS, DefaultScope
from mmengine.runner import load_checkpoint

from hetdpt_demo.data import (
    make_classification,
    make_detection,
    make_segmentation,
)
from hetdpt_mm import PruneSpec
from hetdpt_mm.checkpoint.reader import read_backbone_checkpoint
from hetdpt_mm.errors import CheckpointError
from hetdpt_mm.pruning.width_checkpoint import prune_width_checkpoint
from hetdpt_mm.runner import build_runner

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / 'configs/demo'
#: A spec of the 6-block demo ViT with blocks of all four kinds.
DEMO_SPEC = PruneSpec(6, attn_removed=[0, 3, 4], act_removed=[2, 4, 5])
VIT_CONFIGS = dict(
    det=DEMO / 'detr_hetdpt_demo.py',
    seg=DEMO / 'upernet_hetdpt_demo.py',
    cls=DEMO / 'vit-demo_digits.py',
)


@dataclass
class Variant:
    family: str
    #: The demo config of each task.
    configs: Dict[str, Path]
    #: The merged depth structure of the classifier they start from.
    spec: PruneSpec
    #: HetDPT+: the ratio of the width pruning after the depth's.
    width_ratio: Optional[float] = None


VARIANTS = {
    'depth': Variant('vit', VIT_CONFIGS, DEMO_SPEC),
    'depth+width': Variant('vit', VIT_CONFIGS, DEMO_SPEC, width_ratio=0.3),
    # 8 blocks over four stages, blocks of all four kinds.
    'swin': Variant(
        'swin',
        dict(
            det=DEMO / 'mask-rcnn_hetdpt-swin_demo.py',
            seg=DEMO / 'upernet_hetdpt-swin_demo.py',
            cls=DEMO / 'swin-demo_digits.py',
        ),
        PruneSpec(8, attn_removed=[0, 3, 5], act_removed=[1, 3, 6]),
    ),
    'layerscale_vit': Variant(
        'layerscale_vit',
        dict(
            seg=DEMO / 'upernet_hetdpt-dinov2_demo.py',
            cls=DEMO / 'dinov2-demo_digits.py',
        ),
        DEMO_SPEC,
    ),
}
#: What the training run of each task saves after its one iteration.
SAVED = dict(det='epoch_1.pth', seg='iter_1.pth', cls='epoch_1.pth')


def variants_with(task: str) -> list:
    return [
        name for name, variant in VARIANTS.items() if task in variant.configs
    ]


def first_image(pattern: str) -> str:
    return str(sorted(Path.cwd().glob(pattern))[0])


@dataclass
class Workspace:
    root: Path
    family: str
    configs: Dict[str, Path]
    #: One-iteration training checkpoints by task.
    checkpoints: Dict[str, Path]
    #: The structure they hold (with widths for HetDPT+).
    spec: PruneSpec

    def config(self, task: str) -> Union[str, Config]:
        """The stock demo config of ``task``; for a HetDPT+ backbone with the
        feature taker's ``in_channels`` set to the embedding width, as a
        user of the toolboxes' APIs does (docs/user_guides/hetdpt_plus.md)."""
        if self.spec.widths is None:
            return str(self.configs[task])
        cfg = Config.fromfile(self.configs[task])
        width = self.spec.widths.embed_dims
        if task == 'cls':
            cfg.model.head.in_channels = width
        else:
            cfg.model.neck.in_channels = [width] * len(
                cfg.model.neck.in_channels
            )
        return cfg

    def loaded_config(self, task: str) -> Config:
        config = self.config(task)
        return Config.fromfile(config) if isinstance(config, str) else config


@pytest.fixture(scope='module', params=list(VARIANTS))
def workspace(request, tmp_path_factory, one_thread):
    """For the variant ``request.param``, a working directory with the demo
    data, a merged demo classifier with random weights (``depth+width``:
    pruned in width too), and one-iteration training checkpoints of the
    variant's demo models started from it (the configs' own checkpoint
    paths, ``work_dirs/...``, stay absent)."""
    variant = VARIANTS[request.param]
    root = tmp_path_factory.mktemp('apis')
    cwd = os.getcwd()
    os.chdir(root)
    try:
        make_detection('data/demo/coco', num_train=4, num_val=2)
        make_segmentation('data/demo/ade', num_train=4, num_val=2)
        make_classification('data/demo/cls')
        cfg = Config.fromfile(variant.configs['cls'])
        cfg.model.backbone.update(
            prune_spec=variant.spec.to_dict(), merged=True
        )
        with DefaultScope.overwrite_default_scope(cfg.default_scope):
            classifier = randomize_(MODELS.build(cfg.model))
        start = dict(state_dict=classifier.state_dict())
        if variant.width_ratio is not None:
            start, _ = prune_width_checkpoint(
                start, ratio=variant.width_ratio, importance='magnitude'
            )
        torch.save(start, root / 'merged_cls.pth')
        spec = read_backbone_checkpoint(root / 'merged_cls.pth').record.spec
        assert (spec.widths is None) == (variant.width_ratio is None)
        checkpoints = {
            task: train_one_iteration(config, task, root)
            for task, config in variant.configs.items()
        }
        yield Workspace(
            root, variant.family, variant.configs, checkpoints, spec
        )
    finally:
        os.chdir(cwd)


def one_iteration(cfg, task: str):
    """``cfg`` trained for one iteration (one epoch of 4 images)."""
    cfg.train_dataloader.batch_size = 4
    cfg.train_dataloader.dataset.indices = 4
    if task == 'seg':
        cfg.train_cfg.update(max_iters=1, val_interval=10)
    else:
        cfg.train_cfg.update(max_epochs=1, val_interval=10)
    if task == 'cls':  # its cosine phase starts after the first epoch
        cfg.param_scheduler = None
    cfg.default_hooks.checkpoint.interval = 1
    return cfg


def train_one_iteration(config: Path, task: str, root: Path) -> Path:
    cfg = one_iteration(Config.fromfile(config), task)
    work_dir = root / f'train_{task}'
    cfg.work_dir = str(work_dir)
    cfg.model.backbone.init_cfg = dict(
        type='Pretrained', checkpoint=str(root / 'merged_cls.pth')
    )
    build_runner(cfg).train()
    return work_dir / SAVED[task]


def reference_model(config: Path, checkpoint: Path, tmp_path: Path):
    """The model tools/test.py tests: our runner with ``load_from``."""
    cfg = Config.fromfile(config)
    cfg.work_dir = str(tmp_path / 'reference')
    cfg.load_from = str(checkpoint)
    runner = build_runner(cfg)
    runner.load_or_resume()
    model = runner.model.eval()
    model.cfg = model._config = cfg  # what mmdet's / mmpretrain's APIs read
    return model


def assert_merged_demo(model, workspace: Workspace) -> None:
    spec = workspace.spec
    assert model.backbone.family == workspace.family
    assert model.backbone.form == 'merged'
    assert model.backbone.prune_spec == spec
    if spec.widths is not None:
        assert model.backbone.embed_dims == spec.widths.embed_dims


# ------------------------------------------------------------- detection
def detections(model_or_inferencer, image):
    from mmdet.apis import DetInferencer, inference_detector

    if isinstance(model_or_inferencer, DetInferencer):
        result = model_or_inferencer(image, return_datasamples=True)
        sample = result['predictions'][0]
    else:
        sample = inference_detector(model_or_inferencer, image)
    return sample.pred_instances


def assert_same_detections(got, want):
    torch.testing.assert_close(got.scores, want.scores, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got.bboxes, want.bboxes, atol=1e-3, rtol=1e-4)
    assert torch.equal(got.labels, want.labels)


@pytest.mark.parametrize('workspace', variants_with('det'), indirect=True)
def test_mmdet_apis_rebuild_the_trained_detector(workspace, tmp_path):
    from mmdet.apis import DetInferencer, init_detector

    checkpoint = workspace.checkpoints['det']
    image = first_image('data/demo/coco/val2017/*.jpg')
    reference = reference_model(workspace.configs['det'], checkpoint, tmp_path)
    assert_merged_demo(reference, workspace)
    want = detections(reference, image)

    model = init_detector(
        workspace.config('det'), str(checkpoint), device='cpu'
    )
    assert_merged_demo(model, workspace)
    assert_same_detections(detections(model, image), want)

    inferencer = DetInferencer(
        model=workspace.config('det'),
        weights=str(checkpoint),
        device='cpu',
        show_progress=False,
    )
    assert_merged_demo(inferencer.model, workspace)
    assert_same_detections(detections(inferencer, image), want)


# ---------------------------------------------------------- segmentation
def segmentation_logits(model_or_inferencer, image):
    from mmseg.apis import MMSegInferencer, inference_model

    if isinstance(model_or_inferencer, MMSegInferencer):
        sample = model_or_inferencer(image, return_datasamples=True)
    else:
        sample = inference_model(model_or_inferencer, image)
    return sample.seg_logits.data


@pytest.mark.parametrize('workspace', variants_with('seg'), indirect=True)
def test_mmseg_apis_rebuild_the_trained_segmentor(workspace, tmp_path):
    from mmseg.apis import MMSegInferencer, init_model

    checkpoint = workspace.checkpoints['seg']
    image = first_image('data/demo/ade/images/validation/*.jpg')
    reference = reference_model(workspace.configs['seg'], checkpoint, tmp_path)
    assert_merged_demo(reference, workspace)
    want = segmentation_logits(reference, image)

    model = init_model(workspace.config('seg'), str(checkpoint), device='cpu')
    assert_merged_demo(model, workspace)
    torch.testing.assert_close(
        segmentation_logits(model, image), want, atol=1e-4, rtol=1e-4
    )

    inferencer = MMSegInferencer(
        model=workspace.config('seg'), weights=str(checkpoint), device='cpu'
    )
    assert_merged_demo(inferencer.model, workspace)
    torch.testing.assert_close(
        segmentation_logits(inferencer, image), want, atol=1e-4, rtol=1e-4
    )


# -------------------------------------------------------- classification
def class_scores(model_or_inferencer, image):
    from mmpretrain.apis import ImageClassificationInferencer

    if not isinstance(model_or_inferencer, ImageClassificationInferencer):
        model_or_inferencer = ImageClassificationInferencer(
            model_or_inferencer, device='cpu'
        )
    return torch.as_tensor(model_or_inferencer(image)[0]['pred_scores'])


@pytest.mark.parametrize('workspace', variants_with('cls'), indirect=True)
def test_mmpretrain_apis_rebuild_the_trained_classifier(workspace, tmp_path):
    from mmpretrain.apis import ImageClassificationInferencer, get_model

    checkpoint = workspace.checkpoints['cls']
    image = first_image('data/demo/cls/val/*/*.png')
    reference = reference_model(workspace.configs['cls'], checkpoint, tmp_path)
    assert_merged_demo(reference, workspace)
    want = class_scores(reference, image)

    model = get_model(
        workspace.config('cls'), pretrained=str(checkpoint), device='cpu'
    )
    assert_merged_demo(model, workspace)
    torch.testing.assert_close(
        class_scores(model, image), want, atol=1e-5, rtol=1e-4
    )

    inferencer = ImageClassificationInferencer(
        workspace.config('cls'), pretrained=str(checkpoint), device='cpu'
    )
    assert_merged_demo(inferencer.model, workspace)
    torch.testing.assert_close(
        class_scores(inferencer, image), want, atol=1e-5, rtol=1e-4
    )


# ------------------------------------------------- mmengine loading paths
def test_load_checkpoint_and_resume_rebuild_the_backbone(workspace, tmp_path):
    # Every task in one test: a test per (variant, task) would have pytest
    # order them by task and rebuild the module's workspaces.
    for task in workspace.checkpoints:
        check_load_checkpoint_and_resume(workspace, task, tmp_path / task)


def check_load_checkpoint_and_resume(workspace, task, tmp_path):
    checkpoint = workspace.checkpoints[task]
    reference = reference_model(workspace.configs[task], checkpoint, tmp_path)
    cfg = workspace.loaded_config(task)
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        model = MODELS.build(copy.deepcopy(cfg.model))
    assert model.backbone.form == 'pruned'  # the config's default
    load_checkpoint(model, str(checkpoint), map_location='cpu')
    assert_merged_demo(model, workspace)
    assert model.state_dict().keys() == reference.state_dict().keys()
    for key, value in reference.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), (task, key)

    # tools/train.py --resume CHECKPOINT: the run continues on the trained
    # structure (the one epoch / iteration is done, so it only loads).
    cfg.work_dir = str(tmp_path / 'resumed')
    cfg.resume, cfg.load_from = True, str(checkpoint)
    runner = build_runner(one_iteration(cfg, task))
    runner.train()
    assert_merged_demo(runner.model, workspace)
    for key, value in reference.state_dict().items():
        assert torch.equal(runner.model.state_dict()[key], value), (task, key)


@pytest.mark.parametrize('workspace', ['depth', 'depth+width'], indirect=True)
def test_a_given_structure_that_differs_is_an_error_naming_both(workspace):
    from mmdet.apis import init_detector

    cfg = workspace.loaded_config('det')
    cfg.model.backbone.update(prune_spec=dict(attn_removed=[1]), merged=True)
    with pytest.raises(CheckpointError) as error:
        init_detector(cfg, str(workspace.checkpoints['det']), device='cpu')
    message = str(error.value)
    assert str(workspace.spec) in message
    assert str(PruneSpec(6, attn_removed=[1])) in message


def test_an_absent_init_cfg_checkpoint_waits_for_loaded_weights(tmp_path):
    """Where the config's classification checkpoint is absent, weights loaded
    after init_weights make it irrelevant; without them the first forward
    names the file (a run never starts silently from random weights)."""
    from hetdpt_mm.models import HetDPTViT

    arch = dict(embed_dims=32, num_layers=2, num_heads=2)
    absent = str(tmp_path / 'absent.pth')
    backbone = HetDPTViT(
        arch,
        img_size=32,
        patch_size=8,
        init_cfg=dict(type='Pretrained', checkpoint=absent),
    )
    backbone.init_weights()
    image = torch.zeros(1, 3, 32, 32)
    with pytest.raises(CheckpointError, match=f'{absent} does not exist'):
        backbone(image)
    trained = randomize_(HetDPTViT(arch, img_size=32, patch_size=8))
    backbone.load_state_dict(trained.state_dict())
    torch.testing.assert_close(backbone(image), trained(image))
