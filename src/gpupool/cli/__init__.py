"""The ``gpupool`` command line: Typer commands over ``gpupool.client`` only (STYLE §11)."""
