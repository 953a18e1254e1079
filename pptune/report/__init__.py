"""Renderers and exports of pipeline timelines and results.

Everything here returns an object or a string (or writes a file atomically);
nothing prints. Timelines are duck-typed (``protocol.Timeline``), so measured
runs render the same way as ``simulate`` results.

Import from the modules (``pptune.report.svg``, ``.timeline``, ``.trace``,
``.tables``, ``.fmt``): the package imports nothing itself, so a command pays
only for the renderers it uses (the SVG and trace writers pull in the file
schemas).
"""
