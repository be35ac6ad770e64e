"""``hsdiff.align.token_ids`` on the token ids of the real SmolLM2 samples: where an inference capture's
tokens sit in a training sample, and the chat-template prefix different prompts share."""

from __future__ import annotations

from hsdiff.align.token_ids import MIN_PREFIX, id_offsets, shared_prefix

from . import builders as B


def ids(i: int) -> list[int]:
    return B.states(i)["input_ids"].tolist()


def test_the_same_prompt_sits_at_offset_zero() -> None:
    assert id_offsets(ids(0), ids(0)) == [0]


def test_a_prompt_that_skipped_its_first_token_sits_one_token_in() -> None:
    assert id_offsets(ids(0)[1:], ids(0)) == [1]


def test_a_prefill_followed_by_generated_tokens_covers_the_whole_training_sample() -> None:
    longer = ids(0) + [42, 43]
    assert id_offsets(longer, ids(0)) == [0]
    assert id_offsets(ids(0), longer) == [0]


def test_a_few_tokens_from_the_middle_are_found_where_they_occur() -> None:
    t = ids(0)
    assert id_offsets(t[11:15], t) == [11]
    # a token the chat template repeats: every place it occurs is an offset, none is chosen
    nl = t[2]
    assert id_offsets([nl], t) == [i for i, v in enumerate(t) if v == nl] and len(id_offsets([nl], t)) > 1


def test_another_prompt_and_empty_sequences_sit_nowhere() -> None:
    assert ids(0) != ids(1) and id_offsets(ids(1), ids(0)) == []
    assert id_offsets([], ids(0)) == [] and id_offsets(ids(0), []) == []


def test_different_prompts_share_the_chat_template_prefix() -> None:
    a, b = ids(1), ids(0)
    n = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    assert n >= MIN_PREFIX and shared_prefix(a, b) == (0, n)
    # the same prompt twice in one training sequence: the run nearest the start
    assert shared_prefix(a, b + b) == (0, n)


def test_a_prefix_found_further_in_and_one_too_short_to_count() -> None:
    a, b = ids(1), ids(0)
    # the second turn's template ([1, 4093, 198] at token 8) also starts training token 8
    assert shared_prefix(a[8:], b) == (8, 3)
    assert shared_prefix(a[: MIN_PREFIX - 1], b) is None
    assert shared_prefix([], b) is None
    assert shared_prefix([b[-1] + 1], b) is None
