"""``python -m pptune``: the command line (tune's launcher runs trials so)."""

from pptune.cli import main

main()
