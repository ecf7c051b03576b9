"""The data section of a config (`config.data`) and the source it reads, as typed records.

`DataSource` names a data set's records: the source (data/datasets/sources.py SOURCES), where it is
stored, for user files their glob and format, and whether they are cached decoded. It identifies a
split's records in the pipeline's caches, and data/prepare.py builds sources by name. `DataConfig`
adds what the trainer reads of them: the splits, the pp strings, the class count, shuffling and
where the pp's tail runs. Few-shot sets are DataSources (vmoe/train/train_evals.py). configs/ build
`config.data` from `DataConfig`, so its defaults are the configs'.

ImageNet-21k's size and V-MoE's hold-out live here too, for the same reason: V-MoE (as ViT) holds
out the first 102,400 images of ImageNet-21k's one split, 'full', for validation and trains on the
rest. The paper configs (configs/common.py) take their splits and count their epochs from these
constants before anything heavy loads; the builder and the sources (data/datasets/imagenet21k.py,
data/datasets/sources.py) name the same splits by IMAGENET21K_SPLITS' aliases.

Light on purpose (no TensorFlow): the configs' parse imports it before anything heavy loads; the
checks that need the data itself are sources.check_available's.
"""
import dataclasses

from data.pp import device_split

FALL11_IMAGES = 14_197_122   # image-net.org's count for fall11; the paper configs' epochs use it.
IMAGENET21K_HOLDOUT = 102_400   # V-MoE/ViT: the first 102,400 training images validate.
IMAGENET21K_SPLITS = {       # Split aliases of the ImageNet-21k source.
    'holdout': f'full[:{IMAGENET21K_HOLDOUT}]',
    'train_minus_holdout': f'full[{IMAGENET21K_HOLDOUT}:]',
}
# 14,094,722: the images the paper configs count.
IMAGENET21K_TRAIN_IMAGES = FALL11_IMAGES - IMAGENET21K_HOLDOUT

@dataclasses.dataclass(frozen=True)
class DataSource:
  """Where a data set's records are: data.name and its directories or files.

  name: a source of data/datasets/sources.py (name[/release] for ImageNet-21k). data_dir: where TFDS
  keeps prepared data sets (None: TFDS's default). manual_dir: where archives downloaded by hand are
  (Fashion-MNIST's IDX files; None: the Debian package's directory). files, file_format: the
  glob and format of multilabel_records files. cache: decode a split once and keep it in memory
  (the small embedded sets).
  """
  name: str
  data_dir: str | None = None
  manual_dir: str | None = None
  files: str | None = None
  file_format: str | None = None
  cache: bool = False

  @property
  def source(self) -> 'DataSource':
    """The records alone (hashable: the key of the pipeline's caches)."""
    return DataSource(**{f.name: getattr(self, f.name) for f in dataclasses.fields(DataSource)})


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataConfig(DataSource):
  """`config.data`: training and held-out splits of one source, their pp strings and classes.

  pp_train / pp_eval: pp strings (data/pp/ops.py) ending in float32 'image' and one-hot 'labels'.
  shuffle_buffer: the locality of the training order (data/stream/pipeline.py; >= the split: a
  uniform permutation). train_images: the training split's size num_train_steps counts epochs of
  (checked by sources.check_available); None counts no epochs. augment_on: where the pp strings'
  tails run ('host', or 'device': the accelerator runs the flip, RandAugment, value range, one-hot
  and keep at the end of every pp string, training, evaluation and few-shot;
  data/pp/device_split.py; vmoe/train/experiment.py's parse cuts every pp string once and checks
  its tail).
  """
  train_split: str
  eval_split: str
  pp_train: str
  pp_eval: str
  num_classes: int
  shuffle_buffer: int
  train_images: int | None = None
  augment_on: str = 'host'

  def __post_init__(self):
    device_split.check_augment_on(self.augment_on)
    if self.num_classes < 1:
      raise ValueError(f'data.num_classes must be >= 1, got {self.num_classes}.')
    if self.shuffle_buffer < 1:
      raise ValueError(f'data.shuffle_buffer must be >= 1 (1 keeps the stored order), got '
                       f'{self.shuffle_buffer}.')
    if self.train_images is not None and self.train_images < 1:
      raise ValueError(f'data.train_images must be >= 1 or None, got {self.train_images}.')
    for name in ('pp_train', 'pp_eval'):
      # The labels the pp makes are the head's classes, on either path.
      device_split.check_label_depths(getattr(self, name), self.num_classes, f'data.{name}')

