"""The rendezvous room: how the nodes of a job meet before each cycle.

Owns relaunch's barrier rendezvous (`barrier`: torch's `RendezvousHandler` on a c10d
TCPStore, rounds, fencing, keep-alives, hot spares), its key layout and store hosting
(`store`), the per-job secret that signs the store's values (`auth`), the pure rank
assignment (`assignment`), what a node brings to a round (`node`: infra group rank, NVLink
segment), and the workers' store of each round (`worker_store`) with its socket accept
filter (`store_filter`). Nothing is imported here: each module is imported by its own path.
"""
