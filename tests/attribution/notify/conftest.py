"""Tests of Slack alerts (attribution/notify/) against the loopback Slack-compatible server
(tests/_slack_server.py), from the notifier and from the real `relaunch serve`.

Fixtures: none of its own (the root conftest's are there if needed).
"""
