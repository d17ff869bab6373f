"""When and how the client retries, decided by the errors' flags and never by their names.

* A non-retriable error raises at once, naming its partition.
* A retriable error is retried after a backoff: exponential from ``retry_backoff_ms`` (100 ms)
  to ``retry_backoff_max_ms`` (1 s) with +-20% jitter, Kafka's defaults and formula
  (``ExponentialBackoff``), never sleeping past the call's deadline.
* An ``invalid_metadata`` error (the leader moved, the node is down) also asks for a metadata
  refresh before the retry, unless the error carried a newer leader hint: then the retry goes
  straight to the hinted leader, without a refresh and without a backoff (KIP-951). Without a
  hint, the partitioned requests spend the backoff polling every node's metadata and retry as
  soon as one names another leader (``Client.await_new_leaders``).
* Only the failed partitions are retried; the ones that succeeded keep their answers.
* At the deadline, RequestTimedOutError names the partitions still failing and why.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import tenacity

from tidelog.errors import RequestTimedOutError, RetriableError, TidelogError
from tidelog.types import TopicPartition

T = TypeVar("T")

DEFAULT_RETRY_BACKOFF_MS = 100
DEFAULT_RETRY_BACKOFF_MAX_MS = 1000
BACKOFF_JITTER = 0.2
#: How often a request whose leader failed it polls the metadata for the next leader during
#: its backoff, at least (an election takes 0.3-1 s, so a poll's lag matters)...
LEADER_POLL_S = 0.02
#: ...and at most this many times per backoff: a long outage, with backoffs of
#: retry_backoff_max_ms, costs 20 refreshes a second, not 50.
LEADER_POLLS_PER_BACKOFF = 20
#: One attempt may take this share of its call's whole timeout (Kafka gives a request half of
#: default.api.timeout.ms; a quarter leaves room for a refresh and two more attempts)...
ATTEMPT_SHARE = 0.25
#: ...but never less than this, in seconds, unless the call itself has less left.
MIN_ATTEMPT_S = 1.0


def leader_poll_s(backoff_s: float) -> float:
    """The pause between metadata polls during a backoff of `backoff_s` (see LEADER_POLL_S)."""
    return max(LEADER_POLL_S, backoff_s / LEADER_POLLS_PER_BACKOFF)


class Deadline:
    """An absolute point on the monotonic clock that bounds a whole call and its retries."""

    __slots__ = ("at", "timeout_ms")

    def __init__(self, timeout_ms: float) -> None:
        self.timeout_ms = timeout_ms
        self.at = time.monotonic() + timeout_ms / 1000

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(self.at - time.monotonic(), 0.0)

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.at

    def attempt_s(self) -> float:
        """How long one attempt (one RPC) of the call may take: a slice of the whole timeout,
        never all of it, so a node that stalls without failing (a paused process keeps its
        connections) leaves time to find another."""
        share = max(self.timeout_ms / 1000 * ATTEMPT_SHARE, MIN_ATTEMPT_S)
        return min(share, self.remaining())


@dataclass(frozen=True, slots=True)
class Backoff:
    """Kafka's ExponentialBackoff: initial * 2**(attempt-1), capped, times 1 +- jitter."""

    initial_ms: float = DEFAULT_RETRY_BACKOFF_MS
    max_ms: float = DEFAULT_RETRY_BACKOFF_MAX_MS
    jitter: float = BACKOFF_JITTER

    def delay_s(self, attempt: int) -> float:
        """The pause after failed attempt number `attempt` (1-based), in seconds."""
        base = min(self.initial_ms * 2.0 ** max(attempt - 1, 0), self.max_ms)
        return float(base * random.uniform(1 - self.jitter, 1 + self.jitter) / 1000)


class PartitionsFailed(RetriableError):
    """Some partitions of an attempt failed with retriable errors; raised between attempts only.

    ``refresh``: at least one failure needs fresh metadata. ``immediate``: every failure came
    with a newer leader hint, so the retry need not wait.
    """

    name = "PARTITIONS_FAILED"

    def __init__(
        self, failures: Mapping[TopicPartition, TidelogError], *, refresh: bool, immediate: bool
    ) -> None:
        self.failures = dict(failures)
        self.refresh = refresh
        self.immediate = immediate
        super().__init__(describe_failures(self.failures))


class RetryAtOnce(RetriableError):
    """A retriable failure whose backoff its attempt already spent watching for what cures it
    (a new coordinator named): the retry loop goes again without a pause, and at the deadline
    reports `error`, the failure itself."""

    name = "RETRY_AT_ONCE"

    def __init__(self, error: TidelogError) -> None:
        self.error = error
        super().__init__(str(error))


def describe_failures(failures: Mapping[TopicPartition, BaseException]) -> str:
    return "; ".join(f"{tp}: {exc}" for tp, exc in sorted(failures.items()))


class _Wait(tenacity.wait.wait_base):
    def __init__(self, backoff: Backoff, deadline: Deadline) -> None:
        self._backoff = backoff
        self._deadline = deadline

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        outcome = retry_state.outcome
        failure = outcome.exception() if outcome is not None else None
        if isinstance(failure, RetryAtOnce) or (
            isinstance(failure, PartitionsFailed) and failure.immediate
        ):
            return 0.0
        return min(self._backoff.delay_s(retry_state.attempt_number), self._deadline.remaining())


class _StopAtDeadline(tenacity.stop.stop_base):
    """Stops when the pause before the next attempt would reach the deadline: an attempt with
    no time left can only fail for lack of time, and its failure ("the deadline passed") would
    hide the one that kept the call failing."""

    def __init__(self, deadline: Deadline) -> None:
        self._deadline = deadline

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return self._deadline.remaining() <= retry_state.upcoming_sleep


def _is_retriable(exc: BaseException) -> bool:
    return isinstance(exc, RetriableError)


def _policy(deadline: Deadline, backoff: Backoff) -> dict[str, Any]:
    """What the blocking and the coroutine retry loops share: retry exactly the retriable
    errors, back off, stop at the deadline, and raise the last error."""
    return {
        "retry": tenacity.retry_if_exception(_is_retriable),
        "wait": _Wait(backoff, deadline),
        "stop": _StopAtDeadline(deadline),
        "reraise": True,
    }


def _failure(exc: RetriableError) -> TidelogError:
    """The failure itself, out of its RetryAtOnce."""
    return exc.error if isinstance(exc, RetryAtOnce) else exc


def _timed_out(what: str, deadline: Deadline, exc: TidelogError) -> RequestTimedOutError:
    return RequestTimedOutError(
        f"{what} did not succeed within {deadline.timeout_ms:g} ms; still failing: {exc}"
    )


def call_with_retry(
    attempt: Callable[[], T], *, what: str, deadline: Deadline, backoff: Backoff
) -> T:
    """Run `attempt` until it returns, raises a non-retriable error, or the deadline passes.

    `attempt` itself refreshes metadata when the previous failure asked for it (it knows which
    partitions it still needs); this loop only decides whether and when to call it again.
    """
    try:
        return tenacity.Retrying(**_policy(deadline, backoff))(attempt)
    except RetriableError as exc:
        raise _timed_out(what, deadline, _failure(exc)) from _failure(exc)


async def call_with_retry_async(
    attempt: Callable[[], Awaitable[T]], *, what: str, deadline: Deadline, backoff: Backoff
) -> T:
    """`call_with_retry` for a coroutine on the client's loop: the backoff is an asyncio sleep,
    so the loop's other calls go on meanwhile."""

    async def run() -> T:  # tenacity awaits only what a coroutine function returns
        return await attempt()

    try:
        return await tenacity.AsyncRetrying(**_policy(deadline, backoff))(run)
    except RetriableError as exc:
        raise _timed_out(what, deadline, _failure(exc)) from _failure(exc)
