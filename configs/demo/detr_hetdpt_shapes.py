# ./detr_hetdpt_demo.py with the backbone of the CPU demo's classifier
# (./vit-demo_shapes.py: 8 blocks, 48 wide, patch 4) at 32x32, 64 patches
# as the classifier sees; tools/demo.py trains it from the merged HetDPT
# classifier (model.backbone.init_cfg.checkpoint), whose meta gives the
# pruned structure.
_base_ = './detr_hetdpt_demo.py'

image_size = (32, 32)
max_epochs = 5
model = dict(
    backbone=dict(
        arch=dict(embed_dims=48, num_layers=8, num_heads=3), out_indices=(7,)
    ),
    neck=dict(in_channels=[48]),
)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=image_size, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_size, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(
        type='PackDetInputs',
        meta_keys=(
            'img_id',
            'img_path',
            'ori_shape',
            'img_shape',
            'scale_factor',
        ),
    ),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = dict(dataset=dict(pipeline=test_pipeline))
train_cfg = dict(max_epochs=max_epochs, val_interval=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(
        type='MultiStepLR',
        begin=0,
        end=max_epochs,
        by_epoch=True,
        milestones=[4],
        gamma=0.1,
    ),
]
default_hooks = dict(checkpoint=dict(interval=max_epochs))
