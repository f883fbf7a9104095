"""The client library's retry rules, against a scripted okl.v1 server in this process.

okl_server refuses a write with UNAVAILABLE and the trailer okl-batches-applied: N when
its tenant is being moved (or it starts or drains); a proxy's GOAWAY fails a call that
never reached the server. The fake server below does each on cue, applies what it
accepts into one list, and records every call's metadata, so the tests can check, as
client/client.h states the rules: reads are retried on UNAVAILABLE up to max_attempts;
a write only when nothing was applied, until the deadline; CreateModel and DeleteModel
never; a refused stream's applied prefix is acknowledged and the rest sent again, so
every example is applied once and in order; and every call carries x-okl-tenant. Of
delayed feedback: a remembering Predict is a write (sent again only when nothing was
applied), a Label is retried as a read (the first label wins), and both are split over
max_batch in order.
"""

import collections
import threading
import time
from concurrent import futures

import grpc
import numpy as np
import pytest

import okl

pb = okl.pb
TENANT = "acme"


class Refuse:
    """An outcome: UNAVAILABLE after applying `applied` messages, with that trailer (None:
    no trailer), or `code` instead of UNAVAILABLE."""

    def __init__(self, applied=0, trailer=True, details="tenant being moved",
                 code=grpc.StatusCode.UNAVAILABLE):
        self.applied, self.trailer, self.details, self.code = applied, trailer, details, code


class Stall:
    """An outcome: answer after `seconds`."""

    def __init__(self, seconds):
        self.seconds = seconds


class AnswerPart:
    """An outcome of ObserveStream: apply and answer for the first `messages` only."""

    def __init__(self, messages):
        self.messages = messages


class FakeServer:
    """okl.v1.OnlineKernelLearning with scripted outcomes: script[method] is a list of
    outcomes taken one per call (empty: succeed)."""

    def __init__(self):
        self.script = collections.defaultdict(list)
        self.calls = []        # (method, metadata dict)
        self.applied = []      # every label applied, in order
        self.remembered = {}   # event id: its input's first value
        self.labelled = []     # every event id labelled, in order
        self.lock = threading.Lock()
        service = pb.DESCRIPTOR.services_by_name["OnlineKernelLearning"]
        handlers = {}
        for name, implementation in (
                ("Observe", self.observe), ("ObserveStream", self.observe_stream),
                ("Predict", self.predict), ("GetModel", self.get_model),
                ("CreateModel", self.create_model), ("DeleteModel", self.delete_model),
                ("Label", self.label)):
            method = service.methods_by_name[name]
            kind = (grpc.stream_unary_rpc_method_handler if method.client_streaming
                    else grpc.unary_unary_rpc_method_handler)
            handlers[name] = kind(implementation, getattr(pb, method.input_type.name).FromString,
                                  getattr(pb, method.output_type.name).SerializeToString)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("okl.v1.OnlineKernelLearning", handlers),))
        self.address = "127.0.0.1:%d" % self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def stop(self):
        self.server.stop(grace=None)

    def _next(self, method, context):
        with self.lock:
            self.calls.append((method, dict(context.invocation_metadata())))
            return self.script[method].pop(0) if self.script[method] else None

    def count(self, method):
        return sum(1 for m, _ in self.calls if m == method)

    @staticmethod
    def _refuse(outcome, context):
        if outcome.trailer:
            context.set_trailing_metadata((("okl-batches-applied", str(outcome.applied)),))
        context.abort(outcome.code, outcome.details)

    def _apply(self, examples):
        with self.lock:
            self.applied.extend(example.y for example in examples)
            return len(self.applied)

    def observe(self, request, context):
        outcome = self._next("Observe", context)
        if outcome is not None:
            self._refuse(outcome, context)
        steps = self._apply(request.examples)
        labels = [e.y for e in request.examples]
        return pb.ObserveResponse(predictions=labels, losses=[0.0] * len(labels), steps=steps)

    def observe_stream(self, requests, context):
        outcome = self._next("ObserveStream", context)
        labels = []
        steps = 0
        for index, request in enumerate(requests):
            assert request.ref.model == "m" if index == 0 else not request.HasField("ref")
            if isinstance(outcome, Refuse) and index == outcome.applied:
                self._refuse(outcome, context)
            if isinstance(outcome, AnswerPart) and index == outcome.messages:
                break
            steps = self._apply(request.examples)
            labels.extend(e.y for e in request.examples)
        return pb.ObserveResponse(predictions=labels, losses=[0.0] * len(labels), steps=steps)

    def predict(self, request, context):
        outcome = self._next("Predict", context)
        if isinstance(outcome, Stall):
            time.sleep(outcome.seconds)
        elif outcome is not None:
            self._refuse(outcome, context)
        response = pb.PredictResponse(predictions=[v.values[0] for v in request.inputs])
        if request.HasField("remember"):
            with self.lock:
                ids = list(request.remember.event_ids) or [
                    "made-%d" % (len(self.remembered) + i) for i in range(len(request.inputs))]
                for event_id, vector in zip(ids, request.inputs):
                    self.remembered[event_id] = vector.values[0]
            response.event_ids.extend(ids)
        return response

    def label(self, request, context):
        outcome = self._next("Label", context)
        if outcome is not None:
            self._refuse(outcome, context)
        response = pb.LabelResponse()
        with self.lock:
            for label in request.labels:
                if label.event_id not in self.remembered:
                    response.outcomes.append(pb.LABEL_UNKNOWN)
                elif label.event_id in self.labelled:
                    response.outcomes.append(pb.LABEL_DUPLICATE)
                else:
                    self.labelled.append(label.event_id)
                    self.applied.append(label.y)
                    response.outcomes.append(pb.LABEL_APPLIED)
                    response.predictions.append(self.remembered[label.event_id])
                    response.losses.append(0.0)
            response.steps = len(self.applied)
        return response

    def get_model(self, request, context):
        self._next("GetModel", context)
        return pb.ModelInfo(ref=request, config=pb.ModelConfig(dim=1),
                            stats=pb.ModelStats(steps=len(self.applied)))

    def create_model(self, request, context):
        outcome = self._next("CreateModel", context)
        if outcome is not None:
            self._refuse(outcome, context)
        return pb.ModelInfo(ref=request.ref, config=request.config)

    def delete_model(self, request, context):
        outcome = self._next("DeleteModel", context)
        if outcome is not None:
            self._refuse(outcome, context)
        return pb.DeleteModelResponse()


@pytest.fixture
def fake():
    server = FakeServer()
    yield server
    server.stop()


@pytest.fixture
def model(fake):
    client = okl.Client(fake.address, token="secret-token", deadline=5, initial_backoff=0.01,
                        max_backoff=0.05)
    yield client.model(TENANT, "m")
    client.close()


def column(values):
    return np.asarray(values, dtype=np.float64).reshape(-1, 1)


def test_a_write_refused_with_nothing_applied_is_sent_again(fake, model):
    fake.script["Observe"] = [Refuse(), Refuse(trailer=False, details="GOAWAY received")]
    result = model.observe(column([1, 2, 3]), [1.0, 2.0, 3.0])
    assert fake.applied == [1.0, 2.0, 3.0] and fake.count("Observe") == 3
    assert result.predictions.tolist() == [1.0, 2.0, 3.0] and result.steps == 3
    # Every attempt carried the tenant and the token.
    for _, metadata in fake.calls:
        assert metadata["x-okl-tenant"] == TENANT
        assert metadata["authorization"] == "Bearer secret-token"


@pytest.mark.parametrize("refusal", [Refuse(trailer=False), Refuse(applied=1)])
def test_a_write_that_may_have_been_applied_is_not_sent_again(fake, model, refusal):
    fake.script["Observe"] = [refusal]
    with pytest.raises(okl.Unavailable, match="tenant being moved") as caught:
        model.observe(column([1]), [1.0])
    assert fake.count("Observe") == 1
    if refusal.trailer:
        assert caught.value.trailers == {"okl-batches-applied": "1"}


def test_a_write_refused_past_the_deadline_fails(fake):
    client = okl.Client(fake.address, deadline=0.3, initial_backoff=0.02, max_backoff=0.05)
    fake.script["Observe"] = [Refuse()] * 1000
    with pytest.raises(okl.Unavailable):
        client.model(TENANT, "m").observe(column([1]), [1.0])
    assert 2 <= fake.count("Observe") < 1000 and fake.applied == []


def test_reads_are_retried_up_to_max_attempts(fake, model):
    fake.script["Predict"] = [Refuse(trailer=False)] * 2
    assert model.predict(column([4.0])).tolist() == [4.0]
    assert fake.count("Predict") == 3
    fake.script["Predict"] = [Refuse(trailer=False)] * 10
    with pytest.raises(okl.Unavailable):
        model.predict(column([4.0]))
    assert fake.count("Predict") == 6
    five = okl.Client(fake.address, max_attempts=5, initial_backoff=0.01)
    fake.script["Predict"] = [Refuse(trailer=False)] * 4
    assert five.model(TENANT, "m").predict(column([5.0])).tolist() == [5.0]
    fake.script["Predict"] = [Refuse(code=grpc.StatusCode.INVALID_ARGUMENT, details="bad")]
    with pytest.raises(okl.InvalidArgument, match="bad"):
        five.model(TENANT, "m").predict(column([5.0]))
    assert fake.count("Predict") == 6 + 5 + 1


def test_a_call_past_its_deadline_is_deadline_exceeded_and_not_retried(fake, model):
    fake.script["Predict"] = [Stall(1.0)]
    with pytest.raises(okl.DeadlineExceeded):
        model.client.with_deadline(0.2).model(TENANT, "m").predict(column([1.0]))
    assert fake.count("Predict") == 1


def test_create_and_delete_are_never_retried(fake, model):
    fake.script["CreateModel"] = [Refuse()]
    with pytest.raises(okl.Unavailable):
        model.client.create_model(TENANT, "m", {"dim": 1})
    fake.script["DeleteModel"] = [Refuse()]
    with pytest.raises(okl.Unavailable):
        model.delete()
    assert fake.count("CreateModel") == 1 and fake.count("DeleteModel") == 1


def test_a_refused_stream_sends_the_rest_again_and_applies_each_example_once(fake, model):
    fake.script["ObserveStream"] = [Refuse(applied=2), Refuse(applied=0), AnswerPart(1)]
    acks = []
    labels = np.arange(1, 41, dtype=np.float64)
    with model.stream(batch_size=5, batches_per_stream=4, on_ack=acks.append) as stream:
        assert (stream.dim, stream.steps_at_open) == (1, 0)
        stream.observe(column(labels), labels)
    assert fake.applied == labels.tolist()
    assert stream.acknowledged == stream.added == 40
    assert stream.streams_refused == 3
    # The refusal acknowledged messages 0-1 without predictions; then the rest came back.
    assert [(a.first, a.count, a.predictions.shape[0]) for a in acks] == [
        (0, 10, 0), (10, 5, 5), (15, 5, 5), (20, 20, 20)]
    assert np.concatenate([a.predictions for a in acks]).tolist() == labels[10:].tolist()
    for method, metadata in fake.calls:
        assert metadata["x-okl-tenant"] == TENANT, method


def test_a_failed_stream_fails_for_good_saying_which_examples_it_carried(fake, model):
    fake.script["ObserveStream"] = [
        Refuse(applied=1, code=grpc.StatusCode.INVALID_ARGUMENT, details="examples[2]: bad")]
    stream = model.stream(batch_size=3, batches_per_stream=10)
    stream.observe(column(range(9)), np.arange(9.0))
    with pytest.raises(okl.InvalidArgument) as caught:
        stream.flush()
    assert caught.value.details == "examples[2]: bad"
    assert "the failed stream carried examples 0 to 8" in str(caught.value)
    assert "0 are acknowledged" in str(caught.value)
    assert stream.applied_since_open() == 3 == len(fake.applied)
    with pytest.raises(okl.InvalidArgument):
        stream.observe(column([1]), [1.0])
    with pytest.raises(okl.InvalidArgument):
        stream.close()
    assert stream.error is caught.value


def test_a_stream_refused_past_the_deadline_fails(fake):
    client = okl.Client(fake.address, deadline=0.3, initial_backoff=0.02, max_backoff=0.05)
    fake.script["ObserveStream"] = [Refuse()] * 1000
    with pytest.raises(okl.Unavailable, match="for longer than the deadline"):
        with client.model(TENANT, "m").stream(batch_size=2) as stream:
            stream.observe(column([1, 2, 3]), [1.0, 2.0, 3.0])
    assert fake.applied == []


def test_a_large_observe_streams_and_survives_a_refusal(fake):
    client = okl.Client(fake.address, max_batch=4, initial_backoff=0.01)
    fake.script["ObserveStream"] = [Refuse(applied=1)]
    labels = np.arange(10.0)
    result = client.model(TENANT, "m").observe(column(labels), labels)
    assert fake.applied == labels.tolist()
    # The refusal acknowledged the first message (4 examples) without predictions.
    assert np.isnan(result.predictions[:4]).all()
    assert result.predictions[4:].tolist() == labels[4:].tolist()
    assert result.steps == 10


def test_a_stream_checks_the_model_dim_and_its_own_state(fake, model):
    stream = model.stream()
    with pytest.raises(okl.InvalidArgument, match="X has 2 columns but the model's dim is 1"):
        stream.observe(np.ones((3, 2)), np.ones(3))
    with pytest.raises(okl.InvalidArgument, match="x must be one example"):
        stream.add(np.ones((1, 1)), 1.0)
    stream.add([7.0], 7.0)
    stream.close()
    assert fake.applied == [7.0]
    with pytest.raises(okl.FailedPrecondition, match="after close"):
        stream.add([1.0], 1.0)
    with pytest.raises(okl.InvalidArgument, match="must be at least 1"):
        model.stream(batch_size=0)


def test_a_remembering_predict_is_sent_again_only_when_nothing_was_applied(fake, model):
    fake.script["Predict"] = [Refuse(), Refuse(trailer=False, details="GOAWAY received")]
    remembered = model.remember(column([1.0, 2.0]))
    assert remembered.event_ids == ["made-0", "made-1"] and fake.count("Predict") == 3
    assert remembered.predictions.tolist() == [1.0, 2.0]
    # Unlike a plain predict: an UNAVAILABLE that may have reached the model is final.
    for refusal in (Refuse(trailer=False), Refuse(applied=1)):
        fake.script["Predict"] = [refusal]
        with pytest.raises(okl.Unavailable):
            model.remember(column([3.0]), event_ids=["mine"])
    assert fake.count("Predict") == 5 and sorted(fake.remembered) == ["made-0", "made-1"]


def test_a_label_is_retried_on_unavailable(fake, model):
    model.remember(column([1.0, 2.0]), event_ids=["a", "b"])
    fake.script["Label"] = [Refuse(trailer=False), Refuse(applied=1)]
    result = model.label(["b", "a", "b", "c"], [20.0, 10.0, 30.0, 40.0])
    assert fake.count("Label") == 3 and fake.applied == [20.0, 10.0]
    assert result.outcomes == [okl.LabelOutcome.APPLIED, okl.LabelOutcome.APPLIED,
                               okl.LabelOutcome.DUPLICATE, okl.LabelOutcome.UNKNOWN]
    assert result.predictions.tolist() == [2.0, 1.0] and result.steps == 2
    fake.script["Label"] = [Refuse(trailer=False)] * 3
    with pytest.raises(okl.Unavailable):
        model.label(["a"], [1.0])
    assert fake.count("Label") == 6


def test_remember_and_label_split_over_max_batch_in_order(fake):
    client = okl.Client(fake.address, max_batch=2, initial_backoff=0.01)
    model = client.model(TENANT, "m")
    remembered = model.remember(column(range(5)))
    assert fake.count("Predict") == 3
    assert remembered.event_ids == ["made-%d" % i for i in range(5)]
    assert remembered.predictions.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    result = model.label(remembered.event_ids[::-1], [4.0, 3.0, 2.0, 1.0, 0.0])
    assert fake.count("Label") == 3 and fake.labelled == remembered.event_ids[::-1]
    assert result.applied == 5 and result.predictions.tolist() == [4.0, 3.0, 2.0, 1.0, 0.0]
    assert result.steps == 5
    # A request failing part-way: the rows before it stay remembered, and the error says
    # which, with their predictions and ids.
    fake.script["Predict"] = [None, Refuse(code=grpc.StatusCode.RESOURCE_EXHAUSTED,
                                           details="too many pending events")]
    with pytest.raises(okl.ResourceExhausted, match="rows 0 to 1 of 5 were remembered") \
            as caught:
        model.remember(column(range(10, 15)), event_ids=["x%d" % i for i in range(5)])
    assert caught.value.details == "too many pending events"
    assert caught.value.remembered.event_ids == ["x0", "x1"]
    assert caught.value.remembered.predictions.tolist() == [10.0, 11.0]
    fake.script["Label"] = [None, Refuse(code=grpc.StatusCode.INTERNAL, details="broke")]
    with pytest.raises(okl.Internal, match="labels 0 to 1 of 3 were answered"):
        model.label(["x0", "x1", "x0"], [1.0, 1.0, 1.0])
    client.close()
