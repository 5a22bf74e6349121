# HetDPT stage 2 on DeiT-B as the authors run it (their train_stage2.py,
# scripts/train_stage2_finetune.sh and logs/train_logs.txt; docs/method.md §4,
# docs/user_guides/reproduce.md): restart from the ORIGINAL distilled DeiT-B
# classifier, heads included, cut to a fixed spec (the dense weights are
# converted on loading, as `tools/merge_ckpt.py DENSE OUT --spec S --form
# pruned` does), and fine-tune for 400 epochs with DeiT's hard distillation
# (alpha 0.5) from the dense non-distilled DeiT-B (81.8 %).
# MergeCheckpointHook writes <work_dir>/deit-b_finetune-10l_in1k_merged.pth.
# Paper: 81.8 % top-1.
#
# The spec is the paper's; to fine-tune the spec of your own search run, the
# one option is
#   --cfg-options model.backbone.prune_spec=work_dirs/deit-b_search-10l_in1k/found_spec.json  # noqa: E501
#
#   bash tools/dist_train.sh configs/hetdpt/deit-b_finetune-10l_in1k.py 8
_base_ = [
    '../_base_/models/hetdpt_deit-b_hard-distill.py',
    'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    '../_base_/schedules/hetdpt_finetune_400e.py',
    'mmpretrain::_base_/default_runtime.py',
]

# The paper's DeiT-B spec ("10 layers").
paper_spec = dict(attn_removed=[0, 3, 7, 8, 11], act_removed=[2, 7, 8, 10, 11])

model = dict(backbone=dict(prune_spec=paper_spec))

# 8 GPUs x 512 images (their script and the run of their log), repeated
# augmentation (DeiT's RASampler: 3 repeats).
train_dataloader = dict(
    batch_size=512,
    num_workers=10,
    sampler=dict(type='RepeatAugSampler', shuffle=True, num_repeats=3),
)

custom_hooks = [dict(type='MergeCheckpointHook')]
randomness = dict(seed=42, deterministic=False)
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=2))
