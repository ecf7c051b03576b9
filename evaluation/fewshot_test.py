"""Tests of the few-shot ridge solver, its two reporting conventions and the evaluator."""
import numpy as np
import pytest
from sklearn import datasets as sk_datasets

from base import shot_sampling
from evaluation import fewshot as fs


def random_problem(num_points, num_features, num_classes=3, seed=0):
  rng = np.random.default_rng(seed)
  features = rng.normal(size=(num_points, num_features)) * rng.uniform(0.1, 5, num_features)
  return features, rng.integers(0, num_classes, num_points)


@pytest.fixture(scope='module')
def digits():
  """scikit-learn digits (1,797 8x8 images, 10 classes): raw pixels as features, split into a
  pool of 1,000 to draw shots from and 797 test images."""
  data = sk_datasets.load_digits()
  order = np.random.default_rng(0).permutation(len(data.target))
  pool, test = order[:1000], order[1000:]
  return data.data[pool], data.target[pool], data.data[test], data.target[test]


def test_grid_is_v_moe_l2_regs():
  assert len(fs.L2_GRID) == 30
  assert fs.L2_GRID[0] == 2.0 ** -10 and fs.L2_GRID[-1] == 2.0 ** 19


@pytest.mark.parametrize('num_points,num_features', [(60, 20), (12, 40)],
                         ids=['primal_gram', 'kernel_gram'])
def test_ridge_path_equals_direct_solve_for_every_l2(num_points, num_features):
  features, labels = random_problem(num_points, num_features)
  path = fs.fit_ridge_path(features, labels, 3)
  # The smaller Gram matrix was decomposed: R = min(N, F + 1) eigenvalues.
  assert path.eigenvalues.shape == (min(num_points, num_features + 1),)
  assert path.lhs.shape == (num_features + 1, len(path.eigenvalues))
  x = path.design(features)
  y = fs.signed_one_hot(labels, 3)
  for l2 in fs.L2_GRID:
    direct = np.linalg.solve(x.T @ x + l2 * np.eye(num_features + 1), x.T @ y)
    np.testing.assert_allclose(path.weights(l2), direct, rtol=0,
                               atol=1e-9 * np.abs(direct).max(), err_msg=f'l2={l2}')


def test_accuracy_per_l2_is_the_accuracy_of_each_weight_matrix():
  features, labels = random_problem(40, 8, seed=1)
  test_x, test_y = random_problem(9000, 8, seed=2)   # More rows than one scoring chunk.
  path = fs.fit_ridge_path(features, labels, 3)
  got = fs.accuracy_per_l2(path, test_x, test_y)
  want = [np.mean(np.argmax(path.design(test_x) @ path.weights(l2), 1) == test_y)
          for l2 in fs.L2_GRID]
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_whitening_uses_train_statistics_and_appends_the_bias():
  features, labels = random_problem(50, 6)
  path = fs.fit_ridge_path(features, labels, 3)
  x = path.design(features)
  assert x.shape == (50, 7)
  np.testing.assert_allclose(x[:, :6].mean(0), 0, atol=1e-12)
  # std / (std + 1e-5): unit variance up to the epsilon of big_vision.
  np.testing.assert_allclose(x[:, :6].std(0), 1, atol=1e-4)
  np.testing.assert_array_equal(x[:, 6], 100.0)
  # A test row equal to the train mean maps to zero features (train statistics, not its own).
  np.testing.assert_allclose(path.design(features.mean(0, keepdims=True))[0, :6], 0, atol=1e-12)


def test_predictions_do_not_depend_on_the_units_of_each_feature():
  features, labels = random_problem(30, 5, seed=3)
  test_x, test_y = random_problem(500, 5, seed=4)
  scale, shift = np.array([0.5, 2, 3, 10, 0.25]), np.array([-4, 1, 0, 7, 100])
  plain = fs.accuracy_per_l2(fs.fit_ridge_path(features, labels, 3), test_x, test_y)
  moved = fs.accuracy_per_l2(fs.fit_ridge_path(features * scale + shift, labels, 3),
                             test_x * scale + shift, test_y)
  np.testing.assert_allclose(moved, plain, atol=1e-12)


def test_bias_is_the_almost_unregularised_mean_target():
  # Whitened columns are centred, hence orthogonal to the constant bias column, so the bias
  # decouples: its weight is 100 sum(y) / (100^2 N + l2) and the intercept is 100 times that.
  # 10 classes x 2 shots: each class's targets are two +1 and eighteen -1, mean -0.8.
  # l2 = 2^19 = 524288, N = 20: intercept = -0.8 * 200000 / (200000 + 524288) = -0.22091.
  rng = np.random.default_rng(5)
  labels = np.repeat(np.arange(10), 2)
  path = fs.fit_ridge_path(rng.normal(size=(20, 4)), labels, 10)
  intercept = 100 * path.weights(2.0 ** 19)[-1]
  np.testing.assert_allclose(intercept, -0.22091, atol=1e-5)
  np.testing.assert_allclose(100 * path.weights(2.0 ** -10)[-1], -0.8, atol=1e-6)


def test_ties_choose_the_largest_l2():
  assert fs.argmax_prefer_larger([0.5, 0.7, 0.7, 0.1]) == 2
  assert fs.argmax_prefer_larger([0.9, 0.7]) == 0


def test_a_train_set_that_is_not_shots_shot_fails_clearly():
  labels = np.array([0] * 7 + [1] * 5 + [2] * 9)
  with pytest.raises(ValueError, match='class 1 has 5 examples, expected exactly shots=7'):
    fs.check_shots(labels, 3, 7)
  features = np.zeros((len(labels), 2))
  with pytest.raises(ValueError, match='expected exactly shots=5'):
    fs.solve_fewshot(features, labels, features, labels, 3, shots=5)
  with pytest.raises(ValueError, match=r'labels must lie in \[0, 2\)'):
    fs.check_shots(labels, 2, 5)


def test_stratified_folds_spread_every_class():
  labels = np.repeat(np.arange(4), 10)
  folds = fs.stratified_folds(labels, 5, seed=0)
  for c in range(4):
    np.testing.assert_array_equal(np.bincount(folds[labels == c], minlength=5), [2] * 5)
  with pytest.raises(ValueError, match='shots >= 2'):
    fs.cross_validation_accuracy(np.zeros((4, 2)), np.arange(4), 4, shots=1)


def test_cv_choice_never_reads_test_labels(digits):
  pool_x, pool_y, test_x, test_y = digits
  idx = shot_sampling.sample_shots(pool_y, 10, 10, seed=0)
  train_x, train_y = pool_x[idx], pool_y[idx]
  path = fs.fit_ridge_path(train_x, train_y, 10)
  # Adversarial test labels: the predictions of the largest l2, which becomes the best on test.
  rigged_y = np.argmax(path.design(test_x) @ path.weights(fs.L2_GRID[-1]), axis=1)
  honest = fs.solve_fewshot(train_x, train_y, test_x, test_y, 10, 10)
  rigged = fs.solve_fewshot(train_x, train_y, test_x, rigged_y, 10, 10)
  # The test labels move the best-l2 choice to the rigged l2 ...
  assert fs.argmax_prefer_larger(rigged.test_accuracy) == len(fs.L2_GRID) - 1
  assert rigged.test_accuracy[-1] == 1.0
  assert fs.argmax_prefer_larger(honest.test_accuracy) < len(fs.L2_GRID) - 1
  # ... but not the CV choice, which equals the CV computed from the training set alone.
  alone = fs.argmax_prefer_larger(fs.cross_validation_accuracy(train_x, train_y, 10, 10))
  assert honest.cv_index == rigged.cv_index == alone
  assert honest.cv_accuracy == honest.test_accuracy[alone]


def test_aggregate_over_seeds_hand_worked():
  grid = (1.0, 2.0, 4.0)
  draws = [fs.FewShotResult(np.array([0.5, 0.8, 0.6]), cv_index=2),
           fs.FewShotResult(np.array([0.7, 0.6, 0.6]), cv_index=0)]
  cell = fs.aggregate(draws, grid)
  # Mean over seeds per l2: [0.6, 0.7, 0.6] -> l2 = 2; its accuracies 0.8, 0.6: mean 0.7,
  # sample std sqrt(((0.1)^2 + (0.1)^2) / 1) = 0.141421.
  assert cell.best_l2 == 2.0
  assert cell.best.mean == pytest.approx(0.7) and cell.best.std == pytest.approx(0.141421, 1e-5)
  # CV: seed 0 at l2 = 4 (0.6), seed 1 at l2 = 1 (0.7): mean 0.65, std 0.070711.
  assert cell.cv.mean == pytest.approx(0.65) and cell.cv.std == pytest.approx(0.070711, 1e-5)
  assert cell.cv_l2 == (4.0, 1.0) and cell.best.n == cell.cv.n == 2


def batches_of(images, labels, batch_size=64):
  """Padded dict batches as the data layer makes them: the last one padded with mask 0."""
  n = len(labels)
  size = -(-n // batch_size) * batch_size
  take = np.concatenate([np.arange(n), np.zeros(size - n, np.int64)])
  mask = (np.arange(size) < n).astype(np.float32)
  for s in range(0, size, batch_size):
    rows = take[s:s + batch_size]
    yield {'image': images[rows].reshape(-1, 8, 8), 'label': labels[rows],
           'mask': mask[s:s + batch_size]}


def evaluate_arrays(pool_features, pool_labels, test_features, test_labels, *, shots, seeds):
  """{shots: Aggregate} of the FewShotEvaluator on one data set whose batches are these arrays:
  for each shot count and seed, the shots drawn from the pool (shot_sampling.sample_shots)."""
  num_classes = int(max(np.max(pool_labels), np.max(test_labels))) + 1

  def one_batch(features, labels):
    return [{'image': features, 'label': labels, 'mask': np.ones(len(labels))}]

  def train_batches(k, seed):
    idx = shot_sampling.sample_shots(pool_labels, num_classes, k, seed)
    return one_batch(pool_features[idx], pool_labels[idx])

  data = fs.FewShotData(train_batches, lambda: one_batch(test_features, test_labels))
  evaluator = fs.FewShotEvaluator({'arrays': data}, shots=shots, seeds=seeds)
  return {k: cell for _, k, cell in evaluator.cells(lambda features: features)}


def test_evaluator_end_to_end_on_digits_pixels(digits):
  pool_x, pool_y, test_x, test_y = digits
  calls = {'test': 0, 'features': 0}

  def train_batches(shots, seed):
    idx = shot_sampling.sample_shots(pool_y, 10, shots, seed)
    return batches_of(pool_x[idx], pool_y[idx])

  def test_batches():
    calls['test'] += 1
    return batches_of(test_x, test_y)

  def feature_fn(images):      # Raw pixels: (B, 8, 8) -> (B, 64).
    calls['features'] += 1
    return images.reshape(len(images), -1)

  evaluator = fs.FewShotEvaluator({'digits': fs.FewShotData(train_batches, test_batches)},
                                  shots=(1, 10), seeds=2)
  metrics = dict(evaluator.run(feature_fn))
  assert set(metrics) == {'fewshot/digits/1shot', 'fewshot/digits/1shot_std',
                          'fewshot/digits/10shot', 'fewshot/digits/10shot_std',
                          'fewshot/digits/10shot_cv', 'fewshot/digits/10shot_cv_std'}
  # Test features once per run: 13 test batches (797 / 64); train: 1 batch (10 images) per 1-shot
  # seed and 2 batches (100 images) per 10-shot seed.
  assert calls['test'] == 1
  assert calls['features'] == 13 + 2 * 1 + 2 * 2
  # The evaluator agrees with the array API on the same draws. Measured: 10-shot 0.868 (best l2)
  # and 0.860 (CV) over seeds 0, 1; chance is 0.1.
  reference = evaluate_arrays(pool_x, pool_y, test_x, test_y, shots=(10,), seeds=2)[10]
  assert metrics['fewshot/digits/10shot'] == pytest.approx(reference.best.mean, abs=1e-12)
  assert metrics['fewshot/digits/10shot_cv'] == pytest.approx(reference.cv.mean, abs=1e-12)
  assert metrics['fewshot/digits/10shot'] > 0.8
  assert metrics['fewshot/digits/10shot_cv'] > 0.8
  assert metrics['fewshot/digits/10shot'] >= metrics['fewshot/digits/10shot_cv'] - 0.02
  assert metrics['fewshot/digits/1shot'] > 0.4
  assert fs.summary_table(metrics, 'cv') == {'digits': {'10': metrics['fewshot/digits/10shot_cv']}}
  assert fs.summary_table(metrics, 'best_l2') == {
      'digits': {'1': metrics['fewshot/digits/1shot'], '10': metrics['fewshot/digits/10shot']}}


def test_evaluator_rejects_train_batches_with_the_wrong_shot_count(digits):
  pool_x, pool_y, test_x, test_y = digits

  def nine_per_class(shots, seed):
    idx = shot_sampling.sample_shots(pool_y, 10, shots - 1, seed)
    return batches_of(pool_x[idx], pool_y[idx])

  evaluator = fs.FewShotEvaluator(
      {'digits': fs.FewShotData(nine_per_class, lambda: batches_of(test_x, test_y))},
      shots=(10,), seeds=1)
  with pytest.raises(ValueError, match="'digits' .*class 0 has 9 examples, expected exactly"):
    dict(evaluator.run(lambda images: images.reshape(len(images), -1)))


def test_bad_names_fail_listing_the_valid_ones():
  with pytest.raises(ValueError, match='valid: best_l2, cv'):
    fs.metric_name('digits', 10, 'test_set')
  with pytest.raises(ValueError, match='valid: best_l2, cv'):
    fs.summary_table({}, 'oracle')
  with pytest.raises(ValueError, match='strictly increasing'):
    fs.FewShotEvaluator({'d': None}, l2_grid=(1.0, 0.5))


def test_the_config_section_defaults_are_the_evaluators():
  config = fs.FewShotConfig({'digits': ['train', 'test']}, 'decode', batch_size=8, every_steps=1)
  assert config.l2_grid == fs.L2_GRID and config.shots == fs.SHOTS == (10,)
  assert config.seeds == fs.SEEDS == 3 and config.datasets == {'digits': ('train', 'test')}
  assert config.manual_dirs == {'digits': None}
  with pytest.raises(ValueError, match=r'fewshot.seeds=1 and every fewshot.shots=\(0,\)'):
    fs.FewShotConfig({}, 'decode', batch_size=8, every_steps=1, shots=(0,), seeds=1)
