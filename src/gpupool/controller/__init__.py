"""The control loop: schedule → dispatch → sync backends → record events (docs/architecture.md
§1)."""
