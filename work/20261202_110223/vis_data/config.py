default_hooks = dict()
model = dict(
    backbone=dict(depth=18, type='mmpretrain.ResNet'),
    type='mmpretrain.ImageClassifier')
work_dir = 'work'
