"""Settings and their types: defaults.py (the values, plain constants), units.py (durations, targets,
Device), workspace.py, settings.py (one Settings: flags > KERNELLOOP_* > .env > kernelloop.toml >
defaults, made by `load_settings` at every entry point), fields.py (the knobs' types with their caps)
and endpoint.py (the model endpoint).

Imports nothing: the verifier side reads config.defaults, units and workspace with torch alone.
"""
