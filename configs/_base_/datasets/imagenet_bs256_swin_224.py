# mmpretrain's ImageNet data for DeiT with 256 images per GPU (its DeiT-S
# recipe, 4 x 256) instead of 64 (DeiT-B, 16 x 64).
_base_ = 'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py'

train_dataloader = dict(batch_size=256)
