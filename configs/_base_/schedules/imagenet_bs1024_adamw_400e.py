# mmpretrain's DeiT schedule (AdamW, lr 1e-3 for 1024 images per step, 20
# warm-up epochs, then cosine to max_epochs; no weight decay on norms, biases
# and tokens; gradients clipped at 5) for 400 epochs, as the authors' HetDPT
# DeiT-B run (docs/method.md §1).
_base_ = [
    'mmpretrain::_base_/schedules/imagenet_bs1024_adamw_swin.py',
    './no-decay_keys.py',
]

# (mmpretrain's schedule already spares norms and biases.)
optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            **_base_.deit_no_decay_keys,
            # HetDPT's learned layer importances (gated runs) are never
            # decayed (docs/method.md §3).
            'hetdpt_score': dict(decay_mult=0.0),
        }
    ),
    clip_grad=dict(max_norm=5.0),
)
train_cfg = dict(max_epochs=400)
