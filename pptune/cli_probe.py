"""`pptune probe` command (being built; replaced by the probe work)."""

HELP = "Measure per-layer costs and link bandwidth on this machine; write a profile."


def probe() -> None:
    raise NotImplementedError
