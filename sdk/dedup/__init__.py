"""Exactly-once effects: deduplication, the idempotent inbox and fencing (issue 4)."""
