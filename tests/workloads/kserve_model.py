"""A model served by KServe's own Python model server (the ``kserve`` package from PyPI,
run from its own virtual environment, ``make setup`` makes ``.venv-kserve``): a fixed
linear layer, float32, over the KServe V2 (Open Inference) protocol on ``--port``.
Loading takes ``--load-s`` seconds, as loading weights does."""

import argparse
import time
from typing import Any

import numpy as np
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer


class Linear(Model):
    def __init__(self, name: str, load_s: float) -> None:
        super().__init__(name)
        self.load_s = load_s
        self.weights: np.ndarray | None = None

    def load(self) -> bool:
        time.sleep(self.load_s)
        self.weights = np.random.default_rng(7).standard_normal((16, 8)).astype(np.float32)
        self.ready = True
        return True

    def predict(self, payload: InferRequest, headers: Any = None,
                response_headers: Any = None) -> InferResponse:
        assert self.weights is not None
        inputs = payload.inputs[0].as_numpy().astype(np.float32).reshape(-1, 16)
        result = inputs @ self.weights
        output = InferOutput(name="output-0", shape=list(result.shape), datatype="FP32")
        output.set_data_from_numpy(result)
        return InferResponse(response_id=payload.id or "", model_name=self.name,
                             infer_outputs=[output])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--load-s", type=float, default=1.0)
    args = parser.parse_args()
    model = Linear("linear", args.load_s)
    model.load()
    ModelServer(http_port=args.port, grpc_port=args.grpc_port, enable_grpc=False,
                enable_latency_logging=False).start([model])


if __name__ == "__main__":
    main()
