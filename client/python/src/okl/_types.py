"""The results the client returns: plain dataclasses and numpy arrays, not messages."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import List

import numpy as np
import numpy.typing as npt

from okl.v1 import okl_pb2 as pb

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Candidate:
    """One candidate of a selection (config.select): see okl.proto's Candidate."""

    config: pb.ModelConfig
    status: str           # "WAITING", "LIVE" or "RETIRED"
    steps: int            # examples it learned
    cumulative_loss: float
    recent_loss: float    # its progressive loss over ~1,000 recent steps
    started_at: int       # the selection's step it started at
    serving: bool         # the selection serves its predictions


@dataclass(frozen=True)
class ModelStats:
    """A model's live statistics (okl.proto's ModelStats, field for field)."""

    steps: int = 0                    # examples observed
    expansion_size: int = 0           # stored terms (random features: D)
    cumulative_loss: float = 0.0      # sum of the prequential losses
    regret: float = 0.0               # windowed regret (0 without regret tracking)
    mistakes: int = 0                 # classification: sign(p) != y
    truncation_error_bound: float = 0.0
    regret_examples: int = 0          # the examples the last regret computation covers
    regret_at_step: int = 0           # the step it was computed at
    rho: float = 0.0                  # hinge, novelty: the margin now
    epsilon: float = 0.0              # epsilon-insensitive: the tube now
    offset: float = 0.0               # b now (config.offset)
    terms_removed: int = 0            # by the budget and drop_below
    regret_duality_gap: float = 0.0
    dictionary_size: int = 0          # KRLS tracker
    bases_pruned: int = 0             # KRLS tracker
    noise_variance: float = 0.0       # KRLS tracker, in the labels' units
    signal_power: float = 0.0         # KRLS tracker
    candidates: List[Candidate] = field(default_factory=list)  # a selection's
    champion: int = 0                 # a selection's champion, an index into candidates
    champion_changes: int = 0
    # Delayed feedback (a Predict's remember, then Label):
    events_pending: int = 0           # remembered events awaiting a label
    labels_applied: int = 0
    events_expired: int = 0           # waits that ended without a label
    labels_duplicate: int = 0         # labels for events labelled before
    served_loss: float = 0.0          # sum of the losses of the predictions served
    served_labels: int = 0            # the labels it sums over
    # A multi-class model's classes in the order learned: the columns of its scores.
    classes: List[str] = field(default_factory=list)

    @property
    def average_loss(self) -> float:
        """cumulative_loss / steps (0 before the first example)."""
        return self.cumulative_loss / self.steps if self.steps else 0.0

    @staticmethod
    def from_proto(stats: pb.ModelStats) -> "ModelStats":
        """The dataclass of a ModelStats message."""
        candidates = [
            Candidate(config=c.config, status=pb.CandidateStatus.Name(c.status), steps=c.steps,
                      cumulative_loss=c.cumulative_loss, recent_loss=c.recent_loss,
                      started_at=c.started_at, serving=c.serving)
            for c in stats.candidates]
        return ModelStats(
            steps=stats.steps, expansion_size=stats.expansion_size,
            cumulative_loss=stats.cumulative_loss, regret=stats.regret,
            mistakes=stats.mistakes, truncation_error_bound=stats.truncation_error_bound,
            regret_examples=stats.regret_examples, regret_at_step=stats.regret_at_step,
            rho=stats.rho, epsilon=stats.epsilon, offset=stats.offset,
            terms_removed=stats.terms_removed, regret_duality_gap=stats.regret_duality_gap,
            dictionary_size=stats.dictionary_size, bases_pruned=stats.bases_pruned,
            noise_variance=stats.noise_variance, signal_power=stats.signal_power,
            candidates=candidates, champion=stats.champion,
            champion_changes=stats.champion_changes, events_pending=stats.events_pending,
            labels_applied=stats.labels_applied, events_expired=stats.events_expired,
            labels_duplicate=stats.labels_duplicate, served_loss=stats.served_loss,
            served_labels=stats.served_labels, classes=list(stats.classes))


@dataclass(frozen=True)
class ModelInfo:
    """A model's name, config and statistics (GetModel, ListModels, CreateModel)."""

    tenant: str
    model: str
    config: pb.ModelConfig
    stats: ModelStats

    @staticmethod
    def from_proto(info: pb.ModelInfo) -> "ModelInfo":
        """The dataclass of a ModelInfo message."""
        return ModelInfo(tenant=info.ref.tenant, model=info.ref.model, config=info.config,
                         stats=ModelStats.from_proto(info.stats))


@dataclass(frozen=True)
class ObserveResult:
    """What observe() returns: per example, the prediction the model made before learning
    it (prequential) and its loss; then the model's steps and stored terms."""

    predictions: FloatArray
    losses: FloatArray
    steps: int
    expansion_size: int
    # observe_classes(): per example, the class it predicted before learning it ("" for
    # an example that came before any class was known); empty from observe().
    predicted_classes: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class Prediction:
    """predict_details(): the predictions, and per input, for a novelty model whether it
    is a novelty (else empty) and for a KRLS tracker the predictive variance (else empty).
    A multi-class model's (else empty): per input its predicted class ("" before the model
    knew any; the prediction is then 0, else that class's score), class_scores of shape
    (n, K) in the order of ModelStats.classes (K the classes known when the last input was
    predicted; a row predicted before a class joined has 0 for it, the score a class
    unknown to that model has), and for the softmax loss probabilities of the same shape
    (each row sums to 1; a row of no known class is all 0)."""

    predictions: FloatArray
    novel: BoolArray
    variances: FloatArray
    predicted_classes: List[str] = field(default_factory=list)
    class_scores: FloatArray = field(default_factory=lambda: np.empty((0, 0)))
    probabilities: FloatArray = field(default_factory=lambda: np.empty((0, 0)))


@dataclass(frozen=True)
class AckedBatch:
    """One acknowledgement of an ObserveStream: `count` examples from the stream's
    example `first` (0-based, in the order they were added) are applied and durable.
    predictions and losses hold theirs (the first 100,000 of a longer stream); both are
    empty, and steps and expansion_size 0, when the server refused the stream part-way
    (a tenant being moved) and so acknowledged these without them."""

    first: int
    count: int
    predictions: FloatArray
    losses: FloatArray
    steps: int
    expansion_size: int
    # A multi-class model's prequential predicted classes, as the predictions.
    predicted_classes: List[str] = field(default_factory=list)


class LabelOutcome(enum.Enum):
    """What Label did with one label (okl.proto's LabelOutcome)."""

    APPLIED = 1     # learned now, as an Observe of the remembered input
    DUPLICATE = 2   # the event was labelled before (or earlier in the same call): the
                    # first label won and this one changed nothing
    UNKNOWN = 3     # no such event for this model, or its wait had ended


@dataclass(frozen=True)
class Remembered:
    """What remember() returns: per input, in order, the prediction served and the id of
    the event it is remembered under (the caller's, or made by the server: 33 to 48
    hexadecimal digits). Label the event with Model.label(event_ids, y) when its label arrives."""

    predictions: FloatArray
    event_ids: List[str]


@dataclass(frozen=True)
class LabelResult:
    """What label() returns: each label's outcome, in order; per APPLIED label, in order,
    the prediction the model made before learning it (prequential, as Observe's) and its
    loss; and the model's steps after the labels."""

    outcomes: List[LabelOutcome]
    predictions: FloatArray
    losses: FloatArray
    steps: int

    @property
    def applied(self) -> int:
        """How many labels were APPLIED (learned by this call)."""
        return sum(1 for o in self.outcomes if o is LabelOutcome.APPLIED)

    @property
    def duplicates(self) -> int:
        """How many labels were DUPLICATE (their events had been labelled before)."""
        return sum(1 for o in self.outcomes if o is LabelOutcome.DUPLICATE)

    @property
    def unknown(self) -> int:
        """How many labels were UNKNOWN (no such event, or its wait had ended)."""
        return sum(1 for o in self.outcomes if o is LabelOutcome.UNKNOWN)
