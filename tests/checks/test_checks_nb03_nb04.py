"""The exercise checks added to notebooks 03 and 04: right answers in several forms, wrong values (a hint
that does not give the answer away), wrong forms (which form to give), and ``...`` (not answered yet)."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from gputrain_kit import check


@pytest.mark.parametrize("answer", [28, 28.0, "28", " 28 ", np.int64(28), np.float32(28), np.array(28),
                                    "28 micro-batches", "28 microbatches", "at least 28", "M = 28", "m=28"])
def test_nb03_microbatches_right_in_any_form(answer):
    assert check.nb03_microbatches(answer)


@pytest.mark.parametrize("answer", [27, 29, 32, 1, "at least 27", "M = 29"])
def test_nb03_microbatches_wrong_value_hints_without_the_answer(answer):
    result = check.nb03_microbatches(answer)
    assert not result and repr(result).startswith("Not yet.") and "28" not in repr(result)


@pytest.mark.parametrize("answer", [[28], "many", 27.5, None, True, "at most 28", "not 28"])
def test_nb03_microbatches_wrong_form_says_which_form(answer):
    result = check.nb03_microbatches(answer)
    assert not result and "Not a form this check reads" in repr(result) and "whole number" in repr(result)


@pytest.mark.parametrize("answer", ["28 or more", "M >= 28", ">= 28", "m>=28", "M ≥ 28", ">= 28 micro-batches",
                                    "28 micro-batches or more", "more than 27", "M > 27", "> 27", "greater than 27"])
def test_nb03_microbatches_reads_a_lower_bound_as_the_fewest_it_allows(answer):
    """The question asks for the fewest M: '>= N' and 'N or more' name N, '> N - 1' and 'more than N - 1' name N."""
    assert check.nb03_microbatches(answer)


@pytest.mark.parametrize("answer", [">= 27", "M >= 29", "more than 28", "M > 26", "27 or more", "29 or more"])
def test_nb03_microbatches_a_wrong_lower_bound_is_wrong(answer):
    result = check.nb03_microbatches(answer)
    assert not result and repr(result).startswith("Not yet.") and "28" not in repr(result)


@pytest.mark.parametrize("answer", ["< 29", "fewer than 29", "M <= 28", "M > 27.5", "28 or less", "more than 27 or 28"])
def test_nb03_microbatches_an_upper_bound_or_a_fraction_is_no_form_it_reads(answer):
    result = check.nb03_microbatches(answer)
    assert not result and "Not a form this check reads" in repr(result) and "whole number" in repr(result)


def test_nb03_microbatches_agrees_with_the_bubble_formula():
    from gputrain_kit.pipeline import bubble_fraction

    assert bubble_fraction(4, 28) < 0.1 <= round(bubble_fraction(4, 27), 12)
    assert "Not answered yet" in repr(check.nb03_microbatches(...))


@pytest.mark.parametrize("answer", [8.59, "8.59", np.float64(8.591), 8.6, "8.6", Fraction(859, 100), "8.59 GB",
                                    "8 GiB", "8.59e9 bytes", "8590MB"])
def test_nb03_split_state_gb_right_in_any_form(answer):
    assert check.nb03_split_state_gb(answer)


@pytest.mark.parametrize("answer", [25.8, 12.9, 6.44, 12900])   # 8591 is 8.59 GB in MB: a unit slip
def test_nb03_split_state_gb_wrong_value_hints_without_the_answer(answer):
    result = check.nb03_split_state_gb(answer)
    assert not result and repr(result).startswith("Not yet.") and "8.5" not in repr(result) and "8.6" not in repr(result)


@pytest.mark.parametrize("answer", ["about six", [6.44], None])
def test_nb03_split_state_gb_wrong_form_and_unanswered(answer):
    result = check.nb03_split_state_gb(answer)
    assert not result and "Not a form this check reads" in repr(result) and "gigabytes" in repr(result)
    assert "Not answered yet" in repr(check.nb03_split_state_gb(...))


def test_nb03_split_state_gb_names_a_unit_slip():
    for slip, unit in ((8.59e9, "bytes"), (8.0, "GiB")):
        result = check.nb03_split_state_gb(slip)
        assert not result and f"right amount in {unit}" in repr(result) and "asks for GB" in repr(result)


def test_nb03_split_state_gb_is_a_third_of_the_whole_state():
    from gputrain_kit.memory import estimate_memory, preset_profile

    whole = estimate_memory(preset_profile("dense_stack"), batch_size=32).per_device[0]
    state = (whole["parameters"] + whole["gradients"] + whole["optimizer"]) / 1e9
    assert check.nb03_split_state_gb(state / 3) and not check.nb03_split_state_gb(state)
    assert not check.nb03_split_state_gb(state / 4), "the 4-way split is printed in the notebook: not the question"


@pytest.mark.parametrize("answer", [[7, 8, 9, 10], (7, 8, 9, 10), np.arange(7, 11), "[7, 8, 9, 10]", "7, 8, 9, 10"])
def test_nb04_resumed_epochs_right_in_any_form(answer):
    assert check.nb04_resumed_epochs(answer)


@pytest.mark.parametrize("answer", [[8, 9, 10], [6, 7, 8, 9, 10], list(range(1, 11)), [7]])
def test_nb04_resumed_epochs_wrong_value_hints_without_the_answer(answer):
    result = check.nb04_resumed_epochs(answer)
    assert not result and repr(result).startswith("Not yet.") and "7, 8" not in repr(result)


@pytest.mark.parametrize("answer", [7, "seven on", None, "10-7", "10 to 7", "4", "4 epochs"])   # a range written
# downwards: a form; one number (a count of epochs, or one epoch) too
def test_nb04_resumed_epochs_wrong_form_and_unanswered(answer):
    result = check.nb04_resumed_epochs(answer)
    assert not result and "Not a form this check reads" in repr(result) and "list" in repr(result)
    assert "Not answered yet" in repr(check.nb04_resumed_epochs(...))


@pytest.mark.parametrize("answer", ["layers/dense_2", "dense_2", " 'layers/dense_2' ", "/layers/dense_2/",
                                    "layers/dense_2/vars", "layers/dense_2/vars/"])
def test_nb04_weight_group_right_in_any_form(answer):
    assert check.nb04_weight_group(answer)


@pytest.mark.parametrize("answer", ["layers/dense_2/vars/0", "dense_2/vars/1", "/layers/dense_2/vars/0/"])
def test_nb04_weight_group_a_dataset_inside_the_right_group_asks_for_the_group(answer):
    """Issue 44: the kernel's dataset is no miscount: the hint says it is inside the right group."""
    said = repr(check.nb04_weight_group(answer))
    assert said.startswith("Not yet.") and "is a dataset inside the right group" in said
    assert "asks for the group itself" in said and "Count only the layers" not in said


@pytest.mark.parametrize("answer", ["layers/dense_2/vars/kernel", "layers/dense_2/kernel", "dense_2/vars/bias"])
def test_nb04_weight_group_a_variable_by_name_points_inside_the_right_group(answer):
    """Eleventh read: 'layers/dense_2/vars/kernel' got the miscount hint; the file numbers the variables."""
    said = repr(check.nb04_weight_group(answer))
    assert said.startswith("Not yet.") and "points inside the right group" in said and "vars/0 its kernel" in said
    assert "Count only the layers" not in said


@pytest.mark.parametrize("answer", ["Layers/Dense_2", "LAYERS/DENSE_2/", "layers/Dense_2", "Dense_2",
                                    "layers/dense_2/VARS"])
def test_nb04_weight_group_in_another_case_is_refused_with_a_hint_about_case(answer):
    """Issue 44: HDF5's keys are case-sensitive: h5py finds no 'Layers/Dense_2' in the file."""
    result = check.nb04_weight_group(answer)
    assert not result and repr(result).startswith("Not yet.") and "case-sensitive" in repr(result)
    assert "Count only the layers" not in repr(result)


def test_nb04_weight_groups_case_hint_is_what_h5py_does(tmp_path):
    """The case hint's premise, on a file Keras wrote: the group is 'layers/dense_2', and h5py finds no
    'Layers/Dense_2'."""
    import h5py
    import numpy as np

    with h5py.File(tmp_path / "f.h5", "w") as f:
        f.create_dataset("layers/dense_2/vars/0", data=np.zeros(2))
    with h5py.File(tmp_path / "f.h5", "r") as f:
        assert "layers/dense_2" in f and "Layers/Dense_2" not in f and "layers/Dense_2" not in f


@pytest.mark.parametrize("answer", ["layers/logits", "layers/dense_1", "layers/dense_3", "dense",
                                    "layers/dense_1/vars/0", "Layers/Dense_1"])
def test_nb04_weight_group_wrong_value_hints_without_the_answer(answer):
    result = check.nb04_weight_group(answer)
    assert not result and repr(result).startswith("Not yet.") and "dense_2" not in repr(result)


@pytest.mark.parametrize("answer", [2, ["layers/dense_2"], None])
def test_nb04_weight_group_wrong_form_and_unanswered(answer):
    result = check.nb04_weight_group(answer)
    assert not result and "Not a form this check reads" in repr(result) and "string" in repr(result)
    assert "Not answered yet" in repr(check.nb04_weight_group(...))


@pytest.mark.parametrize("answer", ["split", "Split", "model parallel", "model-parallelism", "layer split",
                                    "the split", "a split", "the 2-way split"])
def test_nb03_less_memory_reads_the_notebooks_own_names_for_a_split(answer):
    """The notebook's title says "Device (model) parallelism": a reader's 'model parallel' is a right answer."""
    assert check.nb03_less_memory(answer)
    assert not check.nb03_less_memory("data parallel") and not check.nb03_less_memory("data")


@pytest.mark.parametrize("answer", [27, 27.3, np.float64(27.27)])
def test_nb03_bubble_a_percentage_without_its_sign_is_a_form_to_correct(answer):
    result = check.nb03_bubble(answer)
    assert not result and "reads as a percentage" in repr(result)
    assert check.nb03_bubble(f"{float(answer):g}%")
    assert repr(check.nb03_bubble(50)).startswith("Not yet.")        # a wrong percentage stays wrong


def test_nb03_the_question_s_own_wording_is_an_answer():
    """Exercise 1 says "a 2-way 'split'": readers answered 'split x2' and '2-way split' and were told it was not
    a form; 'data x4' is read too, and is wrong."""
    assert check.nb03_less_memory("split x2") and check.nb03_less_memory("2-way split")
    wrong = check.nb03_less_memory("data x4")
    assert not wrong and repr(wrong).startswith("Not yet.")


@pytest.mark.parametrize("answer", ["the data", "the data parallel", "data parallel on 4 devices"])
def test_nb03_less_memory_refuses_data_with_an_article_too(answer):
    """'the split' reads (a reader's words); 'the data' must stay wrong, and negations stay refused."""
    result = check.nb03_less_memory(answer)
    assert not result and repr(result).startswith("Not yet.")
    for negated in ("not the split", "not data", "data, not split"):
        assert not check.nb03_less_memory(negated) and "negates" in repr(check.nb03_less_memory(negated))


@pytest.mark.parametrize("answer", ["epoch 7 to epoch 10", "Epoch 7 through epoch 10", "epoch 7 - epoch 10",
                                    "epochs 7 to 10", "7-10"])
def test_nb04_resumed_epochs_reads_a_range_with_the_word_before_each_end(answer):
    assert check.nb04_resumed_epochs(answer)


@pytest.mark.parametrize("answer", ["epoch 6 to epoch 10", "epoch 7 to epoch 9", "epoch 1 to epoch 10"])
def test_nb04_resumed_epochs_refuses_a_wrong_range_in_words(answer):
    result = check.nb04_resumed_epochs(answer)
    assert not result and repr(result).startswith("Not yet.")


@pytest.mark.parametrize("answer", ["reshuffle_each_iteration=False", "reshuffle_each_iteration = false",
                                    "reshuffle_each_iteration: False",
                                    "shuffle(1000, reshuffle_each_iteration=False)", False, "False"])
def test_nb04_reshuffle_reads_the_argument_as_code(answer):
    assert check.nb04_reshuffle(answer)


def test_nb04_reshuffle_refuses_true_as_code_and_unreadable_forms():
    result = check.nb04_reshuffle("reshuffle_each_iteration=True")
    assert not result and repr(result).startswith("Not yet.")
    assert "Not a form this check reads" in repr(check.nb04_reshuffle("reshuffle_each_iteration=maybe"))


@pytest.mark.parametrize("answer", ["template", "template, not wrapper", "the template, not the wrapper",
                                    "template not wrapper", "Template, but not the wrapper."])
def test_nb04_what_to_save_reads_the_choice_and_the_one_not_chosen(answer):
    assert check.nb04_what_to_save(answer)


@pytest.mark.parametrize("answer", ["wrapper", "wrapper, not template", "the wrapper, not the template"])
def test_nb04_what_to_save_refuses_the_wrapper_in_every_form(answer):
    result = check.nb04_what_to_save(answer)
    assert not result and repr(result).startswith("Not yet.")


@pytest.mark.parametrize("answer", ["not wrapper", "not template", "template, not template"])
def test_nb04_what_to_save_refuses_a_lone_negation(answer):
    result = check.nb04_what_to_save(answer)
    assert not result and "negates it" in repr(result)


@pytest.mark.parametrize("answer", [[10, 9, 8, 7], (8, 7, 10, 9), "10, 9, 8, 7", "[9, 10, 7, 8]"])
def test_nb04_resumed_epochs_right_in_another_order(answer):
    """The right epochs in another order were marked 'Not yet' with a hint about which epochs: the set is the
    answer, not its order."""
    assert check.nb04_resumed_epochs(answer)


@pytest.mark.parametrize("answer", [[7, 8, 9, 10, 10], [10, 10, 9, 8, 7], [7, 7, 8, 9, 10]])
def test_nb04_resumed_epochs_refuses_an_epoch_said_twice(answer):
    result = check.nb04_resumed_epochs(answer)
    assert not result and repr(result).startswith("Not yet.")


@pytest.mark.parametrize("answer", ["not the wrapper, the template", "not wrapper, template",
                                    "not the wrapper but the template", "Not the wrapper; the template."])
def test_nb04_what_to_save_reads_the_one_not_chosen_first(answer):
    """'not the wrapper, the template' was 'not a form this check reads' while 'the template, not the wrapper'
    was right."""
    assert check.nb04_what_to_save(answer)


@pytest.mark.parametrize("answer", ["not the template, the wrapper", "not template but wrapper"])
def test_nb04_what_to_save_refuses_the_wrapper_named_second(answer):
    result = check.nb04_what_to_save(answer)
    assert not result and repr(result).startswith("Not yet.")


def test_nb04_what_to_save_refuses_both_negated():
    result = check.nb04_what_to_save("not the wrapper, not the template")
    assert not result and "negates it" in repr(result)


@pytest.mark.parametrize("answer", ["split x4", "4-way split", "split on 4 devices", "data x2", "data on 2 devices"])
def test_nb03_less_memory_refuses_a_count_the_question_does_not_compare(answer):
    """The question compares data parallelism on 4 devices with a 2-way split: 'split x4' is not its split."""
    result = check.nb03_less_memory(answer)
    assert not result and "Not a form this check reads" in repr(result), result
    assert "data parallelism on 4 devices with a 2-way split" in repr(result)
    assert check.nb03_less_memory("split x2") and check.nb03_less_memory("split on 2 devices")


def test_nb03_split_state_gb_names_megabytes_as_a_unit_slip():
    """8590 (the right amount in MB) gets a unit hint, as 8.0 (GiB) and 8.59e9 (bytes) do, not a bare 'Not yet'."""
    for slip, unit in ((8590, "MB"), (8.0, "GiB"), (8.59e9, "bytes")):
        result = check.nb03_split_state_gb(slip)
        assert not result and repr(result).startswith("Check the unit") and f"right amount in {unit}" in repr(result)
    assert check.nb03_split_state_gb("8590 MB")
    assert repr(check.nb03_split_state_gb(12900)).startswith("Not yet.")        # a wrong amount in MB stays wrong


def test_nb03_less_memory_reads_a_count_in_brackets_and_asks_for_the_strategy_only_over_an_amount():
    """Twelfth read: 'split (2 devices)' was refused as a form it could not read, and 'split, 12.9 GB' with the
    generic form message."""
    for right in ("split (2 devices)", "split, 2 devices", "split [2]"):
        assert check.nb03_less_memory(right), right
    for wrong in ("data (4 devices)", "split (4 devices)"):
        assert not check.nb03_less_memory(wrong), wrong
    assert "got 'split (4 devices)'" in repr(check.nb03_less_memory("split (4 devices)"))   # quoted as given
    amount = check.nb03_less_memory("split, 12.9 GB")
    assert not amount and "Give the strategy only" in repr(amount)
