"""Helpers of perf/relay-bench and perf/commit-sweep (stdlib + matplotlib)."""
