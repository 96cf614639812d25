"""The straggler room: finding ranks that are slower than their peers.

Owns the worker-side section timer (`worker`, stdlib only: it is imported in the training
process by `relaunch.client`), the launcher-side scorer that turns the ranks' summaries
into scores and `straggler_scores` facts (`scores`), and the exchange of those summaries
between nodes through the rendezvous store (`exchange`). Nothing is imported here, so a
worker importing `worker` pulls in nothing else.
"""
