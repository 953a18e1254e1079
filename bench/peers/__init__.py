"""Peer harness: each framework's own validation code judges the same files as
check-config (``make peers``; needs the .venv-peers environment, not ``make test``)."""
