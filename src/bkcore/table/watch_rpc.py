"""The watch method of stream storage's gRPC endpoint, which is ours (BookKeeper's protos have
no watch): its name, shared by the server (streamstorage.grpc_gateway, whose _WatchHandler
describes the msgpack requests and answers) and the client (bkclient.storage_client)."""

WATCH_METHOD = "/bk.table.Watch/Watch"
