# HetDPT on the demo's classifier as tools/demo.py runs it: from the dense
# model (load_from), HetDPTPruneHook closes the given counts of attention
# and GELU layers, one per epoch (the lowest learned score of that type
# each time), the rest of the run fine-tunes; MergeCheckpointHook writes
# <work_dir>/vit-demo_shapes_hetdpt_merged.pth.  The demo sets the counts
# of each compared split (MAP's pick from tools/fit_map.py, each type
# alone, none) and the epochs (one per removal, then 2):
#   python tools/train.py configs/demo/vit-demo_shapes_hetdpt.py \
#       --cfg-options load_from=DENSE custom_hooks.0.counts.attn=2 \
#       custom_hooks.0.counts.act=3 train_cfg.max_epochs=7
_base_ = ['./vit-demo_shapes.py', '../_base_/gated_ddp.py']
custom_imports = dict(
    imports=['hetdpt_mm', 'hetdpt_mm.hooks'], allow_failed_imports=False
)

load_from = 'work_dirs/demo/dense/epoch_24.pth'
model = dict(backbone=dict(gated=True))
custom_hooks = [
    dict(
        type='HetDPTPruneHook',
        counts=dict(attn=2, act=3),
        schedule='progressive',
        stages=1,
        log_score_grads=True,
    ),
    dict(type='MergeCheckpointHook'),
]
# A fine-tune: a lower peak than from scratch, the position embedding at
# 1x, the base's warm-up epoch (the gate scores start at 0) from a tenth.
optim_wrapper = dict(
    optimizer=dict(lr=5e-4),
    paramwise_cfg=dict(
        custom_keys={'pos_embed': dict(decay_mult=0.0, lr_mult=1.0)}
    ),
)
param_scheduler = [
    dict(_base_.param_scheduler[0], start_factor=0.1),
    _base_.param_scheduler[1],
]
train_dataloader = dict(dataset=dict(indices=1000))
train_cfg = dict(max_epochs=7, val_interval=7)
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=1))
