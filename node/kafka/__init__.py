"""The Kafka listener: Kafka's wire protocol on ``kafka.listen``, beside the gRPC listeners.

A Kafka request is adapted onto the node's existing Tidelog handlers (node/api/*), so that
authorization, validation, forwarding and error codes stay in one place: the adapter turns
the Kafka request into the pb request, calls the servicer's method with a `call.KafkaCall`
(the connection's principal, the request's deadline; ``principal_of_call`` answers its
principal), and turns the pb answer into the Kafka response.

The room:

- ``codec.py``: the thin adapter over kio (headers, bodies, response frames);
- ``registry.py``: api key -> versions and handler; the only source of ApiVersions' table;
- ``call.py``: the call context handlers get;
- ``connection.py``: framing, the in-flight budget, concurrent handling, answers in order;
- ``listener.py``: the asyncio server, TLS, SASL sessions and principals;
- ``apis.py``: `kafka_registry`, which adds every served API;
- one module per API family: ``api_versions.py``, ``metadata.py``, ``produce.py`` (Produce,
  InitProducerId), ``fetch.py`` (Fetch, ListOffsets, OffsetForLeaderEpoch),
  ``classic_members.py`` (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, with the consumer
  protocol's structs in ``consumer_protocol.py``), ``consumer_groups.py``
  (ConsumerGroupHeartbeat, ConsumerGroupDescribe), ``groups.py`` (FindCoordinator,
  OffsetCommit, OffsetFetch, OffsetDelete, DescribeGroups, ListGroups, DeleteGroups),
  ``transactions.py`` (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit),
  ``sasl.py`` (SaslHandshake, SaslAuthenticate and the SASL exchanges of a SASL listener's
  connections), ``scram_credentials.py`` (DescribeUserScramCredentials,
  AlterUserScramCredentials), ``cluster_admin.py`` (DescribeLogDirs, AlterReplicaLogDirs,
  ElectLeaders, DescribeQuorum, DescribeTopicPartitions).

How to add an API (say Produce, key 0):

1. Write ``node/kafka/produce.py`` with a handler
   ``async def handle(request, call: KafkaCall) -> response | None``: `request` is kio's
   request entity of the version the client sent (``call.api_version``), the result kio's
   response entity of that same version (`fields.build` fills the fields that version has;
   `codec.response_type(key, version)` and `fields.entity_of` give the classes), or None when
   the request expects no answer (acks=0). A handler that raises closes the connection.
2. Add it in a function ``add_produce(registry, ...)`` calling
   ``registry.add(0, 3, 10, handle, max_request_bytes=...)``: the floor must be Kafka 4's
   (the lowest version kio knows), every version up to the ceiling must be one kio knows, and
   the ceiling at most Kafka 4.0's; ``max_request_bytes`` is the gRPC client listener's limit
   for the same method (node/edge/limits.py CLIENT_LIMITS), the default otherwise.
3. Call it from `apis.kafka_registry`. ApiVersions then advertises it, and
   tests/kafka/test_codec.py round-trips every version of it; list it in
   docs/operations/kafka-compatibility.md.
"""
