"""SGLang's intake in two parts (``FrontEnd.interleaved_s``), cross-validated with
``scripts/fit_frontend.py``'s grid and folds (docs/validation.md, ``sglang7``).

``fit_frontend.py --engine sglang --intake-streams`` with the stream axis replaced by the part of
each request's intake that runs before its handler's first yielding ``await``
(``INTERLEAVED``: 0, 1 and 2 ms; ``engine/frontend.py`` ``two_phase_finish``), beside the
tokenizer stage's ``per_request_s`` grid. ``--without`` fits and cross-validates on the same
tables with that part at 0 (the committed model before ``sglang7``). Run from the repository root:

    .venv/bin/python scripts/sglang_intake.py --points 0 --factors 0.3,0.4,0.55 --save T.pkl
    .venv/bin/python scripts/sglang_intake.py --load T.pkl [--without]

Every other argument goes to ``fit_frontend.py`` as it is (``--engine sglang --dry-run --by``
always).
"""

from __future__ import annotations

import sys
from pathlib import Path

from inferplan.engine.frontend import FrontEnd

MS = 1e-3
# Bounds: 0 to about what FastAPI's read, JSON decoding and validation of one chat request cost
# in Python; SGLang's ``128/4`` runs, 1,000 requests at once, hand out their first tokens from
# 0.9-2.6 s on (TTFT median / p99 0.56-0.70 where an even pace from 0 gives 0.5).
INTERLEAVED = [1 * MS, 2 * MS]


def _frontend(request_s: float, token_s: float = 0.0, stream_s: float = 0.0) -> FrontEnd:
    """``fit_frontend.sglang_frontend`` with its stream axis carrying the interleaved part."""
    return FrontEnd(request_s, 0.0, token_s, requests_apart=True, interleaved_s=stream_s)


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(Path(__file__).parent))
    import fit_frontend  # a sibling script, found once the path is set

    without = "--without" in argv
    argv = [a for a in argv if a != "--without"]
    fit_frontend.INTAKE_STREAMS = INTERLEAVED
    fit_frontend.sglang_frontend = _frontend
    describe, tie = fit_frontend.describe, fit_frontend.tie_classes

    def described(point: fit_frontend.Fit) -> str:
        return describe(point) + f"; interleaved {point.fe.interleaved_s / MS:g} ms"

    def tied(
        by_class: dict[str, fit_frontend.Table], tied: tuple[str, ...]
    ) -> dict[str, fit_frontend.Table]:
        if without:  # the committed model: no interleaved part
            by_class = {
                kernel: {key: v for key, v in table.items() if key[2].interleaved_s == 0.0}
                for kernel, table in by_class.items()
            }
        return tie(by_class, tied)

    fit_frontend.describe = described
    fit_frontend.tie_classes = tied
    fixed = ["--engine", "sglang", "--dry-run", "--by", "--intake-streams"]
    return int(fit_frontend.main(fixed + argv))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
