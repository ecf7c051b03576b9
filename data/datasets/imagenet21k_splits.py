"""ImageNet-21k fall11's size and V-MoE's hold-out, without TensorFlow.

V-MoE (as ViT) holds out the first 102,400 images of ImageNet-21k's one split, 'full', for
validation and trains on the rest. The paper configs (configs/common.py) take their splits and
count their epochs from here before anything heavy loads; the builder and the pipeline
(data/datasets/imagenet21k.py, data/datasets/sources.py) name the same splits by these aliases.
"""
FALL11_IMAGES = 14_197_122   # image-net.org's count for fall11; the paper configs' epochs use it.
HOLDOUT_SIZE = 102_400       # V-MoE/ViT: the first 102,400 training images are the validation set.
SPLIT_ALIASES = {
    'holdout': f'full[:{HOLDOUT_SIZE}]',
    'train_minus_holdout': f'full[{HOLDOUT_SIZE}:]',
}
TRAIN_IMAGES = FALL11_IMAGES - HOLDOUT_SIZE   # 14,094,722: the images the paper configs count.
