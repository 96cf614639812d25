"""Notifications sent when verdicts are saved (engine listeners): Slack alerts."""
