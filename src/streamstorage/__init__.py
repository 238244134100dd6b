"""streamstorage: the stream storage server, BookKeeper's Table Service and stream endpoint.

    server        run_stream_storage(): a process's client of the cluster plus the gRPC endpoint
    grpc_gateway  BookKeeper's own gRPC services (RootRange, StorageContainer, MetaRange, Table)
                  and a watch of our own, over bkcore.table.service.Tables and bkcore.stream
    lmdb_kv       the range indexes a server keeps in lmdb

What a server decides (ranges, journals, checkpoints, ownership, routing) is bkcore.table's and
bkcore.stream's, the code the simulator runs; this package is its trio and gRPC side.
"""
