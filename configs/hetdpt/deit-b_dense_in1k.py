# Dense DeiT-B (distilled) with the HetDPTViT backbone on ImageNet-1k: the
# control run of deit-b_prune-10l_in1k.py (same start, data, augmentation,
# optimizer and 400-epoch schedule, no pruning) and the _base_ of the other
# DeiT-B configs in this folder.  Data, augmentation (RandAugment, Mixup,
# CutMix, label smoothing) and optimizer are mmpretrain's DeiT recipe.
#
# Start: the official distilled DeiT-B weights (HetDPT fine-tunes that model,
# METHOD.md §1).  Their classifier heads are in timm's layout, which
# mmpretrain's DeiTClsHead does not read, so the heads start at zero (as
# DeiTClsHead initialises them) and are learned in the first epochs.
_base_ = 'mmpretrain::deit/deit-base-distilled_16xb64_in1k.py'
custom_imports = dict(imports=['hetdpt_mm'], allow_failed_imports=False)

# https://dl.fbaipublicfiles.com/deit/deit_base_distilled_patch16_224-df68dfff.pth
pretrained_checkpoint = \
    'checkpoints/deit_base_distilled_patch16_224-df68dfff.pth'

model = dict(
    backbone=dict(
        _delete_=True,
        type='HetDPTViT',
        arch='deit-base',
        img_size=224,
        patch_size=16,
        distilled=True,  # (cls, dist) tokens for DeiTClsHead
        drop_path_rate=0.1,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained_checkpoint)))

optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            '.dist_token': dict(decay_mult=0.0),
            # HetDPT's learned layer importances (gated runs) are never
            # decayed (METHOD.md §3).
            'hetdpt_score': dict(decay_mult=0.0),
        }))

# 400 epochs as the authors' HetDPT DeiT-B run (METHOD.md §1); the
# scheduler is mmpretrain's: 20 warm-up epochs, then cosine to max_epochs.
train_cfg = dict(max_epochs=400)
