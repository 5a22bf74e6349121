# A small ViT on the demo digits (32x32, ImageNet folder layout), dense.
# Make the data first: python tools/make_demo_data.py data/demo
_base_ = ['mmpretrain::_base_/default_runtime.py']
custom_imports = dict(imports=['hetdpt_mm'], allow_failed_imports=False)

data_root = 'data/demo/cls'
demo_arch = dict(embed_dims=96, num_layers=6, num_heads=3, mlp_ratio=4)

model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='HetDPTViT',
        arch=demo_arch,
        img_size=32,
        patch_size=4,
        drop_path_rate=0.0,
    ),
    neck=None,
    head=dict(
        type='VisionTransformerClsHead',
        num_classes=10,
        in_channels=demo_arch['embed_dims'],
        loss=dict(
            type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'
        ),
        # Not mmpretrain's zero init: with a zero head the backbone
        # gets no gradient at first, which stalls a from-scratch run.
        init_cfg=dict(type='TruncNormal', layer='Linear', std=0.02),
    ),
    init_cfg=[
        dict(type='TruncNormal', layer='Linear', std=0.02),
        dict(type='Constant', layer='LayerNorm', val=1.0, bias=0.0),
    ],
)

data_preprocessor = dict(
    num_classes=10, mean=[127.5] * 3, std=[127.5] * 3, to_rgb=True
)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomCrop', crop_size=32, padding=2),
    dict(type='PackInputs'),
]
test_pipeline = [dict(type='LoadImageFromFile'), dict(type='PackInputs')]
train_dataloader = dict(
    batch_size=16,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        type='CustomDataset',
        data_root=data_root,
        ann_file='meta/train.txt',
        data_prefix='train',
        pipeline=train_pipeline,
    ),
    sampler=dict(type='DefaultSampler', shuffle=True),
)
# The training loader's settings on the validation split.
val_dataloader = dict(
    train_dataloader,
    batch_size=128,
    dataset=dict(
        train_dataloader['dataset'],
        ann_file='meta/val.txt',
        data_prefix='val',
        pipeline=test_pipeline,
    ),
    sampler=dict(type='DefaultSampler', shuffle=False),
)
val_evaluator = dict(type='Accuracy', topk=(1,))
test_dataloader = val_dataloader
test_evaluator = val_evaluator

# Recipe for a few minutes on a CPU (about 97 % top-1 after 10 epochs):
# small batches (many steps on 1,438 images), a short warm-up and a 30x
# learning rate for the position embedding: it starts at std 0.02, and
# attention cannot tell patches apart until it has grown, which otherwise
# costs the first several epochs.  Fine-tuning configs set it back to 1x.
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05),
    paramwise_cfg=dict(
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        custom_keys={
            '.cls_token': dict(decay_mult=0.0),
            'pos_embed': dict(decay_mult=0.0, lr_mult=30.0),
            'hetdpt_score': dict(decay_mult=0.0),
        },
    ),
    clip_grad=dict(max_norm=5.0),
)
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=0.01,
        by_epoch=True,
        end=1,
        convert_to_iter_based=True,
    ),
    dict(
        type='CosineAnnealingLR',
        eta_min=1e-5,
        by_epoch=True,
        begin=1,
        convert_to_iter_based=True,
    ),
]
train_cfg = dict(by_epoch=True, max_epochs=10, val_interval=5)
val_cfg = dict()
test_cfg = dict()

# epoch_seed: epochs seeded from (seed, epoch), so --resume is exact with
# the random crops, under any runner (docs/advanced/reliability.md).
default_hooks = dict(
    epoch_seed=dict(type='EpochSeedHook'),
    logger=dict(interval=10),
    checkpoint=dict(interval=5, max_keep_ckpts=2),
)
env_cfg = dict(dist_cfg=dict(backend='gloo'))
randomness = dict(seed=0, deterministic=False)
