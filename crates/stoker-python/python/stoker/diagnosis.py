"""The result of :meth:`stoker.Dataset.diagnose`: throughput, per-stage counters and the
bottleneck verdict of a pipeline run alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Recommendation:
    action: str
    stage: str | None
    predicted_gain_percent: float | None
    """Predicted change in pipeline throughput; ``None`` when the pipeline alone cannot tell."""
    evidence: str


class Diagnosis:
    """What :meth:`stoker.Dataset.diagnose` measured and concluded."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        verdict = raw["verdict"]
        self.examples_per_s: float = raw["examples_per_s"]
        self.elements_per_s: float = raw["elements_per_s"]
        self.stages: list[dict[str, Any]] = raw["stages"]
        self.ops: list[dict[str, Any]] = verdict["ops"]
        """Time per op inside maps (name, calls, busy_s, share of all busy time), most first."""
        self.bottleneck: str | None = verdict["bottleneck"]
        """The name of the stage that limits throughput (as in ``stats()``)."""
        self.summary: str = verdict["summary"]
        self.cpu_utilisation: float = verdict["cpu_utilisation"]
        self.gil_utilisation: float = verdict["gil_utilisation"]
        self.recommendations = [
            Recommendation(r["action"], r["stage"], r["predicted_gain_percent"], r["evidence"])
            for r in verdict["recommendations"]
        ]

    def to_dict(self) -> dict[str, Any]:
        return self.raw

    def __str__(self) -> str:
        return (
            f"{self.examples_per_s:,.0f} examples/s ({self.elements_per_s:,.1f} elements/s) "
            f"over {self.raw['seconds']:.2f} s\n{self.raw['verdict']['text']}"
        )

    def __repr__(self) -> str:
        return f"<Diagnosis bottleneck={self.bottleneck!r} {self.examples_per_s:,.0f} examples/s>"


__all__ = ["Diagnosis", "Recommendation"]
