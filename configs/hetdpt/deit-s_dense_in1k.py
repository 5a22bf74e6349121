# Dense DeiT-S (distilled) with the HetDPTViT backbone on ImageNet-1k: the
# control run of deit-s_prune-10l_in1k.py and the _base_ of the other DeiT-S
# configs here.  Everything HetDPT-specific is as in deit-b_dense_in1k.py;
# data, augmentation and optimizer are mmpretrain's DeiT-S recipe.
_base_ = 'mmpretrain::deit/deit-small-distilled_4xb256_in1k.py'
custom_imports = dict(imports=['hetdpt_mm'], allow_failed_imports=False)

# https://dl.fbaipublicfiles.com/deit/deit_small_distilled_patch16_224-649709d9.pth
pretrained_checkpoint = \
    'checkpoints/deit_small_distilled_patch16_224-649709d9.pth'

model = dict(
    backbone=dict(
        _delete_=True,
        type='HetDPTViT',
        arch='deit-small',
        img_size=224,
        patch_size=16,
        distilled=True,  # (cls, dist) tokens for DeiTClsHead
        drop_path_rate=0.0,  # mmpretrain's DeiT-S recipe has none
        init_cfg=dict(type='Pretrained', checkpoint=pretrained_checkpoint)))

optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            '.dist_token': dict(decay_mult=0.0),
            'hetdpt_score': dict(decay_mult=0.0),
        }))

train_cfg = dict(max_epochs=400)
