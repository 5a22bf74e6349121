# MAP data collection (docs/method.md §2): every `interval` epochs
# MAPCollectHook
# removes one more layer (chosen by the transfer-entropy score), fine-tunes
# and appends an (a, t, accuracy) point to <work_dir>/map_points.csv.  The
# optimizer is the DeiT one at a constant learning rate, so that later steps
# get the same recovery as earlier ones.
_base_ = ['./imagenet_bs1024_adamw_400e.py', '../gated_ddp.py']

optim_wrapper = dict(optimizer=dict(lr=1e-4))
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=True)]

interval = 10  # fine-tuning epochs per removed layer
num_steps = 8  # points after the starting one
# The hook evaluates after every step; the loop's own validation never runs.
train_cfg = dict(max_epochs=interval * num_steps, val_begin=1_000_000)
custom_hooks = [
    dict(
        type='MAPCollectHook',
        schedule='interleaved',  # 'attn' | 'act' | 'interleaved'
        interval=interval,
        max_removed=num_steps,
        calib_images=1024,
    )  # training images for the TE score
]
