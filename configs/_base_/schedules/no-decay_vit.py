# The ViT weight-decay rule (timm's optimizer factory, mmpretrain's DeiT
# recipe): no decay on norms, biases, the class token and the position
# embedding (./no-decay_keys.py).  A schedule that inherits it sets its own
# optimizer.
_base_ = './no-decay_keys.py'

optim_wrapper = dict(
    paramwise_cfg=dict(
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        custom_keys=_base_.vit_no_decay_keys,
    )
)
