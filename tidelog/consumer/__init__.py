"""The consumer, as Kafka's: a facade (``consumer``) over where it stands in each assigned
partition (``positions``), the Fetch long polls and the records fetched and not yet handed out
(``fetcher``), the commits of its positions to its group, asynchronous and automatic
(``commits``), and, for a consumer that ``subscribe()``s, what it does for its group membership
(``group``; the KIP-848 member itself is `tidelog.membership`). Its settings are
``config.ConsumerConfig``.
"""

from tidelog.consumer.commits import CommitCallback
from tidelog.consumer.config import ConsumerConfig
from tidelog.consumer.consumer import Consumer

__all__ = ["CommitCallback", "Consumer", "ConsumerConfig"]
