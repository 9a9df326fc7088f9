"""Budget sharing on an island (atoll.engine.sharing): a worker that spent its share takes part
of a partner's, shares change hands and are never copied, and a worker that stopped is asked no
more. The exchange runs over the in-memory mailbox here, each side polled in turn; a real job's
(mpirun) is in test_island_sharing.py."""

from __future__ import annotations

from collections.abc import Callable

from atoll.engine.island import Budget
from atoll.engine.memory import MemoryPost
from atoll.engine.protocol import COUNTED, Tag
from atoll.engine.sharing import Sharing


def workers(count: int) -> tuple[MemoryPost, list[Sharing]]:
    """``count`` sharings on one island; each one's take_in polls its own inbox."""
    post = MemoryPost(count)
    made: list[Sharing] = []
    for me in range(count):
        box = post.mailbox(me)

        def take_in(box=box, me=me) -> int:
            return box.poll(lambda tag, source, payload: made[me].hear(tag, source, payload)
                            if tag in COUNTED else None)

        made.append(Sharing([w for w in range(count) if w != me], box.send_count, take_in))
    return post, made


def answering(asker: Sharing, others: list[Sharing]) -> Callable[[], int]:
    """The asker's take_in, with every other worker taking in (between its evaluations) first,
    as partners running beside it would."""
    own = asker.take_in

    def take_in() -> int:
        for other in others:
            other.take_in()
        return own()
    return take_in


def test_a_spent_worker_takes_half_of_what_a_busy_partner_has_not_begun():
    _, (idle, busy) = workers(2)
    idle.begin(Budget(3))
    busy.begin(Budget(3 + 8))
    idle.done, busy.done, busy.evaluating = 3, 2, True  # busy: 8 left, one of them begun
    idle.take_in = answering(idle, [busy])
    assert idle.go_on()
    assert idle.budget.evaluations == 3 + 4 and busy.budget.evaluations == 11 - 4
    assert idle.budget.evaluations + busy.budget.evaluations == 3 + 11  # moved, not copied


def test_a_partner_with_one_left_gives_it_and_one_with_none_gives_nothing():
    _, (idle, last, spent) = workers(3)
    idle.begin(Budget(2))
    last.begin(Budget(5))
    spent.begin(Budget(4))
    idle.done, last.done, spent.done = 2, 4, 4
    idle.take_in = answering(idle, [last, spent])
    assert idle.go_on()
    assert (idle.budget.evaluations, last.budget.evaluations, spent.budget.evaluations) \
        == (3, 4, 4)


def test_a_worker_stops_when_no_partner_has_any_to_spare_and_is_asked_no_more():
    post, (first, second) = workers(2)
    first.begin(Budget(2))
    second.begin(Budget(2))
    first.done = second.done = 2
    first.take_in = answering(first, [second])
    assert not first.go_on()
    first.end()
    assert first.budget is None
    second.take_in()  # hears first's OUT
    assert not second.go_on()  # asks nobody: it would wait for an answer that never comes
    assert post.inboxes[0] == []


def test_an_ask_that_waits_ends_when_the_job_is_asked_to_stop():
    _, (idle, busy) = workers(2)
    asked = iter([False, False, True])
    idle.begin(Budget(1, lambda: next(asked)))
    busy.begin(Budget(10))
    idle.done = 1  # busy never takes in: it is in a long evaluation
    assert not idle.go_on()


def test_an_ask_that_crosses_a_partners_out_ends_at_the_out():
    post, (first, second) = workers(2)
    first.begin(Budget(1))
    second.begin(Budget(4))
    first.done = second.done = 1
    second.end()  # stopped (by its wall time), before first heard of it
    first.take_in = answering(first, [second])  # second, draining, takes in too
    assert not first.go_on()
    assert post.inboxes == [[], []]  # second did not answer: first heard its OUT


def test_a_worker_keeps_the_share_its_waiting_continuations_need():
    _, (idle, busy) = workers(2)
    busy.kept = lambda: 5  # five interrupted evaluations a resume handed it
    idle.begin(Budget(1))
    busy.begin(Budget(8))
    idle.done = 1
    idle.take_in = answering(idle, [busy])
    assert idle.go_on()
    assert (idle.budget.evaluations, busy.budget.evaluations) == (1 + 2, 8 - 2)  # 3 spare


def test_a_gift_that_arrives_with_an_ask_is_not_passed_on_whole():
    post, (waiting, giver, _) = workers(3)
    stops = iter([False, False, True])  # a stop ends the wait if the gift was passed on
    waiting.begin(Budget(1, lambda: next(stops)))
    giver.begin(Budget(3))
    waiting.done, giver.done = 1, 2  # the giver has one it has not begun
    own = waiting.take_in
    answered = []

    def take_in() -> int:
        if post.inboxes[1] and not answered:  # the giver has been asked
            answered.append(giver.take_in())  # it answers: one evaluation
            post.mailbox(2).send_count(Tag.ASK_SHARE, 0, [0])  # a spent partner asks meanwhile
        return own()

    waiting.take_in = take_in
    assert waiting.go_on()
    assert waiting.budget.evaluations == 2 and giver.budget.evaluations == 2
    assert (Tag.SHARE, 0, 0) in post.inboxes[2]  # the asker got nothing of the gift


def test_a_stop_that_comes_with_a_gift_begins_nothing():
    _, (idle, busy) = workers(2)
    asked = iter([False, True])
    idle.begin(Budget(1, lambda: next(asked)))
    busy.begin(Budget(10))
    idle.done = 1
    idle.take_in = answering(idle, [busy])
    assert not idle.go_on()


def test_asks_that_came_during_an_evaluation_are_answered_before_the_next_is_reserved():
    post, (slow, _) = workers(2)
    asked = iter([False, True])
    slow.begin(Budget(2, lambda: next(asked)))
    slow.done = 1  # one left, not begun
    post.mailbox(1).send_count(Tag.ASK_SHARE, 0, [0])  # the other asked while slow evaluated
    assert not slow.go_on()  # it gave its last one away (then found none to take: a stop)
    assert slow.budget.evaluations == 1 and (Tag.SHARE, 0, 1) in post.inboxes[1]


def test_a_job_whose_block_of_ids_would_pass_int64_is_refused():
    import tomllib

    import pytest

    from atoll.config import parse_config
    from atoll.engine.topology import Layout
    from atoll.errors import ConfigError
    from atoll.job.plan import JobPlan, id_block

    with open("tests/configs/asha_demo.toml", "rb") as file:
        config = parse_config(tomllib.load(file))  # asha: 1000 new ids per evaluation
    budget = 10**12
    one_island = JobPlan(config, Layout(10_000, 1, 1), budget, resumed=False)
    with pytest.raises(ConfigError, match="would pass the largest id"):
        id_block(one_island)
    islands = JobPlan(config, Layout(10_000, 1, 10_000), budget, resumed=False)
    assert id_block(islands) == [0, budget * 1000]  # each worker its own share


def test_a_worker_that_began_its_last_says_so_is_not_asked_and_keeps_its_word():
    """At a job's end every worker is on its last evaluation: without a word from them, one
    that finished first would ask each and wait for its "nothing" until its evaluation ended,
    with every answer waiting for a poll of a crowded rank."""
    post, (early, late, other) = workers(3)
    for sharing in (early, late, other):
        sharing.begin(Budget(2))
    late.done = other.done = 1
    late.begin_step()  # its last: none left to give
    assert (Tag.SPENT, 1, 0) in post.inboxes[0] and (Tag.SPENT, 1, 0) in post.inboxes[2]
    late.begin_step()  # said once
    assert sum(m[0] == Tag.SPENT for m in post.inboxes[0]) == 1
    other.begin_step()
    early.done = 2
    assert not early.go_on()  # both said so: it asks nobody and waits for nobody
    assert not any(m[0] == Tag.ASK_SHARE for box in post.inboxes for m in box)
    post.mailbox(2).send_count(Tag.ASK_SHARE, 0, [1])
    late.take_in()
    assert (Tag.SHARE, 1, 0) in post.inboxes[2]  # its word holds: nothing
    # Done, it is given 3 and begins one at once: 2 to spare, and it says so, and gives again.
    late.done, late.evaluating = 2, True
    post.mailbox(2).send_count(Tag.SHARE, 3, [1])
    late.take_in()
    assert (Tag.SPARE, 1, 0) in post.inboxes[0] and (Tag.SPARE, 1, 0) in post.inboxes[2]
    post.mailbox(0).send_count(Tag.ASK_SHARE, 0, [1])
    late.take_in()
    assert (Tag.SHARE, 1, 1) in post.inboxes[0] and late.budget.evaluations == 5 - 1


def test_a_continued_evaluation_is_not_counted_twice_when_a_worker_says_it_is_spent():
    """A resumed worker keeps a unit for each interrupted evaluation it continues; the step
    that continues one is one of those, so with a share of 2 and one kept it has 1 to spare."""
    post = MemoryPost(2)
    kept = Sharing([1], post.mailbox(0).send_count, lambda: 0, kept=lambda: 1)
    kept.begin(Budget(2))
    kept.begin_step()
    assert not post.inboxes[1]  # no SPENT: the other unit is still to give


def test_an_ask_crossing_a_word_of_spent_is_still_waited_for_and_its_gift_arrives():
    """The partner says it is spent while our ask is on its way, then is given 3 and takes
    its word back, then reads our ask and gives 1. Had the word ended our wait, we would have
    stopped, and that share would have reached a worker that stopped: lost from the budget."""
    post, (asker, partner, _) = workers(3)
    asker.begin(Budget(1))
    partner.begin(Budget(1))
    asker.done = 1
    post.mailbox(2).send_count(Tag.OUT, 0, [0])  # the third stopped: only the partner is asked
    post.mailbox(2).send_count(Tag.SHARE, 3, [1])  # the partner's gift, read before our ask
    calls: list[int] = []
    own = asker.take_in

    def take_in() -> int:
        calls.append(1)
        if len(calls) == 2:  # our ask is on its way: the partner begins its last, says so
            partner.begin_step()
            partner.done = 1  # and, done, waits for a share itself
        elif len(calls) == 3:  # it reads the gift (takes its word back), then our ask
            partner.take_in()
        return own()
    asker.take_in = take_in
    assert asker.go_on()
    assert asker.budget.evaluations == 2 and partner.budget.evaluations == 1 + 3 - 1
    assert (Tag.SPARE, 1, 0) in post.inboxes[2]  # said to the others too
