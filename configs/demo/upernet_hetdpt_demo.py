# configs/upernet_hetdpt_deit_b_ade20k.py scaled down for the CPU demo, on
# the same base: the demo ViT pruned on the demo digits
# (configs/demo/vit-demo_digits*.py) as backbone, the demo ADE20K-layout
# shapes (4 classes, 128x128, made by tools/make_demo_data.py), narrow neck
# and heads, a short schedule.
# Model types (MultiLevelNeck, UPerHead, FCN auxiliary), losses, evaluator and
# tools are the full config's; only sizes, data and schedule change.
_base_ = '../_base_/models/upernet_hetdpt_vit.py'

# The pruned (or merged) demo classifier; its meta carries the spec.
hetdpt_checkpoint = (
    'work_dirs/vit-demo_digits_prune/vit-demo_digits_prune_merged.pth'
)
data_root = 'data/demo/ade'
metainfo = dict(
    classes=('background', 'rectangle', 'ellipse', 'triangle'),
    palette=[[120, 120, 120], [180, 120, 120], [6, 230, 230], [80, 50, 50]],
)
# The data is 128x128; 64x64 crops keep CPU training to a few minutes.
crop_size = (64, 64)
embed_dims = 96
# BN instead of the full config's SyncBN: CPU runs have no NCCL.
norm_cfg = dict(type='BN', requires_grad=True)

model = dict(
    # The normalisation the demo classifier was trained with.
    data_preprocessor=dict(size=crop_size, mean=[127.5] * 3, std=[127.5] * 3),
    backbone=dict(
        arch=dict(embed_dims=embed_dims, num_layers=6, num_heads=3),
        img_size=crop_size,
        patch_size=4,
        distilled=False,
        out_indices=(1, 2, 4, 5),  # (2, 5, 8, 11) of 12 blocks, for 6
        drop_path_rate=0.0,
        init_cfg=dict(checkpoint=hetdpt_checkpoint),
    ),
    # Patch size 4 gives stride-4 maps (16 in the full config): these scales
    # give the same strides 4, 8, 16, 32 as the full config's [4, 2, 1, 0.5].
    neck=dict(
        in_channels=[embed_dims] * 4,
        out_channels=embed_dims,
        scales=[1, 0.5, 0.25, 0.125],
    ),
    decode_head=dict(
        in_channels=[embed_dims] * 4,
        channels=64,
        num_classes=len(metainfo['classes']),
        norm_cfg=norm_cfg,
    ),
    auxiliary_head=dict(
        in_channels=embed_dims,
        channels=32,
        num_classes=len(metainfo['classes']),
        norm_cfg=norm_cfg,
    ),
)

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(
        type='RandomResize',
        scale=(256, 64),
        ratio_range=(0.5, 2.0),
        keep_ratio=True,
    ),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(256, 64), keep_ratio=True),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs'),
]
# The demo classes are not ADE20K's 150, so the generic dataset class reads
# the same layout (ADE20KDataset fixes its class list).
dataset = dict(
    type='BaseSegDataset',
    data_root=data_root,
    metainfo=metainfo,
    img_suffix='.jpg',
    seg_map_suffix='.png',
    reduce_zero_label=True,
)
train_dataloader = dict(
    batch_size=8,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(**dataset, pipeline=train_pipeline),
)
val_dataloader = dict(
    batch_size=8,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(**dataset, pipeline=test_pipeline),
)
test_dataloader = val_dataloader

optim_wrapper = dict(optimizer=dict(lr=1e-3))
max_iters = 400
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=False, begin=0, end=20),
    dict(
        type='PolyLR',
        eta_min=0.0,
        power=1.0,
        begin=20,
        end=max_iters,
        by_epoch=False,
    ),
]
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
default_hooks = dict(
    logger=dict(interval=10),
    checkpoint=dict(interval=max_iters, max_keep_ckpts=1),
)
env_cfg = dict(cudnn_benchmark=False, dist_cfg=dict(backend='gloo'))
# The same numbers on every run (the heads are initialised from the seed).
randomness = dict(seed=0, deterministic=False)
