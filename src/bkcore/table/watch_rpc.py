"""What stream storage's gRPC endpoint adds to BookKeeper's protocol, named once for the server
(streamstorage.grpc_gateway, streamstorage.table_protocol) and the client
(bkclient.storage_client): the watch method (BookKeeper's protos have no watch; _WatchHandler
describes its msgpack requests and answers), the catalog listings (BookKeeper's
RootRangeService cannot list namespaces or streams) and metadata keys, which the stock client
neither sends nor reads."""

WATCH_METHOD = "/bk.table.Watch/Watch"
# msgpack unary calls: {} -> {"names": [...]} (every namespace), and {"namespace": NS} ->
# {"names": [...]} (its streams); a refusal answers {"error": why, "code": BookKeeper's status}.
LIST_NAMESPACES_METHOD = "/bk.storage.Catalog/ListNamespaces"
LIST_STREAMS_METHOD = "/bk.storage.Catalog/ListStreams"
# Trailing metadata of a refused table call: why, naming the key and the rule (utf-8).
ERROR_MESSAGE_HEADER = "bk-error-message-bin"
# Request metadata of a Range call: read from its key to the end of its pkey (BookKeeper's
# range ends are inclusive keys, and none means "to the end").
TO_PKEY_END_HEADER = "bk-range-to-pkey-end"
# Request metadata of a Range or Delete call: every key of its pkey that starts with its key
# (its range_end is not read). An inclusive end cannot name the end of a prefix.
PREFIX_HEADER = "bk-range-prefix"
# Request metadata of a Put call: the key expires this many milliseconds after the put
# (BookKeeper's tables have one TTL for every key, StreamConfiguration.ttl_seconds; ours is
# per put, as an etcd lease is).
PUT_TTL_MS_HEADER = "bk-put-ttl-ms"
# Request metadata of a table call from a thick client (bkclient.table_client), which routes
# calls itself: a server that does not own the call's range refuses it, naming the owner in the
# trailing metadata OWNER_HEADER, instead of forwarding it there. The client then sends there,
# and keeps sending there (the stock client, which knows one address, is forwarded).
OWNER_ONLY_HEADER = "bk-owner-only"
OWNER_HEADER = "bk-owner"
