# HetDPT on the demo digits as the end-to-end demo runs it (tools/demo.py,
# docs/user_guides/demo.md): start from the trained dense model
# (./vit-demo_digits.py), split a budget of removed layers with the MAP fit
# of the demo's own points (./vit-demo_digits_map.py + tools/fit_map.py
# --save-fit), close one gate per epoch with HetDPTPruneHook (progressive
# schedule, the lowest learned score of that type each time), fine-tune the
# pruned network, write <work_dir>/vit-demo_digits_hetdpt_merged.pth.
#
#   python tools/train.py configs/demo/vit-demo_digits_hetdpt.py \
#       --cfg-options load_from=<dense checkpoint> \
#       custom_hooks.0.map_fit=<map_fit.json> custom_hooks.0.budget=4
_base_ = ['./vit-demo_digits_prune.py']

# The outputs of the earlier demo stages (tools/demo.py passes its own).
load_from = 'work_dirs/demo/vit-demo_digits/epoch_10.pth'
budget = 4
custom_hooks = [
    dict(
        type='HetDPTPruneHook',
        map_fit='work_dirs/demo/map/map_fit.json',
        budget=budget,
        schedule='progressive',
        stages=1,
    ),  # one removal per epoch
    dict(type='MergeCheckpointHook'),
]

# Fine-tuning a trained network: a lower peak than training from scratch
# and no boost for the (already trained) position embedding; the base's
# warm-up epoch (the gate scores start at 0) from a tenth of the peak, its
# cosine to the end.
optim_wrapper = dict(
    optimizer=dict(lr=5e-4),
    paramwise_cfg=dict(
        custom_keys={'pos_embed': dict(decay_mult=0.0, lr_mult=1.0)}
    ),
)
param_scheduler = [
    dict(_base_.param_scheduler[0], start_factor=0.1),
    _base_.param_scheduler[1],
]
train_cfg = dict(max_epochs=6, val_interval=2)
