# configs/detr_hetdpt_deit_b.py scaled down for the CPU demo, on the same
# base: the demo ViT pruned on the demo digits
# (configs/demo/vit-demo_digits*.py) as backbone, the demo COCO-layout shapes
# (3 classes, 1-2 shapes per 128x128 image, made by tools/make_demo_data.py),
# a small DETR transformer and a short schedule.
# Model types, heads, losses, matcher, evaluator and tools are the full
# config's; only sizes, data, loss weights and schedule change.  Measured in
# docs/user_guides/transfer.md (CPU demo).
_base_ = '../_base_/models/detr_hetdpt_vit.py'

# The pruned (or merged) demo classifier; its meta carries the spec.
hetdpt_checkpoint = (
    'work_dirs/vit-demo_digits_prune/vit-demo_digits_prune_merged.pth'
)
data_root = 'data/demo/coco/'
classes = ('rectangle', 'ellipse', 'triangle')
# The data is 128x128; at 48x48 the patch-4 ViT sees a 12x12 grid, fine
# enough for shapes a quarter to a half of the image wide, and as accurate
# after the same number of steps as 64x64, which costs 1.5x more per step.
image_size = (48, 48)
embed_dims = 128  # DETR transformer width (256 in the full config)
# At most 2 objects per demo image: with few queries each one is matched
# to a shape (and learns from it) in more of the images.
num_queries = 5
# DETR's slowest part on this data is the classification: twice the class
# loss and matching cost (mmdet's DETR: 1 and 1).
class_weight = 2.0
# Every attention and FFN of the transformer.
attn_cfg = dict(embed_dims=embed_dims, num_heads=4, dropout=0.0)
ffn_cfg = dict(
    embed_dims=embed_dims, feedforward_channels=2 * embed_dims, ffn_drop=0.0
)

model = dict(
    num_queries=num_queries,
    # The normalisation the demo classifier was trained with.
    data_preprocessor=dict(mean=[127.5] * 3, std=[127.5] * 3),
    backbone=dict(
        arch=dict(embed_dims=96, num_layers=6, num_heads=3),
        img_size=32,
        patch_size=4,
        distilled=False,
        out_indices=(5,),
        drop_path_rate=0.0,
        init_cfg=dict(checkpoint=hetdpt_checkpoint),
    ),
    neck=dict(in_channels=[96], out_channels=embed_dims),
    # One encoder and two decoder layers with 2x-wide FFNs: about as
    # accurate here as 2 + 2 layers with 4x FFNs, and the steps are cheaper.
    encoder=dict(
        num_layers=1, layer_cfg=dict(self_attn_cfg=attn_cfg, ffn_cfg=ffn_cfg)
    ),
    decoder=dict(
        num_layers=2,
        layer_cfg=dict(
            self_attn_cfg=attn_cfg, cross_attn_cfg=attn_cfg, ffn_cfg=ffn_cfg
        ),
    ),
    positional_encoding=dict(num_feats=embed_dims // 2),
    bbox_head=dict(
        num_classes=len(classes),
        embed_dims=embed_dims,
        loss_cls=dict(loss_weight=class_weight),
    ),
    train_cfg=dict(
        assigner=dict(
            match_costs=[
                dict(type='ClassificationCost', weight=class_weight),
                dict(type='BBoxL1Cost', weight=5.0, box_format='xywh'),
                dict(type='IoUCost', iou_mode='giou', weight=2.0),
            ]
        )
    ),
    test_cfg=dict(max_per_img=num_queries),
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
train_dataloader = dict(
    batch_size=4,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        data_root=data_root,
        metainfo=dict(classes=classes),
        pipeline=train_pipeline,
    ),
)
val_dataloader = dict(
    train_dataloader,
    batch_size=16,
    dataset=dict(train_dataloader['dataset'], pipeline=test_pipeline),
)
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator

# The demo backbone learned digits, not shapes: it adapts at the full rate
# (mmdet's lr_mult=0.1 suits ImageNet features).  1e-4 to 3e-4 end alike
# here; 4e-4 and above learned more slowly.
optim_wrapper = dict(
    optimizer=dict(lr=2e-4),
    paramwise_cfg=dict(custom_keys={'backbone': dict(lr_mult=1.0)}),
)
# 12 epochs of 128 iterations on the 512 demo images (about 2 CPU minutes),
# the learning rate / 10 for the last two; DETR is still improving then
# (16 epochs: a little better), but the demo has a time budget.
max_epochs = 12
train_cfg = dict(max_epochs=max_epochs, val_interval=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(
        type='MultiStepLR',
        begin=0,
        end=max_epochs,
        by_epoch=True,
        milestones=[10],
        gamma=0.1,
    ),
]
default_hooks = dict(
    logger=dict(interval=32),
    checkpoint=dict(interval=max_epochs, max_keep_ckpts=1),
)
env_cfg = dict(dist_cfg=dict(backend='gloo'))
auto_scale_lr = dict(base_batch_size=4)
# The same numbers on every run (the head is initialised from the seed).
randomness = dict(seed=0, deterministic=False)
