"""Pure domain types: no I/O, no clock, no environment. Imports nothing else of gpupool."""
