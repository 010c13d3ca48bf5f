"""Speculative decoding flags (``perf/speculative.py``), named as vLLM's ``--speculative-config``
fields: ``--speculative-method``, ``--num-speculative-tokens``, ``--speculative-model``. The
acceptance is given either per drafted token (``--spec-acceptance-rate``) or as the mean tokens
one step emits (``--spec-accept-length``: vLLM's "mean acceptance length", SGLang's "accept
length"; alias ``--mean-acceptance-length``). Off unless ``--speculative-method`` is given."""

from __future__ import annotations

from dataclasses import dataclass

import click

from inferplan.cli_checks import bounded
from inferplan.cli_flags import option_group
from inferplan.engine.speculation import SimSpeculation
from inferplan.errors import InferplanError
from inferplan.perf.protocol import StepTimeModel
from inferplan.perf.roofline import RooflineModel
from inferplan.perf.speculative import (
    MAX_SPECULATIVE_TOKENS,
    METHODS,
    SpeculativeConfig,
    SpeculativeModel,
    acceptance_for_length,
)
from inferplan.specs.catalog import load_model
from inferplan.specs.model import ModelSpec


@dataclass(frozen=True)
class SpeculativeFlags:
    speculative_method: str | None
    num_speculative_tokens: int | None
    spec_acceptance_rate: float | None
    spec_accept_length: float | None
    speculative_model: str | None

    def check(self) -> None:
        self.config()

    def config(self) -> SpeculativeConfig | None:
        """The checked configuration, or None when speculation is off."""
        if self.speculative_method is None:
            given = [
                flag
                for flag, value in (
                    ("--num-speculative-tokens", self.num_speculative_tokens),
                    ("--spec-acceptance-rate", self.spec_acceptance_rate),
                    ("--spec-accept-length", self.spec_accept_length),
                    ("--speculative-model", self.speculative_model),
                )
                if value is not None
            ]
            if given:
                raise InferplanError(
                    f"{given[0]}: needs --speculative-method ({'|'.join(METHODS)})"
                )
            return None
        return self._checked(self.speculative_method)

    def _checked(self, method: str) -> SpeculativeConfig:
        k = self.num_speculative_tokens
        if k is None:
            raise InferplanError(
                f"--num-speculative-tokens: required with --speculative-method; expected an "
                f"integer >= 1 and <= {MAX_SPECULATIVE_TOKENS}"
            )
        rate, length = self.spec_acceptance_rate, self.spec_accept_length
        if (rate is None) == (length is None):
            raise InferplanError(
                "--spec-acceptance-rate: give exactly one of --spec-acceptance-rate (per drafted "
                "token, 0-1) or --spec-accept-length (tokens per step, 1 to k+1)"
            )
        acceptance = rate if rate is not None else acceptance_for_length(float(length or 1), k)
        if (method == "draft") != (self.speculative_model is not None):
            raise InferplanError(
                "--speculative-model: needed with --speculative-method draft, and only with it"
            )
        return SpeculativeConfig(method, k, acceptance, self._draft())

    def _draft(self) -> ModelSpec | None:
        if self.speculative_model is None:
            return None
        try:
            return load_model(self.speculative_model)
        except InferplanError as err:  # the catalog's message names --model
            reason = str(err).removeprefix("--model: ")
            raise InferplanError(f"--speculative-model: {reason}") from None

    def simulation(self, seed: int, disaggregate: bool) -> SimSpeculation | None:
        """``simulate``'s speculative decoding, its acceptances drawn from ``--seed``'s
        streams (``engine/speculation.py``), or None when off."""
        config = self.config()
        if config is None:
            return None
        if disaggregate:
            raise InferplanError("--speculative-method: not emulated with --disaggregate")
        return SimSpeculation(config, seed)

    def model(self, step_model: StepTimeModel) -> SpeculativeModel | None:
        config = self.config()
        if config is None:
            return None
        if not isinstance(step_model, RooflineModel):
            raise InferplanError(
                "--speculative-method: not available with --operator-table (the roofline only)"
            )
        return SpeculativeModel(step_model, config)


speculative_options = option_group(
    [
        click.option(
            "--speculative-method",
            type=click.Choice(METHODS),
            default=None,
            help="Speculative decoding (vLLM --speculative-config method): eagle/eagle3 "
            "(one-layer head), mtp (DeepSeek-V3's extra layer), draft (--speculative-model)",
        ),
        click.option(
            "--num-speculative-tokens",
            type=bounded(1, MAX_SPECULATIVE_TOKENS, limit="MAX_SPECULATIVE_TOKENS"),
            default=None,
            help="Draft tokens verified per step (k)",
        ),
        click.option(
            "--spec-acceptance-rate",
            type=bounded(0, 1, is_int=False),
            default=None,
            help="Probability that each drafted token is accepted",
        ),
        click.option(
            "--spec-accept-length",
            "--mean-acceptance-length",
            "spec_accept_length",
            type=bounded(1, MAX_SPECULATIVE_TOKENS + 1, is_int=False),
            default=None,
            help="Mean tokens emitted per step, bonus token included (SGLang accept length, "
            "vLLM mean acceptance length)",
        ),
        click.option(
            "--speculative-model",
            default=None,
            help="Draft model (bundled name or config.json) for --speculative-method draft",
        ),
    ],
    SpeculativeFlags,
    "speculative",
)
