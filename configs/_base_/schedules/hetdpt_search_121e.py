# The authors' search schedule (stage 1 step 2, their train_stage1_step2.py;
# docs/user_guides/reproduce.md): AdamW, weight decay 0.05 (none on norms,
# biases, tokens and the gate scores), and their `cyclecosine` learning rate,
# which with one cycle starts the first epoch at 1e-6 and then holds 1e-5 (its
# minimum): a constant 1e-5 after one epoch at a tenth of it.  No gradient
# clipping. 121 epochs: removal k happens after (k+1)^2 completed epochs (stage
# lengths 4, 5, 7, 9, ...), so the 10th and last after epoch 121; the spec is
# then final (stage 2 restarts from the original weights).
_base_ = './no-decay_deit.py'

optim_wrapper = dict(
    optimizer=dict(
        type='AdamW', lr=1e-5, weight_decay=0.05, eps=1e-8, betas=(0.9, 0.999)
    ),
    paramwise_cfg=dict(custom_keys={'hetdpt_score': dict(decay_mult=0.0)}),
)
param_scheduler = [
    dict(type='ConstantLR', factor=0.1, by_epoch=True, begin=0, end=1),
]
train_cfg = dict(by_epoch=True, max_epochs=121, val_interval=1)
val_cfg = dict()
test_cfg = dict()
