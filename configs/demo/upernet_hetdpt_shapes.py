# ./upernet_hetdpt_demo.py with the backbone of the CPU demo's classifier
# (./vit-demo_shapes.py: 8 blocks, 48 wide, patch 4) on 32x32 crops, 64
# patches as the classifier sees; tools/demo.py trains it from the merged
# HetDPT classifier (model.backbone.init_cfg.checkpoint), whose meta gives
# the pruned structure.
_base_ = './upernet_hetdpt_demo.py'

crop_size = (32, 32)
embed_dims = 48
max_iters = 200
model = dict(
    data_preprocessor=dict(size=crop_size),
    backbone=dict(
        arch=dict(embed_dims=embed_dims, num_layers=8, num_heads=3),
        img_size=crop_size,
        out_indices=(1, 3, 5, 7),
    ),
    neck=dict(in_channels=[embed_dims] * 4, out_channels=embed_dims),
    decode_head=dict(in_channels=[embed_dims] * 4),
    auxiliary_head=dict(in_channels=embed_dims),
)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(
        type='RandomResize',
        scale=(128, 32),
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
    dict(type='Resize', scale=(128, 32), keep_ratio=True),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = dict(dataset=dict(pipeline=test_pipeline))
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
default_hooks = dict(checkpoint=dict(interval=max_iters))
