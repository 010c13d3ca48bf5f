"""The terminal console: rich, with a wide fixed width when output is not a terminal so that
piped tables are not squeezed to 80 columns."""

from rich.console import Console

PIPE_WIDTH = 160


def console() -> Console:
    out = Console()
    return out if out.is_terminal else Console(width=PIPE_WIDTH)
