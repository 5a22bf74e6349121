"""Helpers shared by the tests (importable as `helpers`, see pytest.ini)."""

import importlib.util
from pathlib import Path
from types import ModuleType, SimpleNamespace

import torch
from mmdet.structures import DetDataSample
from mmengine.config import Config
from mmengine.logging import MMLogger
from mmengine.optim import build_optim_wrapper
from mmengine.registry import MODELS, DefaultScope
from mmengine.structures import InstanceData, PixelData
from mmseg.structures import SegDataSample

import hetdpt_mm  # noqa: F401  registers modules and the safe loader
from hetdpt_mm import models

#: A spec with blocks of all four kinds (full, attention removed, GELU
#: removed, both removed) used throughout the tests.
MIXED_SPEC = dict(attn_removed=[0, 3, 7, 8, 11], act_removed=[2, 7, 8, 10, 11])

REPO = Path(__file__).resolve().parents[1]
#: mmpretrain's ViT / DeiT3, tiny (the keys of their arch dicts).
MMPRETRAIN_TINY = dict(
    arch=dict(
        embed_dims=32, num_layers=3, num_heads=2, feedforward_channels=64
    ),
    img_size=32,
    patch_size=8,
)
#: Non-square, not a multiple of the patch: the position embedding is
#: resampled and the input padded.
STOCK_INPUT_SHAPE = (2, 3, 32, 40)


def load_tool(name: str) -> ModuleType:
    """``tools/<name>.py`` as a module, to run its ``main()`` in-process (a
    fresh interpreter per case would cost seconds each).  For a tool's
    command-line surface only (exit status, ``error:`` messages): its logic
    is in the package, where the tests import it."""
    spec = importlib.util.spec_from_file_location(
        f'{name}_tool', REPO / 'tools' / f'{name}.py'
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The dense demo classifier's config (a 6-block ViT on 32 x 32 digits).
DENSE_CONFIG = REPO / 'configs/demo/vit-demo_digits.py'


def small_config(path, base, data_root, **overrides) -> str:
    """A demo config on a few images of ``data_root``: two epochs of 16
    images, a checkpoint after each."""
    lines = [
        f'_base_ = [{str(base)!r}]',
        f'data_root = {str(data_root)!r}',
        'train_dataloader = dict(dataset=dict(data_root=data_root, '
        'indices=16))',
        'val_dataloader = dict(dataset=dict(data_root=data_root, indices=16))',
        'test_dataloader = val_dataloader',
        'train_cfg = dict(max_epochs=2, val_interval=2)',
        'default_hooks = dict(checkpoint=dict(interval=1))',
    ]
    lines += [f'{key} = {value}' for key, value in overrides.items()]
    path.write_text('\n'.join(lines) + '\n')
    return str(path)


def config_backbone_on_meta(config):
    """The backbone of a config file, built on the meta device (no weights
    loaded: fast at any size), and the config's head."""
    cfg = Config.fromfile(config)
    args = dict(cfg.model.backbone)
    args.pop('init_cfg', None)
    family = getattr(models, args.pop('type'))
    with torch.device('meta'):
        backbone = family(**args)
    return backbone, cfg.model.head


def timm_state_dict(module: torch.nn.Module) -> dict:
    """The tensors as timm, DeiT and the authors' release save them: without
    the HetDPT record our backbones add to their state dicts."""
    return {
        k: v
        for k, v in module.state_dict().items()
        if not k.endswith('_extra_state')
    }


def assert_same_outputs(stock, ours, input_shape, atol: float = 1e-5):
    """``ours`` gives ``stock``'s outputs (feature lists flattened) on one
    seeded batch of ``input_shape``, each within ``atol``."""
    x = torch.randn(input_shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, got = list(_flat(stock(x))), list(_flat(ours(x)))
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        assert (a - b).abs().max() <= atol


def _flat(outputs):
    for output in outputs:
        if isinstance(output, (list, tuple)):
            yield from output
        else:
            yield output


def randomized_stock(cls, **args):
    """A stock backbone with random weights of a realistic scale (its
    LayerNorms near identity)."""
    stock = cls(**args)
    randomize_(stock, std=0.05)
    with torch.no_grad():
        for module in stock.modules():
            if isinstance(module, torch.nn.LayerNorm):
                torch.nn.init.normal_(module.weight, 1, 0.1)
                torch.nn.init.normal_(module.bias, 0, 0.1)
    stock.eval()  # (mmseg's and mmpretrain's train() return None)
    return stock


def randomize_(module: torch.nn.Module, seed: int = 0, std: float = 0.02):
    """Give every parameter random values of a realistic scale (LayerNorm
    weights around 1), so that equality tests are not trivially small."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if name.endswith('hetdpt_score'):
                continue
            noise = torch.randn(param.shape, generator=generator) * std
            if 'norm' in name and name.endswith('weight'):
                noise = noise + 1
            param.copy_(noise)
    return module


def fake_runner(
    model, paramwise_cfg=None, max_epochs=3, iters_per_epoch=4, cfg=None
):
    """What the HetDPT hooks read from a Runner before and during training:
    AdamW with weight decay, not on the gate scores unless
    ``paramwise_cfg`` says otherwise."""
    optim_wrapper = build_optim_wrapper(
        model,
        dict(
            optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05),
            paramwise_cfg=paramwise_cfg
            if paramwise_cfg is not None
            else dict(custom_keys={'hetdpt_score': dict(decay_mult=0.0)}),
        ),
    )
    return SimpleNamespace(
        model=model,
        optim_wrapper=optim_wrapper,
        cfg=cfg or Config(),
        train_dataloader=[None] * iters_per_epoch,
        max_epochs=max_epochs,
        max_iters=max_epochs * iters_per_epoch,
        iter=0,
        epoch=0,
        logger=MMLogger.get_current_instance(),
    )


def build_model(cfg):
    # In the config's scope, without leaving it as the default for the
    # tests that run after these (registries follow the default scope).
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        return MODELS.build(cfg.model)


def with_masks(data):
    """Box-filling instance masks, for Mask R-CNN."""
    from mmdet.structures.mask import BitmapMasks

    for sample in data['data_samples']:
        h, w = sample.img_shape
        boxes = sample.gt_instances.bboxes.round().long()
        masks = torch.zeros(len(boxes), h, w, dtype=torch.uint8)
        for mask, (x1, y1, x2, y2) in zip(masks, boxes.tolist()):
            mask[y1:y2, x1:x2] = 1
        sample.gt_instances.masks = BitmapMasks(masks.numpy(), h, w)
    return data


def detection_batch(shapes, num_classes):
    generator = torch.Generator().manual_seed(0)
    inputs, samples = [], []
    for h, w in shapes:
        inputs.append(
            torch.randint(
                0, 256, (3, h, w), dtype=torch.uint8, generator=generator
            )
        )
        corner = torch.rand(3, 2, generator=generator) * torch.tensor(
            [w / 2, h / 2]
        )
        size = (
            torch.rand(3, 2, generator=generator) * 0.4 + 0.1
        ) * torch.tensor([w, h])
        sample = DetDataSample(
            metainfo=dict(
                img_shape=(h, w), ori_shape=(h, w), scale_factor=(1.0, 1.0)
            )
        )
        sample.gt_instances = InstanceData(
            bboxes=torch.cat([corner, corner + size], dim=1),
            labels=torch.randint(0, num_classes, (3,), generator=generator),
        )
        samples.append(sample)
    return dict(inputs=inputs, data_samples=samples)


def segmentation_batch(shapes, num_classes):
    generator = torch.Generator().manual_seed(0)
    inputs, samples = [], []
    for h, w in shapes:
        inputs.append(
            torch.randint(
                0, 256, (3, h, w), dtype=torch.uint8, generator=generator
            )
        )
        sample = SegDataSample(
            metainfo=dict(img_shape=(h, w), ori_shape=(h, w))
        )
        sample.gt_sem_seg = PixelData(
            data=torch.randint(0, num_classes, (1, h, w), generator=generator)
        )
        samples.append(sample)
    return dict(inputs=inputs, data_samples=samples)


# ------------------------------------- paper configs, tiny, on the CPU
#: A 12-block DeiT of width 48 on 7 x 7 patches of the configs' 224 crops,
#: two classes: the paper's ImageNet configs run as written, in seconds.
TINY_DEIT_DIMS, TINY_DEIT_CLASSES, TINY_DEIT_PATCH = 48, 2, 32
TINY_DEIT_ARCH = dict(embed_dims=TINY_DEIT_DIMS, num_layers=12, num_heads=3)


def write_tiny_deit_inputs(root: Path) -> dict:
    """Under ``root``: four small images in two classes (``data/``), and
    the two official DeiT files the ImageNet configs start from (dense DeiT:
    search start and teacher; distilled DeiT: fine-tuning start), of
    :data:`TINY_DEIT_ARCH` with random weights; returns the files by name
    (``'dense'``, ``'distilled'``)."""
    import mmcv
    import numpy as np
    from timm.models.deit import VisionTransformerDistilled
    from timm.models.vision_transformer import VisionTransformer

    rng = np.random.default_rng(0)
    for label in range(TINY_DEIT_CLASSES):
        for index in range(2):
            mmcv.imwrite(
                rng.integers(0, 255, (48, 40, 3), dtype=np.uint8),
                str(root / 'data' / f'class{label}' / f'{index}.png'),
            )
    files = {}
    for name, cls in (
        ('dense', VisionTransformer),
        ('distilled', VisionTransformerDistilled),
    ):
        model = randomize_(
            cls(
                embed_dim=TINY_DEIT_DIMS,
                depth=12,
                num_heads=TINY_DEIT_ARCH['num_heads'],
                patch_size=TINY_DEIT_PATCH,
                num_classes=TINY_DEIT_CLASSES,
            ),
            seed=len(name),
        )
        files[name] = root / f'deit_tiny_{name}.pth'
        torch.save(dict(model=model.state_dict()), files[name])
    return files


def write_tiny_config(config: Path, root: Path, start, teacher=None) -> Path:
    """The ImageNet classification ``config`` as is, but tiny: width,
    classes, data (those of :func:`write_tiny_deit_inputs` under ``root``,
    same pipelines and sampler), one epoch of two iterations; backbone and
    heads start from ``start``, a distillation teacher from ``teacher``.
    Written to ``root / config.name`` for ``tools/train.py``."""
    cfg = Config.fromfile(config)
    model = cfg.model
    model.backbone.update(arch=TINY_DEIT_ARCH, patch_size=TINY_DEIT_PATCH)
    model.backbone.init_cfg.checkpoint = str(start)
    model.head.update(
        num_classes=TINY_DEIT_CLASSES, in_channels=TINY_DEIT_DIMS
    )
    model.head.init_cfg.checkpoint = str(start)
    if teacher is not None:
        model.teacher.backbone.update(
            arch=TINY_DEIT_ARCH, patch_size=TINY_DEIT_PATCH
        )
        model.teacher.head.update(
            num_classes=TINY_DEIT_CLASSES, in_channels=TINY_DEIT_DIMS
        )
        model.teacher_checkpoint = str(teacher)
    cfg.data_preprocessor.num_classes = TINY_DEIT_CLASSES
    data = dict(type='CustomDataset', data_root=str(root / 'data'))
    for loader, pipeline in (
        (cfg.train_dataloader, cfg.train_pipeline),
        (cfg.val_dataloader, cfg.test_pipeline),
    ):
        loader.update(batch_size=2, num_workers=0, persistent_workers=False)
        loader.dataset = dict(data, pipeline=pipeline)
    cfg.val_evaluator = dict(type='Accuracy', topk=(1,))
    cfg.train_cfg.max_epochs = 1
    cfg.model_wrapper_cfg = None
    path = root / config.name
    cfg.dump(path)
    return path


def assert_distilled_forms_agree(reference, models, x, rtol=1e-5):
    """Each of ``models`` gives ``reference``'s class and distillation
    tokens on ``x``, within ``rtol`` of their largest magnitude."""
    with torch.no_grad():
        ((ref_cls, ref_dist),) = reference(x)
        for model in models:
            ((cls, dist),) = model(x)
            assert (cls - ref_cls).abs().max() <= rtol * ref_cls.abs().max()
            assert (dist - ref_dist).abs().max() <= rtol * ref_dist.abs().max()


# ------------------------------------------- your own data (own_dataset.md)
#: The generated folder dataset's classes: two regions of each of
#: scikit-learn's two sample photos.
FOLDER_CLASSES = ('china_sky', 'china_temple', 'flower_petals', 'flower_bud')


def write_folder_dataset(root: Path, train: int = 8, val: int = 4) -> Path:
    """An ImageNet-style folder dataset under ``root`` (``train/CLASS/*.jpg``
    and ``val/CLASS/*.jpg``, as mmpretrain's ``CustomDataset`` reads it):
    seeded 80 x 80 crops of real photos, one class per photo region."""
    import mmcv
    import numpy as np
    from sklearn.datasets import load_sample_images

    china, flower = load_sample_images().images
    regions = dict(
        zip(
            FOLDER_CLASSES,
            (china[:160], china[200:], flower[:, :300], flower[:, 300:]),
        )
    )
    rng = np.random.default_rng(0)
    for split, count in (('train', train), ('val', val)):
        for name, region in regions.items():
            for index in range(count):
                y = rng.integers(0, region.shape[0] - 80)
                x = rng.integers(0, region.shape[1] - 80)
                crop = np.ascontiguousarray(region[y : y + 80, x : x + 80])
                mmcv.imwrite(
                    crop[..., ::-1], str(root / split / name / f'{index}.jpg')
                )
    return root


def write_official_deit(path: Path) -> Path:
    """A stand-in for an official DeiT release file of that name (distilled
    or not, ``{'model': timm's state dict}``), of :data:`TINY_DEIT_ARCH`
    with random weights."""
    from timm.models.deit import VisionTransformerDistilled
    from timm.models.vision_transformer import VisionTransformer

    cls = (
        VisionTransformerDistilled
        if 'distilled' in Path(path).name
        else VisionTransformer
    )
    model = cls(
        embed_dim=TINY_DEIT_DIMS,
        depth=TINY_DEIT_ARCH['num_layers'],
        num_heads=TINY_DEIT_ARCH['num_heads'],
        patch_size=TINY_DEIT_PATCH,
        num_classes=TINY_DEIT_CLASSES,
    )
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.save(dict(model=randomize_(model, seed=1).state_dict()), path)
    return Path(path)
