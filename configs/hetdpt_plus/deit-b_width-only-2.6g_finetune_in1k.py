# The paper's width-only baseline of HetDPT+ (Isomorphic Pruning alone,
# "2.6G": 81.1 % top-1 in the paper): the same fine-tune as
# ./deit-b_plus-2.4g_finetune_in1k.py from dense DeiT-B weights pruned in
# width only:
#
#   python tools/prune_width.py \
#       checkpoints/deit_base_distilled_patch16_224-df68dfff.pth \
#       checkpoints/width-only_deit-b_2.6g.pth --target-macs 2.6G \
#       --importance taylor --calib-dir data/imagenet/train
_base_ = './deit-b_plus-2.4g_finetune_in1k.py'

hetdpt_checkpoint = 'checkpoints/width-only_deit-b_2.6g.pth'
model = dict(backbone=dict(init_cfg=dict(checkpoint=hetdpt_checkpoint)),
             head=dict(init_cfg=dict(checkpoint=hetdpt_checkpoint)))
