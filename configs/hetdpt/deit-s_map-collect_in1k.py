# MAP data collection for DeiT-S on ImageNet-1k: deit-b_map-collect_in1k.py
# (one removal per `interval` epochs chosen by the transfer-entropy score,
# fine-tuning on a fixed 10% subset, one run per schedule) with the DeiT-S
# model and batch of deit-s_dense_in1k.py:
#
#   python tools/train.py configs/hetdpt/deit-s_map-collect_in1k.py \
#       --work-dir work_dirs/deit-s_map-collect_in1k/interleaved
#   ... --work-dir work_dirs/deit-s_map-collect_in1k/attn \
#       --cfg-options custom_hooks.0.schedule=attn   (and the same for act)
_base_ = [
    '../_base_/models/hetdpt_deit-s.py',
    '../_base_/datasets/imagenet_bs256_swin_224.py',
    '../_base_/schedules/hetdpt_map-collect_80e.py',
    'mmpretrain::_base_/default_runtime.py',
]

# A dense DeiT-S in this layout with trained heads, e.g. a checkpoint of
# deit-s_dense_in1k.py after a few epochs.
load_from = 'work_dirs/deit-s_dense_in1k/epoch_10.pth'

model = dict(backbone=dict(gated=True, init_cfg=None))
# The fast fine-tune runs on a fixed, seeded 10% of the training set.
train_dataloader = dict(
    sampler=dict(type='SubsetSampler', subset=0.1, subset_seed=0,
                 shuffle=True))
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=2))
