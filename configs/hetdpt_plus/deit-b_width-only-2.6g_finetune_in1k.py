# The paper's width-only baseline of HetDPT+ (Isomorphic Pruning alone,
# "2.6G": 81.1 % top-1, 13.1 M params in the paper): the same fine-tune as
# ./deit-b_plus-2.4g_finetune_in1k.py from dense DeiT-B weights pruned in
# width only, to 2.6 GMACs counted as Isomorphic Pruning counts them (with
# attention's token x token products; docs/user_guides/reproduce.md):
#
#   python tools/prune_width.py \
#       checkpoints/deit_base_distilled_patch16_224-df68dfff.pth \
#       checkpoints/width-only_deit-b_2.6g.pth --target-macs 2.6G \
#       --macs-convention with-attention-products \
#       --importance taylor --calib-dir data/imagenet/train
#
# ./deit-b_width-only-4.2g_finetune_in1k.py and
# ./deit-b_width-only-1.2g_finetune_in1k.py are its other two operating
# points.
_base_ = './deit-b_plus-2.4g_finetune_in1k.py'

hetdpt_checkpoint = 'checkpoints/width-only_deit-b_2.6g.pth'
model = dict(
    backbone=dict(init_cfg=dict(checkpoint=hetdpt_checkpoint)),
    head=dict(init_cfg=dict(checkpoint=hetdpt_checkpoint)),
)
