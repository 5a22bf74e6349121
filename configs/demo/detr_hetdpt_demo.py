# configs/detr_hetdpt_deit_b.py scaled down for the CPU demo: the demo ViT
# pruned on the demo digits (configs/demo/vit-demo_digits*.py) as backbone,
# the demo COCO-layout shapes (3 classes, 128x128 images, made by
# tools/make_demo_data.py), a small DETR transformer and a short schedule.
# Model types, heads, losses, matcher, evaluator and tools are the full
# config's; only sizes, data and schedule change.
_base_ = '../detr_hetdpt_deit_b.py'

# The pruned (or merged) demo classifier; its meta carries the spec.
hetdpt_checkpoint = \
    'work_dirs/vit-demo_digits_prune/vit-demo_digits_prune_merged.pth'
data_root = 'data/demo/coco/'
classes = ('rectangle', 'ellipse', 'triangle')
# The data is 128x128; a quarter of it keeps CPU training to a few minutes.
image_size = (32, 32)
embed_dims = 128  # DETR transformer width (256 in the full config)

model = dict(
    num_queries=10,  # at most 3 objects per demo image
    # The normalisation the demo classifier was trained with.
    data_preprocessor=dict(mean=[127.5] * 3, std=[127.5] * 3),
    backbone=dict(
        arch=dict(_delete_=True, embed_dims=96, num_layers=6, num_heads=3),
        img_size=32,
        patch_size=4,
        distilled=False,
        out_indices=(5, ),
        drop_path_rate=0.0,
        init_cfg=dict(checkpoint=hetdpt_checkpoint)),
    neck=dict(in_channels=[96], out_channels=embed_dims),
    encoder=dict(
        num_layers=2,
        layer_cfg=dict(
            self_attn_cfg=dict(embed_dims=embed_dims, num_heads=4,
                               dropout=0.0),
            ffn_cfg=dict(embed_dims=embed_dims,
                         feedforward_channels=4 * embed_dims, ffn_drop=0.0))),
    decoder=dict(
        num_layers=2,
        layer_cfg=dict(
            self_attn_cfg=dict(embed_dims=embed_dims, num_heads=4,
                               dropout=0.0),
            cross_attn_cfg=dict(embed_dims=embed_dims, num_heads=4,
                                dropout=0.0),
            ffn_cfg=dict(embed_dims=embed_dims,
                         feedforward_channels=4 * embed_dims, ffn_drop=0.0))),
    positional_encoding=dict(num_feats=embed_dims // 2),
    bbox_head=dict(num_classes=len(classes), embed_dims=embed_dims),
    test_cfg=dict(max_per_img=10))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=image_size, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_size, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                    'scale_factor'))
]
train_dataloader = dict(
    batch_size=4, num_workers=0, persistent_workers=False,
    dataset=dict(data_root=data_root, metainfo=dict(classes=classes),
                 pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=8, num_workers=0, persistent_workers=False,
    dataset=dict(data_root=data_root, metainfo=dict(classes=classes),
                 pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator

# The demo backbone learned digits, not shapes: it adapts at the full rate
# (mmdet's lr_mult=0.1 suits ImageNet features).
optim_wrapper = dict(
    optimizer=dict(lr=2e-4),
    paramwise_cfg=dict(custom_keys={'backbone': dict(lr_mult=1.0)}))
# DETR converges slowly; on the 64 demo images its validation mAP peaks
# after about 600 iterations and then overfits (docs/transfer.md).
max_epochs = 40
train_cfg = dict(max_epochs=max_epochs, val_interval=max_epochs)
param_scheduler = [
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True,
         milestones=[34], gamma=0.1)
]
default_hooks = dict(logger=dict(interval=16),
                     checkpoint=dict(interval=max_epochs, max_keep_ckpts=1))
env_cfg = dict(dist_cfg=dict(backend='gloo'))
auto_scale_lr = dict(base_batch_size=4)
