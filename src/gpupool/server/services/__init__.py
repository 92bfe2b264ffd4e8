"""Use cases of the API. Each takes the principal and plain values; routes only translate."""
