#!/usr/bin/python3
"""Streams a CSV file into an okl model over gRPC, then prints predictions.

Run it with Debian's /usr/bin/python3 (python3-grpcio and python3-protobuf are importable
only there), against a running okl_server (scripts/run.sh starts one on 127.0.0.1:50051):

  /usr/bin/python3 client/python/okl_example.py data.csv
  /usr/bin/python3 client/python/okl_example.py --embedding=7 data/mg30.dat

The input is CSV, one example per line, x1,...,xd,y (d is taken from the first row), or
with --embedding=L a time series, one value per line, turned into examples on the fly:
input [s_n, ..., s_{n-L+1}] (zeros before the start), target s_{n+1}. The example creates
a model (gaussian kernel, squared loss, a budget), streams the rows in batches over
ObserveStream (one stream per --batches_per_stream messages: each stream's response
acknowledges its examples with their prequential predictions and losses), and prints a
summary and then the model's predictions for the last --predict rows, as CSV:

  row,target,prediction
  4994,0.8412,0.84105170349081326

The gRPC stubs are generated from proto/okl/v1/okl.proto at start-up into a temporary
directory (never into the tree) with protoc and grpc_python_plugin, unless --stubs names
a directory that holds them (okl/v1/okl_pb2.py and okl/v1/okl_pb2_grpc.py).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def generate_stubs(proto_dir, protoc, plugin, out_dir):
    """Generates the okl.v1 Python messages and gRPC stubs into out_dir."""
    subprocess.run(
        [protoc, "-I" + proto_dir, "--python_out=" + out_dir, "--grpc_python_out=" + out_dir,
         "--plugin=protoc-gen-grpc_python=" + plugin, "okl/v1/okl.proto"],
        check=True)


def read_rows(path, embedding):
    """The examples of the file as (x, y) pairs: CSV rows, or an embedded series."""
    values = []
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                fields = [float(v) for v in line.split(",")]
            except ValueError:
                sys.exit("%s:%d: not a row of numbers: %r" % (path, number, line))
            if embedding:
                values.extend(fields)
            else:
                if len(fields) < 2:
                    sys.exit("%s:%d: a row needs inputs and a label" % (path, number))
                rows.append((fields[:-1], fields[-1]))
    if embedding:
        for n in range(len(values) - 1):
            x = [values[n - k] if n - k >= 0 else 0.0 for k in range(embedding)]
            rows.append((x, values[n + 1]))
    if not rows:
        sys.exit("%s: no examples" % path)
    dim = len(rows[0][0])
    for i, (x, _) in enumerate(rows):
        if len(x) != dim:
            sys.exit("%s: example %d has %d inputs, the first has %d"
                     % (path, i + 1, len(x), dim))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input", help="the CSV file (or series, with --embedding)")
    parser.add_argument("--server", default=os.environ.get("OKL_SERVER", "127.0.0.1:50051"))
    parser.add_argument("--tenant", default="python")
    parser.add_argument("--model", default="example")
    parser.add_argument("--embedding", type=int, default=0,
                        help="the input is a series: embed it with this many lags")
    parser.add_argument("--gamma", type=float, default=1.0, help="gaussian kernel width")
    parser.add_argument("--eta0", type=float, default=0.5, help="learning rate")
    parser.add_argument("--lambda", dest="lam", type=float, default=0.001,
                        help="regulariser")
    parser.add_argument("--max_terms", type=int, default=512, help="the budget")
    parser.add_argument("--batch", type=int, default=250, help="examples per message")
    parser.add_argument("--batches_per_stream", type=int, default=16)
    parser.add_argument("--predict", type=int, default=5,
                        help="print predictions for this many rows at the end")
    parser.add_argument("--replace", action="store_true",
                        help="delete a model of the same name first")
    parser.add_argument("--delete", action="store_true", help="delete the model at the end")
    parser.add_argument("--stubs", help="a directory with the generated stubs")
    parser.add_argument("--proto_dir", default=os.path.join(HERE, "..", "..", "proto"))
    parser.add_argument("--protoc", default=shutil.which("protoc") or "/usr/bin/protoc")
    parser.add_argument("--grpc_python_plugin",
                        default=(shutil.which("grpc_python_plugin")
                                 or "/usr/bin/grpc_python_plugin"))
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per call")
    args = parser.parse_args()

    rows = read_rows(args.input, args.embedding)
    dim = len(rows[0][0])

    with tempfile.TemporaryDirectory(prefix="okl_stubs.") as generated:
        stubs = args.stubs
        if stubs is None:
            generate_stubs(args.proto_dir, args.protoc, args.grpc_python_plugin, generated)
            stubs = generated
        sys.path.insert(0, stubs)
        import grpc  # Debian's python3-grpcio
        from okl.v1 import okl_pb2 as pb
        from okl.v1 import okl_pb2_grpc as rpc

        with grpc.insecure_channel(args.server) as channel:
            stub = rpc.OnlineKernelLearningStub(channel)
            ref = pb.ModelRef(tenant=args.tenant, model=args.model)
            config = pb.ModelConfig(
                dim=dim,
                kernel=pb.KernelConfig(gaussian=pb.KernelConfig.Gaussian(gamma=args.gamma)),
                loss=pb.LossConfig(squared=pb.LossConfig.Squared()),
                learning_rate=pb.LearningRate(eta0=args.eta0,
                                              schedule=pb.LearningRate.CONSTANT),
                budget=pb.Budget(max_terms=args.max_terms, policy=pb.Budget.OLDEST),
                **{"lambda": args.lam})  # `lambda` is a Python keyword
            try:
                if args.replace:
                    try:
                        stub.DeleteModel(ref, timeout=args.timeout)
                    except grpc.RpcError as e:
                        if e.code() != grpc.StatusCode.NOT_FOUND:
                            raise
                stub.CreateModel(pb.CreateModelRequest(ref=ref, config=config),
                                 timeout=args.timeout)
                print("created %s/%s: dim %d, gaussian kernel (gamma %g), squared loss, "
                      "budget %d" % (args.tenant, args.model, dim, args.gamma, args.max_terms))

                # ObserveStream: the first message names the model; each stream's one
                # response acknowledges all of its examples (applied and durable).
                losses = []
                per_stream = args.batch * args.batches_per_stream
                response = None
                for start in range(0, len(rows), per_stream):
                    chunk = rows[start:start + per_stream]

                    def messages(chunk=chunk):
                        for i in range(0, len(chunk), args.batch):
                            request = pb.ObserveRequest(examples=[
                                pb.Example(x=pb.Vector(values=x), y=y)
                                for x, y in chunk[i:i + args.batch]])
                            if i == 0:
                                request.ref.CopyFrom(ref)
                            yield request

                    response = stub.ObserveStream(messages(), timeout=args.timeout)
                    losses.extend(response.losses)
                tenth = max(1, len(losses) // 10)
                print("streamed %d examples: %d steps, %d terms; mean loss %.4g "
                      "(first tenth %.4g, last tenth %.4g)"
                      % (len(rows), response.steps, response.expansion_size,
                         sum(losses) / len(losses), sum(losses[:tenth]) / tenth,
                         sum(losses[-tenth:]) / tenth))

                count = min(args.predict, len(rows))
                last = rows[len(rows) - count:]
                predictions = stub.Predict(
                    pb.PredictRequest(ref=ref, inputs=[pb.Vector(values=x) for x, _ in last]),
                    timeout=args.timeout).predictions
                print("row,target,prediction")
                for i, ((_, y), p) in enumerate(zip(last, predictions)):
                    print("%d,%r,%r" % (len(rows) - count + i + 1, y, p))
                if args.delete:
                    stub.DeleteModel(ref, timeout=args.timeout)
            except grpc.RpcError as e:
                # One line, as the okl tool writes it: the code's name and the message.
                sys.exit("okl_example: %s: %s" % (e.code().name, e.details()))


if __name__ == "__main__":
    main()
