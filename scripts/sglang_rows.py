"""Every simulatable SGLang row of the published table, predicted with the committed constants:
one tab-separated line per row (case id, metric, measured, predicted, signed relative error,
skip reason), in the table's order, so two checkouts' outputs diff line by line. Run from the
repository root:

    .venv/bin/python scripts/sglang_rows.py > sglang_rows.tsv
"""

from __future__ import annotations

import sys

from inferplan.plan.published import bundled_published, skip_reason
from inferplan.plan.published_runs import validate_rows


def main() -> int:
    rows = [r for r in bundled_published() if r.engine == "sglang" and skip_reason(r) is None]
    for r in validate_rows(rows):
        fields = (r.row.case_id, r.row.metric, r.row.value, r.predicted, r.error, r.reason)
        sys.stdout.write("\t".join(str(f) for f in fields) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
