"""Budget sharing on an island: a worker that has spent its share takes part of a partner's.

A job splits its budget evenly over the workers, but evaluations do not take equal time: the
median rule stops some early, ``asha`` pauses some and has others promoted, candidates differ in
size. Without sharing, a worker that has spent its share would sit idle until the job's slowest
worker is done, on a GPU the allocation pays for. So it asks its island partners instead; each
gives half of what it has not yet begun (rounded up), and a worker stops only when every partner
it asked gave nothing. Shares change hands and are never copied, so the job still completes its
budget exactly. A worker that stops says so, and is asked no more: after that it only drains.
A worker that has begun the last of its share (or asks) says it gives no more, and keeps its
word until a gift leaves it some to spare (it says that too): it is not asked meanwhile, so at
a job's end nobody asks a partner on its last evaluation and waits for its "nothing".

Partners answer at each report of their running evaluation (``ctx.report``, also
``ctx.stop_requested``) and between evaluations, so an ask waits about an epoch (an evaluation,
where an objective calls neither); the asker goes on as soon as one gives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from atoll.backoff import Backoff
from atoll.engine.protocol import Tag

if TYPE_CHECKING:
    from atoll.engine.island import Budget


class Sharing:
    """One worker leader's side of the exchange. ``send(tag, count, to)`` sends a count
    message; ``take_in()`` handles whatever arrived (these messages through :meth:`hear`) and
    returns how many; ``kept()`` is how many of the share this worker keeps whoever asks: the
    interrupted evaluations a resume handed it, which no partner knows of."""

    def __init__(self, peers: Sequence[int], send: Callable[[Tag, int, Sequence[int]], None],
                 take_in: Callable[[], int], kept: Callable[[], int] = lambda: 0) -> None:
        self.peers = tuple(peers)
        self.send = send
        self.take_in = take_in
        self.kept = kept
        self.budget: Budget | None = None  # None: not searching (not begun, or out)
        self.done = 0  # evaluations of the budget this worker completed
        self.evaluating = False  # a step has begun: it will need one of the share
        self._asked: set[int] = set()  # partners whose answer has not arrived
        self._out: set[int] = set()  # partners that stopped
        self._spent: set[int] = set()  # partners that said they give no more (or asked)
        self._said_spent = False  # this worker said so: it gives nothing from then on

    def begin(self, budget: Budget) -> None:
        self.budget, self.done = budget, 0

    def go_on(self) -> bool:
        """Whether to begin another evaluation: some of the share is left, or a partner gave
        some; False once the job is asked to stop. What arrived meanwhile is taken in first
        (the loop's one poll per step), so asks that came during the evaluation just ended
        are answered while none of the share is reserved for the next one."""
        budget = self.budget
        assert budget is not None, "begin() first"
        self.take_in()
        if self.done < budget.evaluations:
            return not budget.stop_requested()
        return self._given_more(budget)

    def begin_step(self) -> None:
        """A step begins: one of the share is its own from here on. Once that leaves none to
        give, the partners are told, and it gives nothing until a gift leaves it more than
        it begins at once (then they are told that): at a job's end each worker would
        otherwise ask every partner still evaluating its last and wait for its "nothing",
        with every answer waiting for a poll of a crowded rank."""
        self.evaluating = True
        assert self.budget is not None
        # A continued evaluation is one of those kept for the interrupted: not counted twice.
        spare = self.budget.evaluations - self.done - max(1, self.kept())
        if not self._said_spent and spare <= 0:
            self._said_spent = True
            self._tell(Tag.SPENT)

    def _tell(self, tag: Tag) -> None:
        still = [p for p in self.peers if p not in self._out]
        if still:
            self.send(tag, 0, still)

    def _given_more(self, budget: Budget) -> bool:
        fresh = [p for p in self.peers
                 if p not in self._out and p not in self._asked and p not in self._spent]
        if (fresh or self._asked) and budget.stop_requested():
            return False
        if fresh:
            self._said_spent = True  # an ask says so too: this worker gives no more
            self.send(Tag.ASK_SHARE, 0, fresh)
            self._asked.update(fresh)
        backoff = Backoff()
        self.evaluating = True  # what a partner gives is begun at once: never passed on whole
        try:
            while budget.evaluations <= self.done and self._asked:
                if self.take_in():
                    backoff.reset()
                elif budget.stop_requested():
                    return False
                else:
                    backoff.wait()
        finally:
            self.evaluating = False
        return budget.evaluations > self.done and not budget.stop_requested()

    def end(self) -> None:
        """This worker stops: partners ask it no more (sent before the drain counts messages)."""
        self.budget = None
        still = [p for p in self.peers if p not in self._out]
        if still:
            self.send(Tag.OUT, 0, still)

    def hear(self, tag: Tag, source: int, count: int) -> None:
        if tag == Tag.ASK_SHARE:
            self._answer(source)
            self._heard_spent(source)  # an ask says so too
        elif tag == Tag.SHARE:
            self._asked.discard(source)
            if self.budget is not None:  # else: given after a stop, which leaves it unspent
                self.budget.evaluations += count
                if count and self._said_spent and self._spare() > 0:
                    self._said_spent = False  # more than it begins at once: it gives again
                    self._tell(Tag.SPARE)
        elif tag == Tag.OUT:
            self._out.add(source)
            self._asked.discard(source)
        elif tag == Tag.SPENT:
            self._heard_spent(source)
        elif tag == Tag.SPARE:
            self._spent.discard(source)

    def _heard_spent(self, source: int) -> None:
        """``source`` gives no more: it is asked no more. An ask of ours it has not answered
        yet is still waited for: a gift may make it take its word back (SPARE) before it
        answers, and a share given to a worker that has stopped would be lost."""
        self._spent.add(source)

    def _spare(self) -> int:
        """What of this worker's share no evaluation has begun and none is kept for."""
        assert self.budget is not None
        return self.budget.evaluations - self.done - self.evaluating - self.kept()

    def _answer(self, source: int) -> None:
        if self.budget is None:  # out: the asker hears OUT instead
            return
        spare = 0 if self._said_spent else self._spare()  # its word holds
        given = (spare + 1) // 2 if spare > 0 else 0
        self.budget.evaluations -= given
        self.send(Tag.SHARE, given, [source])
