# MAP data collection on the demo digits (docs/method.md section 2,
# docs/user_guides/map.md). Starts from the dense demo checkpoint with a gated
# backbone; every `interval` epochs MAPCollectHook removes one more layer
# (chosen by the transfer-entropy score) and, after the fast fine-tune, writes
# a point to <work_dir>/map_points.csv.  One run per schedule:
#   python tools/train.py configs/demo/vit-demo_digits_map.py \
#       --work-dir work_dirs/map_attn \
#       --cfg-options custom_hooks.0.schedule=attn      # or act, interleaved
# The number of steps is train_cfg.max_epochs // interval (see max_removed).
_base_ = ['./vit-demo_digits.py', '../_base_/gated_ddp.py']
custom_imports = dict(
    imports=['hetdpt_mm', 'hetdpt_mm.hooks'], allow_failed_imports=False
)

# The dense model of configs/demo/vit-demo_digits.py (default work dir).
load_from = 'work_dirs/vit-demo_digits/epoch_10.pth'

model = dict(backbone=dict(gated=True))

# Fast fine-tune on a fixed half of the training split (seeded subset).
train_dataloader = dict(
    sampler=dict(type='SubsetSampler', subset=0.5, subset_seed=0, shuffle=True)
)

# A constant learning rate: a schedule over the whole run would give later
# steps less recovery than earlier ones.
# The position embedding's boosted learning rate is for training from
# scratch; fine-tuning treats it like every other weight.
optim_wrapper = dict(
    optimizer=dict(lr=5e-4),
    paramwise_cfg=dict(
        custom_keys={'pos_embed': dict(decay_mult=0.0, lr_mult=1.0)}
    ),
)
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=True)]

# The hook evaluates every step itself; the loop's own validation would only
# repeat that work, so it never starts.
train_cfg = dict(max_epochs=12, val_begin=1_000_000)

custom_hooks = [
    dict(
        type='MAPCollectHook',
        schedule='interleaved',  # 'attn' | 'act' | 'interleaved'
        interval=3,  # fine-tuning epochs per removed layer
        max_removed=None,  # None: max_epochs // interval steps
        calib_images=256,  # training images for the TE score
        calib_batch_size=128,
    ),
]

# Every epoch, so a resumed run loses at most one epoch of a step.
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=2))
