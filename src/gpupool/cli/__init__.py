"""The ``gpupool`` command line: Typer commands over ``gpupool.client`` only (docs/code-style.md
§11)."""
