# MAP points on the demo's classifier (tools/demo.py; docs/method.md
# section 2): from the dense model (load_from), MAPCollectHook removes one
# layer every `interval` epochs (the transfer-entropy score's choice),
# fine-tunes on a fixed subset and writes a point to
# <work_dir>/map_points.csv.  One run per schedule:
#   python tools/train.py configs/demo/vit-demo_shapes_map.py \
#       --cfg-options load_from=DENSE custom_hooks.0.schedule=attn
_base_ = ['./vit-demo_shapes.py', '../_base_/gated_ddp.py']
custom_imports = dict(
    imports=['hetdpt_mm', 'hetdpt_mm.hooks'], allow_failed_imports=False
)

load_from = 'work_dirs/demo/dense/epoch_24.pth'
model = dict(backbone=dict(gated=True))
train_dataloader = dict(
    sampler=dict(type='SubsetSampler', subset=0.5, subset_seed=0, shuffle=True)
)
# A constant fine-tuning rate (a schedule would give later steps less
# recovery), the position embedding like every other weight.
optim_wrapper = dict(
    optimizer=dict(lr=2e-4),
    paramwise_cfg=dict(
        custom_keys={'pos_embed': dict(decay_mult=0.0, lr_mult=1.0)}
    ),
)
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=True)]
# The hook evaluates each step itself and stops after max_removed steps.
train_cfg = dict(max_epochs=5, val_begin=1_000_000)
custom_hooks = [
    dict(
        type='MAPCollectHook',
        schedule='interleaved',  # 'attn' | 'act' | 'interleaved'
        interval=1,  # fine-tuning epochs per removed layer
        max_removed=5,
        calib_images=128,
        calib_batch_size=128,
    ),
]
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=1))
