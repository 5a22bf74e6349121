# Transfer to CIFAR-100 by fine-tuning (the paper's transfer table): the
# pruned, merged DeiT-B of deit-b_prune-10l_in1k.py with a new 100-class
# DeiT head, every weight trained, on mmpretrain's CIFAR100 dataset
# (data/cifar100/cifar-100-python, as mmpretrain downloads it) with the
# 32x32 images resized to the 224x224 the backbone was trained at.
#
# A starting recipe, not tuned here: 8 x 64 images per step, AdamW 5e-4
# with mmpretrain's layer-wise learning-rate decay (0.75 per block; blocks
# keep their depth whatever was removed from them, see HetDPTViT
# .get_layer_depth), DeiT's Mixup / CutMix and label smoothing, 100 epochs.
_base_ = [
    '../_base_/models/hetdpt_deit-b.py',
    '../_base_/datasets/cifar100_resize-224.py',
    '../_base_/schedules/no-decay_deit.py',
    '../_base_/schedules/cifar100_warmup-cosine_100e.py',
    'mmpretrain::_base_/default_runtime.py',
]

# The merged checkpoint of deit-b_prune-10l_in1k.py
# (docs/user_guides/transfer.md).
hetdpt_checkpoint = 'checkpoints/hetdpt_deit-b_10l_merged.pth'

model = dict(
    backbone=dict(init_cfg=dict(checkpoint=hetdpt_checkpoint)),
    # A new 100-class head, zero-initialised as DeiT's: the ImageNet heads
    # the base model loads (PretrainedHeads) do not fit 100 classes.
    head=dict(
        num_classes=100,
        init_cfg=dict(_delete_=True, type='Constant', layer='Linear', val=0),
    ),
)

train_dataloader = dict(batch_size=64)

optim_wrapper = dict(
    optimizer=dict(
        type='AdamW', lr=5e-4, weight_decay=0.05, betas=(0.9, 0.999)
    ),
    constructor='LearningRateDecayOptimWrapperConstructor',
    paramwise_cfg=dict(layer_decay_rate=0.75),
    clip_grad=dict(max_norm=5.0),
)
default_hooks = dict(checkpoint=dict(interval=10, max_keep_ckpts=2))
