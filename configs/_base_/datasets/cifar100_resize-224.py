# mmpretrain's CIFAR-100 (data/cifar100/cifar-100-python, as mmpretrain
# downloads it) with the 32x32 images resized to the 224x224 of ImageNet
# backbones (bicubic), after mmpretrain's random crop and flip; 64 images
# per evaluation step.
_base_ = 'mmpretrain::_base_/datasets/cifar100_bs16.py'

train_pipeline = [
    dict(type='RandomCrop', crop_size=32, padding=4),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='Resize', scale=224, interpolation='bicubic', backend='pillow'),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='Resize', scale=224, interpolation='bicubic', backend='pillow'),
    dict(type='PackInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(batch_size=64, dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
