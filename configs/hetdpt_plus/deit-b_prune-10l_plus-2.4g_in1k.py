# Depth, then width pruning in one run (HetDPT+, docs/method.md section 6): the
# one-run HetDPT DeiT-B pruning of ../hetdpt/deit-b_prune-10l_in1k.py (MAP
# split of 10 layers, progressive within-type removal, 400 epochs with the
# dense DeiT-B teacher, <work_dir>/<name>_merged.pth at the end), then
# WidthPruneHook prunes the merged model in width to 2.4 GMACs (counted
# without attention's token x token products, as the paper counts HetDPT+;
# docs/user_guides/reproduce.md) with Torch-Pruning's isomorphic pruning
# (Taylor importance on 3200 training images, Isomorphic Pruning's amount) and
# writes <work_dir>/<name>_plus.pth,
# which ./deit-b_plus-2.4g_finetune_in1k.py fine-tunes
# (--cfg-options model.backbone.init_cfg.checkpoint=... and
# model.head.init_cfg.checkpoint=... to that file).
# docs/user_guides/hetdpt_plus.md.
_base_ = '../hetdpt/deit-b_prune-10l_in1k.py'

custom_hooks = [
    dict(
        type='HetDPTPruneHook',
        map_points={{_base_.map_points}},
        budget={{_base_.budget}},
        schedule='progressive',
    ),
    dict(type='MergeCheckpointHook'),
    dict(
        type='WidthPruneHook',
        target_macs=2.4e9,
        importance='taylor',
        calib_images=3200,
        attention_products=False,
    ),
]
