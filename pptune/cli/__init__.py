"""Typer commands, thin: parse -> call -> render -> exit code."""

from pptune.cli.app import app, main

__all__ = ["app", "main"]
