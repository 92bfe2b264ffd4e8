"""The Slurm backend: each attempt is one Slurm batch job (``adapter.SlurmBackend``).

Pure parts (``parsers``, ``script``, ``status``) are separate from the part that runs Slurm's
commands (``commands``, injected), so that everything but the commands is tested without a
cluster. Nothing is imported here: the registry imports ``adapter`` lazily.
"""
