"""The linear layer of ``tests/workloads/kserve_model.py`` as an MLServer runtime (the
``mlserver`` package from PyPI, in its own virtual environment ``.venv-mlserver``, which
``make setup`` builds): float32, 16 inputs to 8 outputs, over the V2 (Open Inference)
protocol; loading takes a second, as loading weights does."""

import asyncio

import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class Linear(MLModel):
    async def load(self) -> bool:
        await asyncio.sleep(1.0)
        self.weights = np.random.default_rng(7).standard_normal((16, 8)).astype(np.float32)
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        inputs = NumpyCodec.decode_input(payload.inputs[0]).astype(np.float32).reshape(-1, 16)
        result = inputs @ self.weights
        return InferenceResponse(model_name=self.name,
                                 outputs=[NumpyCodec.encode_output("output-0", result)])
