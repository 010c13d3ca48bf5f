"""``--random-prefix-len`` and ``--prefix-groups``: shared prompt prefixes for synthetic
datasets (``workload/prefixes.py``), as ``vllm bench serve --random-prefix-len``. Kept in its own
option group so that the workload flags stay as they were."""

from __future__ import annotations

from dataclasses import dataclass

import click

from inferplan.cli_checks import bounded
from inferplan.cli_flags import WorkloadFlags, option_group
from inferplan.errors import InferplanError
from inferplan.limits import MAX_TOKENS
from inferplan.workload.prefixes import with_shared_prefix
from inferplan.workload.request import Workload

SYNTHETIC_DATASETS = ("random", "reasoning", "servegen")


@dataclass(frozen=True)
class PrefixFlags:
    random_prefix_len: int
    prefix_groups: int

    def check(self) -> None:
        if self.prefix_groups > 1 and not self.random_prefix_len:
            raise InferplanError("--prefix-groups needs --random-prefix-len > 0")

    def build(self, workload: WorkloadFlags) -> Workload:
        """The workload of ``workload``'s flags with the shared prefix (none by default)."""
        requests = workload.build()
        if not self.random_prefix_len:
            return requests
        if workload.dataset_name not in SYNTHETIC_DATASETS:
            raise InferplanError(
                f"--random-prefix-len applies to --dataset-name {'|'.join(SYNTHETIC_DATASETS)}, "
                f"not {workload.dataset_name} (a trace carries its own prefixes: Mooncake "
                "hash_ids, or a session_id column)"
            )
        return with_shared_prefix(
            requests, self.random_prefix_len, self.prefix_groups, workload.seed
        )


prefix_options = option_group(
    [
        click.option(
            "--random-prefix-len",
            type=bounded(0, MAX_TOKENS, limit="MAX_TOKENS"),
            default=0,
            show_default=True,
            help="Tokens of a shared prefix prepended to every synthetic prompt (adds to its "
            "input length, as vllm bench serve); prefix caching reuses its KV",
        ),
        click.option(
            "--prefix-groups",
            type=bounded(1, 1_000_000),
            default=1,
            show_default=True,
            help="Distinct shared prefixes; each request gets one uniformly at random (seeded)",
        ),
    ],
    PrefixFlags,
    "prefix",
)
