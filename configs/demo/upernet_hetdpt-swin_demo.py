# configs/upernet_hetdpt_swin-b_ade20k.py scaled down for the CPU demo, on
# that config: the small Swin pruned on the demo digits
# (./swin-demo_digits_prune.py) as backbone, the demo ADE20K-layout shapes
# (4 classes, 128x128, made by tools/make_demo_data.py), narrow heads and the
# data and schedule of ./upernet_hetdpt_demo.py.  Model types (UPerHead, FCN
# auxiliary), losses, optimizer and evaluator are the full config's (mmseg's
# UperNet Swin-B); only sizes, data and schedule change.
_base_ = '../upernet_hetdpt_swin-b_ade20k.py'

# The merged (or pruned) demo Swin classifier; its record carries the spec.
hetdpt_checkpoint = \
    'work_dirs/swin-demo_digits_prune/swin-demo_digits_prune_merged.pth'
data_root = 'data/demo/ade'
metainfo = dict(
    classes=('background', 'rectangle', 'ellipse', 'triangle'),
    palette=[[120, 120, 120], [180, 120, 120], [6, 230, 230], [80, 50, 50]])
crop_size = (64, 64)
# The classifier's (./swin-demo_digits.py: windows of 4).
swin_arch = dict(embed_dims=32, depths=[2, 2, 2, 2], num_heads=[1, 2, 4, 8])
widths = [32, 64, 128, 256]  # the four stages' outputs
# BN instead of the full config's SyncBN: CPU runs have no NCCL.
norm_cfg = dict(type='BN', requires_grad=True)

model = dict(
    # The normalisation the demo classifier was trained with.
    data_preprocessor=dict(size=crop_size, mean=[127.5] * 3,
                           std=[127.5] * 3),
    # _delete_: the base names a preset (a string).
    backbone=dict(arch=dict(swin_arch, _delete_=True), window_size=4,
                  drop_path_rate=0.0,
                  init_cfg=dict(checkpoint=hetdpt_checkpoint)),
    decode_head=dict(in_channels=widths, channels=64,
                     num_classes=len(metainfo['classes']),
                     norm_cfg=norm_cfg),
    auxiliary_head=dict(in_channels=widths[2], channels=32,
                        num_classes=len(metainfo['classes']),
                        norm_cfg=norm_cfg))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='RandomResize', scale=(256, 64), ratio_range=(0.5, 2.0),
         keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(256, 64), keep_ratio=True),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs')
]
# The demo classes are not ADE20K's 150: the generic dataset class.
dataset = dict(_delete_=True, type='BaseSegDataset', data_root=data_root,
               metainfo=metainfo, img_suffix='.jpg', seg_map_suffix='.png',
               reduce_zero_label=True,
               data_prefix=dict(img_path='images/training',
                                seg_map_path='annotations/training'))
train_dataloader = dict(
    batch_size=8, num_workers=0, persistent_workers=False,
    dataset=dict(dataset, pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=8, num_workers=0, persistent_workers=False,
    dataset=dict(dataset, pipeline=test_pipeline,
                 data_prefix=dict(img_path='images/validation',
                                  seg_map_path='annotations/validation')))
test_dataloader = val_dataloader

max_iters = 400
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=False, begin=0,
         end=20),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=20, end=max_iters,
         by_epoch=False)
]
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
default_hooks = dict(
    logger=dict(interval=10),
    checkpoint=dict(interval=max_iters, max_keep_ckpts=1))
env_cfg = dict(cudnn_benchmark=False, dist_cfg=dict(backend='gloo'))
randomness = dict(seed=0, deterministic=False)
