# Transfer to CIFAR-100 by linear probing (the paper's transfer table): the
# pruned, merged DeiT-B of deit-b_prune-10l_in1k.py frozen whole
# (frozen_stages=12: embeddings, every block and the final norm stay in eval
# mode without gradients), only the new 100-class DeiT head is trained.
# Data and checkpoint as ./deit-b_prune-10l_finetune_cifar100.py.
#
# A starting recipe, not tuned here: SGD 0.1 with momentum at 8 x 64 images
# per step, no weight decay, no Mixup / CutMix, cosine over 50 epochs.
_base_ = ['./deit-b_prune-10l_finetune_cifar100.py']

model = dict(
    backbone=dict(frozen_stages=12, norm_eval=True, drop_path_rate=0.0),
    train_cfg=None,
)

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='SGD', lr=0.1, momentum=0.9, weight_decay=0.0),
)
max_epochs = 50
param_scheduler = [
    dict(
        type='CosineAnnealingLR',
        eta_min=0.0,
        by_epoch=True,
        begin=0,
        end=max_epochs,
        convert_to_iter_based=True,
    ),
]
train_cfg = dict(max_epochs=max_epochs)
