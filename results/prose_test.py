"""Templates render only computed quantities, a typed number is caught, and drift names the
sentence whose number moved."""
import pytest

from results import prose

BEGIN, END = prose.GENERATED_BEGIN, prose.GENERATED_END


def test_render_fills_names_and_refuses_an_unknown_one():
  assert prose.render('mean {dense_up} at c = 1', {'dense_up': '87.32'}) == 'mean 87.32 at c = 1'
  with pytest.raises(prose.TemplateError, match='nobody computed: shown_up'):
    prose.render('{shown_up}', {})


def test_a_typed_number_in_a_generated_section_is_caught():
  clean = (f'{BEGIN}\nThe dense ViT has {{dense_up}} at c = 1 and k = 2 (claim 0; 10-shot;\n'
           f'`python -m x --seeds 5`; [a](fig1.png); seed 0; DeepSeek-V3).\n{END}\n'
           'Outside a generated section 3,000 steps may be typed.')
  assert prose.literal_numbers(clean) == []
  for typed in ('from 0.26 points', 'in three cells', 'twice the spread'):
    found = prose.literal_numbers(f'{BEGIN}\nshown {typed} here\n{END}')
    assert len(found) == 1 and typed.split()[1] in found[0]


def test_drift_names_the_sentence_whose_number_moved():
  old = 'The dense ViT has 87.32. Soft MoE trails it.\n\n| a | 1 |\n| b | 2 |\n'
  new = 'The dense ViT has 87.40. Soft MoE trails it.\n\n| a | 1 |\n| b | 3 |\n'
  assert prose.drift(old, new) == ['The dense ViT has 87.32.', '| b | 2 |']
  assert prose.drift(old, old) == []


def test_count_and_comparative_words():
  assert prose.count_words(2, 6) == 'two of six'
  assert prose.count_words(22, 22) == 'all 22'
  assert prose.count_words(0, 10) == 'none of the ten'
  assert prose.count_words(2, 2) == 'both'
  assert prose.count_words(4) == 'four'
  assert prose.larger(0.0857, 0.0860) == 'smaller'
