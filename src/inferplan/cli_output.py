"""What every command prints: JSON on stdout, or terminal tables; and the one refusal the
commands that never read an operator table share."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from rich.console import RenderableType

from inferplan.cli_flags import DeploymentFlags
from inferplan.errors import InferplanError
from inferplan.report.console import console


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")


def show(data: Any, json_out: bool, render: Callable[[Any], RenderableType]) -> None:
    """``data`` as JSON on stdout, or ``render(data)`` as terminal tables."""
    if json_out:
        print_json(data)
    else:
        console().print(render(data))


def refuse_operator_table(deployment: DeploymentFlags, why: str) -> None:
    """``--operator-table`` given to a command that does not use one: say so, do not ignore it."""
    if deployment.operator_table:
        raise InferplanError(f"--operator-table: not used here; {why}")
