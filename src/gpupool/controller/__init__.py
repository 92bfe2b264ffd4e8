"""The control loop: schedule → dispatch → sync backends → record events (DESIGN §1)."""
