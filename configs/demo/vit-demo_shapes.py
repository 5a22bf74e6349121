# The CPU demo's classifier (tools/demo.py, docs/user_guides/demo.md): an
# 8-block, 48-wide ViT at patch 4 (64 patches of a 32x32 image) on the
# shapes task (hetdpt_demo.data.make_pairs: do two distant
# glyphs have the same shape, and which; 5 classes), trained from scratch
# with the recipe of ./vit-demo_digits.py until more epochs stop helping.
_base_ = ['./vit-demo_digits.py']

data_root = 'data/demo/shapes'
demo_arch = dict(embed_dims=48, num_layers=8, num_heads=3, mlp_ratio=4)
model = dict(
    backbone=dict(arch=demo_arch),
    head=dict(num_classes=5, in_channels=demo_arch['embed_dims']),
)
data_preprocessor = dict(num_classes=5)
train_dataloader = dict(dataset=dict(data_root=data_root))
val_dataloader = dict(dataset=dict(data_root=data_root))
test_dataloader = dict(dataset=dict(data_root=data_root))

# Validated every 4 epochs: the curve, and the demo's no-removal runs
# (this model given a prune run's epochs), show whether more epochs help.
epochs = 24
train_cfg = dict(max_epochs=epochs, val_interval=4)
default_hooks = dict(checkpoint=dict(interval=epochs, max_keep_ckpts=1))
