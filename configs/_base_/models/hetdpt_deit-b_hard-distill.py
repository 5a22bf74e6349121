# The DeiT-B classifier of ./hetdpt_deit-b.py trained with DeiT's hard
# distillation (alpha 0.5) from the dense non-distilled DeiT-B (81.8 %), the
# authors' HetDPT teacher.
_base_ = './hetdpt_deit-b.py'
custom_imports = dict(
    imports=['hetdpt_mm', 'hetdpt_mm.models.distill'],
    allow_failed_imports=False,
)

# https://dl.fbaipublicfiles.com/deit/deit_base_patch16_224-b5f2ef4d.pth
teacher_checkpoint = 'checkpoints/deit_base_patch16_224-b5f2ef4d.pth'

model = dict(
    type='HetDPTDistillClassifier',
    distill=dict(mode='hard', alpha=0.5),
    teacher=dict(
        type='ImageClassifier',
        backbone=dict(
            type='HetDPTViT', arch='deit-base', img_size=224, patch_size=16
        ),
        head=dict(
            type='VisionTransformerClsHead', num_classes=1000, in_channels=768
        ),
    ),
    teacher_checkpoint=teacher_checkpoint,
)
