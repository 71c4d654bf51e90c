"""The function's shared vocabulary and plumbing: the typed request and result, one exception per outcome,
settings (every environment variable), JSON logs and safe text. Imports nothing else of functions/."""
