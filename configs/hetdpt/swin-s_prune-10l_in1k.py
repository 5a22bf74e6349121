# HetDPT on Swin-S, ImageNet-1k, in one run (docs/user_guides/swin.md): start
# from the official Swin-S classifier (backbone and head), remove 10 layers
# (the paper's Swin-S budget, Table 1: 1.23x, 82.4 %) over the 24 blocks of all
# stages, split between window-attention (W-MSA / SW-MSA) and GELU layers by
# MAP, chosen within each type by the learned gate scores, progressively (one
# removal at the end of epochs 3, 8, 15, ..., 120: stage lengths 3, 5, 7, ...,
# as deit-b_prune-10l_in1k.py), then fine-tune the pruned network until the
# end.  MergeCheckpointHook writes <work_dir>/swin-s_prune-10l_in1k_merged.pth
# (backbone + head), whose backbone loads as it is into a detector or
# segmentor with a HetDPTSwin backbone (docs/user_guides/swin.md).
#
# The paper gives neither a Swin recipe nor Swin MAP points, so everything
# else is mmpretrain's stock Swin-S ImageNet config
# (swin_transformer/swin-small_16xb64_in1k.py: AdamW lr 1e-3 per 1024 images,
# weight decay 0.05, none on norms, biases and relative position bias tables,
# 20 warm-up epochs, cosine, 300 epochs, clipping 5, drop path 0.3, Mixup /
# CutMix, label smoothing 0.1, 16 x 64 images), with the backbone swapped and
# no distillation (Swin has no distillation token).
#
#   bash tools/dist_train.sh configs/hetdpt/swin-s_prune-10l_in1k.py 16
#   (other GPU counts: add --auto-scale-lr)
_base_ = [
    'mmpretrain::swin_transformer/swin-small_16xb64_in1k.py',
    '../_base_/schedules/hetdpt_prune-10l.py',
]
custom_imports = dict(imports=['hetdpt_mm'], allow_failed_imports=False)

# https://github.com/SwinTransformer/storage/releases/download/v1.0.0/swin_small_patch4_window7_224.pth
# (official Microsoft release, 83.2 %; timm's and mmpretrain's Swin-S files
# load too).
pretrained_checkpoint = 'checkpoints/swin_small_patch4_window7_224.pth'

# MAP points: the base's, the paper's DeiT-B points (it publishes no others).
# MAP reads retained ratios (a, t), so these allocate a budget at any depth:
# 6 attention + 4 GELU layers of Swin-S's 24 blocks for a budget of 10.
# Swin's own points come from swin-s_map-collect_in1k.py
# (docs/user_guides/swin.md), or give the split:
#   --cfg-options custom_hooks.0.map_points=None custom_hooks.0.budget=None \
#       custom_hooks.0.counts.attn=5 custom_hooks.0.counts.act=5

model = dict(
    backbone=dict(
        _delete_=True,
        type='HetDPTSwin',
        arch='small',
        window_size=7,
        drop_path_rate=0.3,  # mmpretrain's Swin-S
        out_indices=(3,),
        gated=True,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained_checkpoint),
    ),
    head=dict(
        init_cfg=dict(
            _delete_=True,
            type='PretrainedHeads',
            checkpoint=pretrained_checkpoint,
        )
    ),
)

optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            # HetDPT's learned layer importances are never decayed
            # (docs/method.md
            # §3).
            'hetdpt_score': dict(decay_mult=0.0),
        }
    )
)
