"""Time: the SimPy engine, requests, the KV block pool, replicas, metrics."""
