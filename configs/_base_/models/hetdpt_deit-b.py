# DeiT-B (distilled) as a classifier with the HetDPTViT backbone: the model
# of mmpretrain's deit-base-distilled_16xb64_in1k.py (DeiT head, label
# smoothing, Mixup + CutMix, initialisation) with mmpretrain's
# DistilledVisionTransformer replaced by HetDPTViT.
#
# Start: the official distilled DeiT-B classifier, whole (HetDPT fine-tunes
# that model, docs/method.md §4): the backbone through its Pretrained init_cfg,
# the class and distillation heads (timm's `head`, `head_dist`) through
# PretrainedHeads, so the built classifier computes the official model's
# logits before any training.
custom_imports = dict(imports=['hetdpt_mm'], allow_failed_imports=False)

# https://dl.fbaipublicfiles.com/deit/deit_base_distilled_patch16_224-df68dfff.pth
pretrained_checkpoint = (
    'checkpoints/deit_base_distilled_patch16_224-df68dfff.pth'
)

model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='HetDPTViT',
        arch='deit-base',
        img_size=224,
        patch_size=16,
        distilled=True,  # (cls, dist) tokens for DeiTClsHead
        drop_path_rate=0.1,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained_checkpoint),
    ),
    neck=None,
    head=dict(
        type='DeiTClsHead',
        num_classes=1000,
        in_channels=768,
        loss=dict(
            type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'
        ),
        init_cfg=dict(
            type='PretrainedHeads', checkpoint=pretrained_checkpoint
        ),
    ),
    init_cfg=[
        dict(type='TruncNormal', layer='Linear', std=0.02),
        dict(type='Constant', layer='LayerNorm', val=1.0, bias=0.0),
    ],
    train_cfg=dict(
        augments=[
            dict(type='Mixup', alpha=0.8),
            dict(type='CutMix', alpha=1.0),
        ]
    ),
)
