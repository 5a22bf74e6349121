# configs/mask-rcnn_hetdpt_vitdet-b_simplefpn_lsj-100e_coco.py scaled down
# for the CPU: a small windowed ViT (4 blocks of width 64, blocks 1 and 3
# global, windows of 4 on the 8x8 map of a 128x128 image) as backbone, the
# demo COCO-layout shapes (3 classes, 128x128 images with instance masks,
# made by tools/make_demo_data.py), a narrow pyramid and narrow heads, and
# fixed-size inputs in place of large-scale jitter.  Model types, losses,
# optimizer and evaluator are the full config's; only sizes, data and
# schedule change.  A starting point, not tuned.
_base_ = '../mask-rcnn_hetdpt_vitdet-b_simplefpn_lsj-100e_coco.py'

# A merged (or pruned) small windowed ViT; its record carries the spec.
hetdpt_checkpoint = 'work_dirs/vitdet_demo/vitdet-demo_merged.pth'
data_root = 'data/demo/coco/'
classes = ('rectangle', 'ellipse', 'triangle')
image_size = (128, 128)  # the data's own size
width = 64  # the backbone's
channels = 64  # pyramid and heads (256 in the full config)

model = dict(
    data_preprocessor=dict(
        mean=[127.5] * 3,
        std=[127.5] * 3,
        batch_augments=[
            dict(type='BatchFixedSizePad', size=image_size, pad_mask=True)
        ],
    ),
    backbone=dict(
        img_size=image_size[0],
        embed_dim=width,
        depth=4,
        num_heads=2,
        window_size=4,
        window_block_indexes=[0, 2],
        pretrain_img_size=image_size[0],
        drop_path_rate=0.0,
        init_cfg=dict(checkpoint=hetdpt_checkpoint),
    ),
    neck=dict(
        backbone_channel=width,
        in_channels=[width // 4, width // 2, width, width],
        out_channels=channels,
    ),
    rpn_head=dict(in_channels=channels, feat_channels=channels),
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=channels),
        bbox_head=dict(
            in_channels=channels,
            conv_out_channels=channels,
            fc_out_channels=256,
            num_classes=len(classes),
        ),
        mask_roi_extractor=dict(out_channels=channels),
        mask_head=dict(
            in_channels=channels,
            conv_out_channels=channels,
            num_classes=len(classes),
        ),
    ),
)

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=image_size, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_size, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
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
        _delete_=True,
        type='CocoDataset',
        data_root=data_root,
        ann_file='annotations/instances_train2017.json',
        data_prefix=dict(img='train2017/'),
        filter_cfg=dict(filter_empty_gt=True, min_size=8),
        metainfo=dict(classes=classes),
        pipeline=train_pipeline,
    ),
)
val_dataloader = dict(
    batch_size=8,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        data_root=data_root,
        metainfo=dict(classes=classes),
        pipeline=test_pipeline,
    ),
)
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator

max_epochs = 6
train_cfg = dict(max_epochs=max_epochs, val_interval=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(
        type='MultiStepLR',
        begin=0,
        end=max_epochs,
        by_epoch=True,
        milestones=[5],
        gamma=0.1,
    ),
]
default_hooks = dict(
    logger=dict(interval=32),
    checkpoint=dict(interval=max_epochs, max_keep_ckpts=1),
)
env_cfg = dict(dist_cfg=dict(backend='gloo'))
auto_scale_lr = dict(base_batch_size=4)
randomness = dict(seed=0, deterministic=False)
