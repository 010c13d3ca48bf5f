"""``simulate``'s admission-control flags (``engine/admission.py``, ``docs/reasoning.md``),
collapsed into one ``AdmissionFlags`` object like the other flag groups (``cli_flags.py``).

Every flag defaults to None (unset), so a run without them builds no admission config at all
and its output is today's. Cross-flag rules (a knob given without the policy that reads it)
are refused with one ``error:`` line naming the flag (``docs/errors.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import click

from inferplan.cli_checks import bounded
from inferplan.cli_flags import TOKENS, option_group
from inferplan.engine.admission import EXHAUSTION_POLICIES, POLICIES, AdmissionConfig
from inferplan.engine.simulator import SimulationResult
from inferplan.errors import InferplanError
from inferplan.limits import MAX_SPAN_S
from inferplan.metrics.admission import admission_summary
from inferplan.metrics.summary import DEFAULT_OUTPUT_BUCKETS
from inferplan.workload.predict import PREDICTORS, PredictorSpec

DEFAULT_QUANTILE = 0.9
DEFAULT_QUANTILE_HEADROOM = 0.1  # --admission quantile's shared headroom when not given


# Each knob: the flag that reads it, and the values of that flag with which it does.
_READERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "admission_quantile": ("admission", ("quantile", "token-budget")),
    "admission_headroom": ("admission", POLICIES),
    "admission_token_budget": ("admission", ("token-budget",)),
    "admission_max_tokens": ("admission", ("reserve-max",)),
    "on_exhaustion": ("admission", POLICIES),
    "predictor_sigma": ("length_predictor", ("noisy",)),
    "predictor_bias": ("length_predictor", ("noisy",)),
}


def _flag(name: str) -> str:
    """A field's command-line flag: ``admission_quantile`` -> ``--admission-quantile``."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class AdmissionFlags:
    admission: str | None
    admission_quantile: float | None
    admission_headroom: float | None
    admission_token_budget: int | None
    admission_max_tokens: int | None
    on_exhaustion: str | None
    length_predictor: str | None
    predictor_sigma: float | None
    predictor_bias: float | None
    spf_aging_s: float | None

    def given(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]

    def check(self) -> None:
        """A knob given without what reads it is refused, naming the flag."""
        for name, (reader, values) in _READERS.items():
            if getattr(self, name) is not None and getattr(self, reader) not in values:
                reading = f"{_flag(reader)} {'|'.join(values)}"
                raise InferplanError(f"{_flag(name)}: applies with {reading}")

    def config(
        self, scheduling_policy: str, seed: int, disaggregate: bool = False
    ) -> AdmissionConfig | None:
        """The admission config these flags ask for, or None when none was given."""
        if not self.given():
            return None
        if disaggregate:
            raise InferplanError(f"{_flag(self.given()[0])}: not emulated with --disaggregate")
        reads_predictor = self.admission in ("quantile", "token-budget") or (
            scheduling_policy == "spf"
        )
        if self.length_predictor is not None and not reads_predictor:
            raise InferplanError(
                "--length-predictor: read by --admission quantile|token-budget and "
                "--scheduling-policy spf only"
            )
        headroom = self.admission_headroom
        if headroom is None:
            headroom = DEFAULT_QUANTILE_HEADROOM if self.admission == "quantile" else 0.0
        spec = PredictorSpec(
            name=self.length_predictor or "oracle",
            sigma=0.5 if self.predictor_sigma is None else self.predictor_sigma,
            bias=1.0 if self.predictor_bias is None else self.predictor_bias,
            seed=seed,
        )
        return AdmissionConfig(
            policy=self.admission,
            quantile=DEFAULT_QUANTILE
            if self.admission_quantile is None
            else self.admission_quantile,
            headroom=headroom,
            on_exhaustion=self.on_exhaustion or "preempt",
            token_budget=self.admission_token_budget,
            max_tokens=self.admission_max_tokens,
            predictor=spec,
            spf_aging_s=self.spf_aging_s,
        )


admission_options = option_group(
    [
        click.option(
            "--admission",
            type=click.Choice(POLICIES),
            default=None,
            help="KV reservation at admission (default: the engine's own: vLLM reserve-none, "
            "TensorRT-LLM reserve-max)",
        ),
        click.option(
            "--admission-quantile",
            type=bounded(0, 1, is_int=False, low_open=True, high_open=True),
            default=None,
            help=f"Quantile of the predicted output length reserved ({DEFAULT_QUANTILE})",
        ),
        click.option(
            "--admission-headroom",
            type=bounded(0, 1, is_int=False, high_open=True),
            default=None,
            help="Share of KV blocks kept unreserved for requests that outgrow their "
            f"reservation ({DEFAULT_QUANTILE_HEADROOM} with quantile, else 0)",
        ),
        click.option(
            "--admission-token-budget",
            type=TOKENS,
            default=None,
            help="token-budget: reserved tokens of running requests (default: the KV pool's)",
        ),
        click.option(
            "--admission-max-tokens",
            type=TOKENS,
            default=None,
            help="reserve-max: the output tokens each request reserves, its max_tokens (default: "
            "up to --max-model-len); requests still end at their own output length",
        ),
        click.option(
            "--on-exhaustion",
            type=click.Choice(EXHAUSTION_POLICIES),
            default=None,
            help="When a request outgrows its reservation and no unreserved block is left "
            "(default preempt)",
        ),
        click.option(
            "--length-predictor",
            type=click.Choice(tuple(PREDICTORS)),
            default=None,
            help="Output-length predictor for quantile/token-budget and spf (default oracle)",
        ),
        click.option(
            "--predictor-sigma",
            type=bounded(0, 10, is_int=False),  # e^(10 z) stays finite for any draw
            default=None,
            help="noisy: sigma of the lognormal multiplicative error (0.5)",
        ),
        click.option(
            "--predictor-bias",
            type=bounded(0, 1e6, is_int=False, low_open=True),
            default=None,
            help="noisy: systematic factor on the true length (1.0: unbiased)",
        ),
        click.option(
            "--spf-aging-s",
            type=bounded(0, MAX_SPAN_S, is_int=False, low_open=True, limit="MAX_SPAN_S"),
            default=None,
            help="spf: a request waiting this long is served first-come first-served",
        ),
    ],
    AdmissionFlags,
    "admission",
)


def admission_keys(result: SimulationResult) -> dict[str, Any]:
    """The summary's ``admission`` section, when the run had an admission config."""
    if result.admission is None:
        return {}
    return {
        "admission": admission_summary(result.records, result.admission, DEFAULT_OUTPUT_BUCKETS)
    }
