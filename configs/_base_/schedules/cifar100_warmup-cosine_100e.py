# The fine-tuning schedule of the CIFAR-100 transfer configs: a linear
# warm-up from a thousandth of the learning rate over 5 epochs, then cosine to
# 1e-6 at epoch 100, both stepped every iteration; validation every 10 epochs.
# Learning rates are for 512 images per step (`--auto-scale-lr` rescales
# them).  A config that inherits it sets its own optimizer.
max_epochs = 100
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-3,
        by_epoch=True,
        end=5,
        convert_to_iter_based=True,
    ),
    dict(
        type='CosineAnnealingLR',
        eta_min=1e-6,
        by_epoch=True,
        begin=5,
        end=max_epochs,
        convert_to_iter_based=True,
    ),
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=10)
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=512)
