"""The demo job of `relaunch demo`: a tiny real training script (`train.py`) with injected faults."""
