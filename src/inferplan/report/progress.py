"""A progress bar for long runs: on for a terminal, off for ``--json`` or a pipe."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@contextmanager
def progress_bar(total: int, *, enabled: bool) -> Iterator[Callable[[int], None]]:
    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield lambda _: None
        return
    columns = (TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("requests", total=total)
        yield lambda done: bar.advance(task, done)
