"""Few-shot linear transfer: closed-form ridge regression on frozen features.

The paper's downstream task (Sec. 4, "Downstream task results", after ViT and V-MoE): the
pre-trained model maps each image to a fixed feature vector (its pre-logits); a linear map from
features to one-hot targets is fitted by regularised least squares on `shots` images per class,
and a test image gets the class of the largest output.

Recipe (the facts of big_vision evaluators/fewshot_lsr.py and V-MoE evaluate/fewshot.py, whose
numbers the paper reports):
  * each feature is whitened with the few-shot TRAIN mean and standard deviation (+1e-5, so a
    constant feature is not divided by zero); test features use the same statistics;
  * a constant bias feature of value 100 is appended. Ridge penalises its weight w_b, but the
    intercept is 100 w_b, so the intercept's penalty is l2 / 100^2: almost unregularised;
  * targets are one-hot vectors rescaled to {-1, +1};
  * the ridge solutions for the whole l2 grid 2^-10 ... 2^19 (V-MoE common_fewshot.py, 30 values)
    come from ONE symmetric eigendecomposition (`fit_ridge_path`).

Two reporting conventions, both computed on the same fits:
  best-l2  the l2 whose test accuracy (mean over seeds) is the best on the grid, and that
           accuracy. This is what the literature reports (V-MoE picks the l2 with the best mean
           rank of TEST accuracy across its few-shot tasks); it peeks at test labels, so it is
           optimistic. Here the l2 is picked per dataset and shot count.
  CV       per seed, the l2 with the best stratified k-fold cross-validation accuracy inside
           the few-shot training set (no test label is read), then the test accuracy at that l2.
           Undefined for 1 shot (no class has a second example to hold out): not reported.

Shapes: N examples, F features, C classes, L values of l2, R = min(N, F + 1) eigenvalues.
"""
import dataclasses
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from base import shot_sampling
from base import stats

L2_GRID_LOG2 = (-10, 19)                       # 2^-10 ... 2^19 (V-MoE common_fewshot.py).
L2_GRID = tuple(2.0 ** np.arange(L2_GRID_LOG2[0], L2_GRID_LOG2[1] + 1))
BIAS_CONSTANT = 100.0                          # big_vision / V-MoE fewshot: BIAS_CONSTANT.
STD_EPSILON = 1e-5                             # big_vision / V-MoE fewshot: std + 1e-5.
SHOTS = (10,)                                  # Paper Sec. 4.3: "10 image samples per class".
SEEDS = 3                                      # Not in the paper: mean over 3 draws of the shots.
CV_FOLDS = 5
CONVENTIONS = {'best_l2': '', 'cv': '_cv'}     # Reporting convention -> metric-name suffix.
_SCORE_ROWS = 4096       # Test rows scored at a time: bounds the (rows, C) score matrix.


@dataclasses.dataclass(frozen=True)
class FewShotConfig:
  """`config.fewshot`: few-shot linear transfer during training (V-MoE common_fewshot).

  datasets: name -> (split to draw the shots from, split to evaluate on); none turns few-shot
  off. pp: the pp string of their images (keeping the int 'label'). Every `every_steps` and at
  the end, `seeds` draws of each shot count of `shots`, ridge l2 over 2^l2_grid_min_log2 ...
  2^l2_grid_max_log2. data_dir / manual_dirs[name]: where the sets live (None: TFDS's default; a
  set that is also the training set reads from the data section's directories). configs/ build
  `config.fewshot` from this class.
  """
  datasets: Mapping[str, tuple[str, str]]
  pp: str
  batch_size: int
  every_steps: int
  shots: tuple[int, ...] = SHOTS
  seeds: int = SEEDS
  l2_grid_min_log2: int = L2_GRID_LOG2[0]
  l2_grid_max_log2: int = L2_GRID_LOG2[1]
  data_dir: str | None = None
  manual_dirs: Mapping[str, str | None] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    datasets = {name: tuple(splits) for name, splits in dict(self.datasets).items()}
    bad = [name for name, splits in datasets.items() if len(splits) != 2]
    if bad:
      raise ValueError(f'fewshot.datasets must map each name to (shots split, test split); '
                       f'check {", ".join(bad)}.')
    object.__setattr__(self, 'datasets', datasets)
    # One entry per set (None: TFDS's default); entries of sets not evaluated are dropped.
    object.__setattr__(self, 'manual_dirs', {n: dict(self.manual_dirs).get(n) for n in datasets})
    object.__setattr__(self, 'shots', tuple(self.shots))
    if self.seeds < 1 or not self.shots or any(k < 1 for k in self.shots):
      raise ValueError(f'fewshot.seeds={self.seeds} and every fewshot.shots={self.shots} must be '
                       '>= 1.')
    if self.batch_size < 1 or self.every_steps < 1:
      raise ValueError(f'fewshot.batch_size={self.batch_size} and fewshot.every_steps='
                       f'{self.every_steps} must be >= 1.')
    if self.l2_grid_min_log2 > self.l2_grid_max_log2:
      raise ValueError(f'fewshot.l2_grid_min_log2={self.l2_grid_min_log2} must be <= '
                       f'fewshot.l2_grid_max_log2={self.l2_grid_max_log2}.')

  @property
  def l2_grid(self) -> tuple[float, ...]:
    """2^min ... 2^max, the ridge penalties tried."""
    return tuple(2.0 ** np.arange(self.l2_grid_min_log2, self.l2_grid_max_log2 + 1))


# ---------------------------------------------------------------------------------------------
# The solver.


@dataclasses.dataclass(frozen=True)
class RidgePath:
  """Ridge regressions for every l2 > 0 from one eigendecomposition.

  The weights for l2 are W(l2) = lhs diag(1 / (eigenvalues + l2)) rhs, of shape (F + 1, C); the
  last row is the bias feature's weight.
  """
  mean: np.ndarray          # (F,) few-shot train mean.
  std: np.ndarray           # (F,) few-shot train standard deviation + STD_EPSILON.
  eigenvalues: np.ndarray   # (R,)
  lhs: np.ndarray           # (F + 1, R)
  rhs: np.ndarray           # (R, C)

  def weights(self, l2: float) -> np.ndarray:
    """(F + 1, C) ridge weights for one l2 (> 0)."""
    return (self.lhs / (self.eigenvalues + l2)) @ self.rhs

  def design(self, features: np.ndarray) -> np.ndarray:
    """(N, F + 1): `features` whitened with the TRAIN statistics, bias feature appended."""
    return design_matrix(features, self.mean, self.std)


def design_matrix(features: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
  """(N, F + 1) float64: (features - mean) / std, then a column of BIAS_CONSTANT."""
  x = (np.asarray(features, np.float64) - mean) / std
  return np.concatenate([x, np.full((len(x), 1), BIAS_CONSTANT)], axis=1)


def signed_one_hot(labels: np.ndarray, num_classes: int) -> np.ndarray:
  """(N, C) targets: +1 at the label, -1 elsewhere (big_vision: 2 one_hot - 1)."""
  return np.where(np.arange(num_classes) == np.asarray(labels)[:, None], 1.0, -1.0)


def fit_ridge_path(features: np.ndarray, labels: np.ndarray, num_classes: int) -> RidgePath:
  """Whitens (N, F) train features, appends the bias and decomposes the smaller Gram matrix.

  Ridge weights are W = (X^T X + l2 I)^-1 X^T Y (X: (N, F + 1) design, Y: (N, C) targets), and
  by the push-through identity also W = X^T (X X^T + l2 I)^-1 Y. Both Gram matrices share their
  non-zero eigenvalues; the eigendecomposition costs O(m^3) for an m x m Gram and forming it
  O(N (F + 1) m), so we decompose whichever of X^T X ((F+1) x (F+1)) and X X^T (N x N) is
  smaller. With G = Q diag(e) Q^T, every l2 then costs one diagonal rescaling:
    primal (N >= F + 1): W = Q diag(1 / (e + l2)) (Q^T X^T Y)      lhs = Q,       rhs = Q^T X^T Y
    kernel (N <  F + 1): W = X^T Q diag(1 / (e + l2)) (Q^T Y)      lhs = X^T Q,   rhs = Q^T Y
  ImageNet 10-shot on B/32 features: N = 10,000 > F + 1 = 769, so the primal (769 x 769) form;
  L/16 1-shot: N = 1,000 < 1,025, so the kernel (1000 x 1000) form.
  """
  features = np.asarray(features, np.float64)
  if features.ndim != 2 or len(features) != len(labels):
    raise ValueError(f'features must be (N, F) with one label per row; got features '
                     f'{features.shape} and {len(labels)} labels.')
  mean = features.mean(axis=0)
  std = features.std(axis=0) + STD_EPSILON
  x = design_matrix(features, mean, std)
  y = signed_one_hot(labels, num_classes)
  num_points, dim = x.shape
  if num_points >= dim:
    eigenvalues, q = np.linalg.eigh(x.T @ x)
    lhs, rhs = q, q.T @ (x.T @ y)
  else:
    eigenvalues, q = np.linalg.eigh(x @ x.T)
    lhs, rhs = x.T @ q, q.T @ y
  return RidgePath(mean, std, eigenvalues, lhs, rhs)


def accuracy_per_l2(path: RidgePath, features: np.ndarray, labels: np.ndarray,
                    l2_grid: Sequence[float] = L2_GRID) -> np.ndarray:
  """(L,) accuracy on (features, labels) of the ridge solution for each l2 of the grid.

  Scores are (X lhs) diag(1 / (e + l2)) rhs: the (N, R) projection is computed once; rows are
  scored in chunks so that memory stays O(rows x C) even for 50,000 ImageNet test images.
  """
  labels = np.asarray(labels)
  if len(labels) == 0:
    raise ValueError('no examples to evaluate on (all masked?).')
  correct = np.zeros(len(l2_grid))
  scaled_rhs = [path.rhs / (path.eigenvalues + l2)[:, None] for l2 in l2_grid]   # L x (R, C)
  for start in range(0, len(labels), _SCORE_ROWS):
    projected = path.design(features[start:start + _SCORE_ROWS]) @ path.lhs       # (rows, R)
    truth = labels[start:start + _SCORE_ROWS]
    for i, rhs in enumerate(scaled_rhs):
      correct[i] += np.count_nonzero(np.argmax(projected @ rhs, axis=1) == truth)
  return correct / len(labels)


def argmax_prefer_larger(values: np.ndarray) -> int:
  """Index of the maximum; ties go to the LAST index, i.e. the largest l2 of an ascending grid.

  Accuracies on a few hundred examples tie often; among equally accurate fits the most
  regularised one is the least sensitive to the particular shots drawn.
  """
  values = np.asarray(values)
  return len(values) - 1 - int(np.argmax(values[::-1]))


# ---------------------------------------------------------------------------------------------
# Shots and cross-validation.


def check_shots(labels: np.ndarray, num_classes: int, shots: int, where: str = 'the train set'):
  """Fails unless every class 0..C-1 has exactly `shots` examples in `labels`."""
  counts = shot_sampling.class_counts(labels, num_classes)
  wrong = np.flatnonzero(counts != shots)
  if wrong.size:
    c = wrong[0]
    raise ValueError(f'{where}: class {c} has {counts[c]} examples, expected exactly shots={shots} '
                     f'per class ({wrong.size} of {num_classes} classes differ); draw the few-shot '
                     'set with exactly `shots` examples of every class.')


def stratified_folds(labels: np.ndarray, num_folds: int, seed: int) -> np.ndarray:
  """(N,) fold id of each example: every class's examples dealt round-robin in a random order,
  so each fold holds floor or ceil(count / num_folds) examples of each class."""
  labels = np.asarray(labels)
  rng = np.random.default_rng(seed)
  order = rng.permutation(len(labels))
  order = order[np.argsort(labels[order], kind='stable')]     # Grouped by class, random within.
  rank_in_class = np.empty(len(labels), np.int64)
  _, starts, counts = np.unique(labels[order], return_index=True, return_counts=True)
  for start, count in zip(starts, counts):
    rank_in_class[order[start:start + count]] = np.arange(count)
  return rank_in_class % num_folds


def cross_validation_accuracy(features: np.ndarray, labels: np.ndarray, num_classes: int,
                              shots: int, l2_grid: Sequence[float] = L2_GRID,
                              num_folds: int = CV_FOLDS, seed: int = 0) -> np.ndarray:
  """(L,) k-fold CV accuracy of each l2, using ONLY the few-shot training set.

  k = min(num_folds, shots) stratified folds: every fold keeps each class in its training part.
  Each fold's fit is whitened with that fold's own training statistics, as the final fit is
  with the whole few-shot set's. Needs shots >= 2.
  """
  if shots < 2:
    raise ValueError(f'cross-validation needs shots >= 2 (a held-out example of each class); '
                     f'got shots={shots}.')
  folds = stratified_folds(labels, min(num_folds, shots), seed)
  labels = np.asarray(labels)
  correct = np.zeros(len(l2_grid))
  for fold in range(folds.max() + 1):
    held = folds == fold
    path = fit_ridge_path(features[~held], labels[~held], num_classes)
    correct += accuracy_per_l2(path, features[held], labels[held], l2_grid) * held.sum()
  return correct / len(labels)


# ---------------------------------------------------------------------------------------------
# One few-shot problem, and their aggregation over seeds.


@dataclasses.dataclass(frozen=True)
class FewShotResult:
  """One draw of the shots: test accuracy for every l2, and the l2 chosen by CV (or None)."""
  test_accuracy: np.ndarray       # (L,)
  cv_index: int | None            # Index into the l2 grid; None for 1 shot.

  @property
  def cv_accuracy(self) -> float | None:
    return None if self.cv_index is None else float(self.test_accuracy[self.cv_index])


def solve_fewshot(train_features: np.ndarray, train_labels: np.ndarray,
                  test_features: np.ndarray, test_labels: np.ndarray, num_classes: int,
                  shots: int, *, l2_grid: Sequence[float] = L2_GRID, num_folds: int = CV_FOLDS,
                  seed: int = 0) -> FewShotResult:
  """Fits a `shots`-shot training set (exactly `shots` per class, checked) for every l2.

  The CV choice is made before, and independently of, anything about the test set.
  """
  _check_grid(l2_grid)
  check_shots(train_labels, num_classes, shots)
  cv_index = None
  if shots >= 2:
    cv_index = argmax_prefer_larger(cross_validation_accuracy(
        train_features, train_labels, num_classes, shots, l2_grid, num_folds, seed))
  path = fit_ridge_path(train_features, train_labels, num_classes)
  shot_sampling.class_counts(test_labels, num_classes)   # Test labels outside [0, C) fail here.
  return FewShotResult(accuracy_per_l2(path, test_features, test_labels, l2_grid), cv_index)


@dataclasses.dataclass(frozen=True)
class Aggregate:
  """One (dataset, shots) cell over seeds, in both conventions."""
  best_l2: float          # The grid's l2 with the best mean test accuracy.
  best: stats.Stat        # Test accuracy at best_l2, over seeds.
  cv: stats.Stat | None   # Test accuracy at each seed's CV-chosen l2; None for 1 shot.
  cv_l2: tuple            # The CV-chosen l2 of each seed.


def aggregate(results: Sequence[FewShotResult], l2_grid: Sequence[float] = L2_GRID) -> Aggregate:
  """Combines the seeds of one (dataset, shots) cell."""
  table = np.stack([r.test_accuracy for r in results])          # (seeds, L)
  best = argmax_prefer_larger(table.mean(axis=0))
  cv = [r.cv_accuracy for r in results if r.cv_index is not None]
  return Aggregate(
      best_l2=float(l2_grid[best]), best=stats.stat(table[:, best]), cv=stats.stat(cv),
      cv_l2=tuple(float(l2_grid[r.cv_index]) for r in results if r.cv_index is not None))


def _check_grid(l2_grid: Sequence[float]):
  grid = np.asarray(l2_grid, np.float64)
  if grid.ndim != 1 or grid.size == 0 or np.any(grid <= 0) or np.any(np.diff(grid) <= 0):
    raise ValueError(f'l2_grid must be a non-empty, strictly increasing list of positive values; '
                     f'got {l2_grid!r}.')


# ---------------------------------------------------------------------------------------------
# The evaluator.


@dataclasses.dataclass(frozen=True)
class FewShotData:
  """How one few-shot dataset reaches the evaluator (so this module knows nothing of data/).

  train_batches(shots, seed): dict batches {'image', 'label' (int), 'mask'} holding exactly
    `shots` unmasked examples of every class, the same ones for the same seed.
  test_batches(): dict batches {'image', 'label', 'mask'} covering the test split once
    (padding rows have mask 0).
  """
  train_batches: Callable[[int, int], Iterable[dict]]
  test_batches: Callable[[], Iterable[dict]]


def metric_name(dataset: str, shots: int, convention: str = 'best_l2', stat: str = 'mean') -> str:
  """'fewshot/{dataset}/{shots}shot' + '_cv' for the CV convention + '_std' for the spread."""
  if convention not in CONVENTIONS:
    raise ValueError(f'unknown convention {convention!r}; valid: {", ".join(CONVENTIONS)}.')
  if stat not in ('mean', 'std'):
    raise ValueError(f"unknown stat {stat!r}; valid: mean, std.")
  return (f'fewshot/{dataset}/{shots}shot' + CONVENTIONS[convention] +
          ('_std' if stat == 'std' else ''))


def summary_table(metrics: Mapping[str, float], convention: str) -> dict:
  """{dataset: {'10': mean accuracy}} from evaluator metrics (the summary.json 'fewshot' and
  'fewshot_cv' shape); other metrics are ignored."""
  suffix = CONVENTIONS.get(convention)
  if suffix is None:
    raise ValueError(f'unknown convention {convention!r}; valid: {", ".join(CONVENTIONS)}.')
  table = {}
  for name, value in metrics.items():
    parts = name.split('/')
    if len(parts) != 3 or parts[0] != 'fewshot' or not parts[2].endswith('shot' + suffix):
      continue
    shots = parts[2][:-len('shot' + suffix)]
    if shots.isdigit():
      table.setdefault(parts[1], {})[shots] = float(value)
  return table


class FewShotEvaluator:
  """Few-shot linear transfer of frozen features on several datasets, big_vision style.

  `run(feature_fn)` yields (name, value): for every dataset and shot count, the mean and std over
  seeds of the best-l2 test accuracy ('fewshot/digits/10shot', '..._std') and of the CV-l2 one
  ('fewshot/digits/10shot_cv', '..._cv_std'; not for 1 shot). Test features are extracted once
  per run and reused for every shot count and seed.
  """

  def __init__(self, datasets: Mapping[str, FewShotData], *, shots: Sequence[int] = SHOTS,
               seeds: int = SEEDS, l2_grid: Sequence[float] = L2_GRID, num_folds: int = CV_FOLDS):
    if not datasets:
      raise ValueError('FewShotEvaluator needs at least one dataset.')
    if num_folds < 2:   # Seeds and shots are FewShotConfig's to check.
      raise ValueError(f'need num_folds >= 2, got {num_folds}.')
    _check_grid(l2_grid)
    self.datasets = dict(datasets)
    self.shots = tuple(shots)
    self.seeds = seeds
    self.l2_grid = tuple(l2_grid)
    self.num_folds = num_folds

  def cells(self, feature_fn: Callable[[np.ndarray], np.ndarray]
            ) -> Iterator[tuple[str, int, Aggregate]]:
    """(dataset, shots, Aggregate over seeds) for every dataset and shot count; feature_fn as
    in run()."""
    for name, data in self.datasets.items():
      test_x, test_y = extract_features(feature_fn, data.test_batches())
      for shots in self.shots:
        draws = []
        for seed in range(self.seeds):
          train_x, train_y = extract_features(feature_fn, data.train_batches(shots, seed))
          num_classes = int(max(train_y.max(), test_y.max())) + 1
          where = f'few-shot dataset {name!r} (shots={shots}, seed={seed})'
          try:
            check_shots(train_y, num_classes, shots, where)
          except ValueError as e:
            raise ValueError(f'{e} The train_batches callable must yield exactly `shots` '
                             'unmasked examples of every class.') from None
          draws.append(solve_fewshot(train_x, train_y, test_x, test_y, num_classes, shots,
                                     l2_grid=self.l2_grid, num_folds=self.num_folds, seed=seed))
        yield name, shots, aggregate(draws, self.l2_grid)

  def run(self, feature_fn: Callable[[np.ndarray], np.ndarray]) -> Iterator[tuple[str, float]]:
    """feature_fn(images) -> (B, F) features (numpy or jax). Yields (name, accuracy) pairs."""
    for name, shots, cell in self.cells(feature_fn):
      yield metric_name(name, shots), cell.best.mean
      yield metric_name(name, shots, stat='std'), cell.best.std
      if cell.cv is not None:
        yield metric_name(name, shots, 'cv'), cell.cv.mean
        yield metric_name(name, shots, 'cv', 'std'), cell.cv.std


def extract_features(feature_fn: Callable,
                     batches: Iterable[dict]) -> tuple[np.ndarray, np.ndarray]:
  """Concatenated (N, F) float64 features and (N,) int labels of the unmasked rows."""
  features, labels = [], []
  for batch in batches:
    missing = {'image', 'label', 'mask'} - set(batch)
    if missing:
      raise KeyError(f'few-shot batches need keys image, label, mask; missing {sorted(missing)} '
                     f'(got {sorted(batch)}).')
    keep = np.asarray(batch['mask']).astype(bool)
    out = np.asarray(feature_fn(batch['image']), np.float64)
    if out.ndim != 2 or len(out) != len(keep):
      raise ValueError(f'feature_fn must map B images to (B, F) features; got {out.shape} for '
                       f'B={len(keep)}.')
    features.append(out[keep])
    labels.append(np.asarray(batch['label'])[keep].astype(np.int64))
  if not features or sum(len(f) for f in features) == 0:
    raise ValueError('few-shot batches held no unmasked examples.')
  return np.concatenate(features), np.concatenate(labels)
