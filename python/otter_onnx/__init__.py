"""otter-onnx: ONNX Runtime's inference and training Python APIs (and sclblonnx's graph editing) over libotter."""
from ._lib import (InvalidArgumentError, InvalidModelError, NotFoundError, NotSupportedError, OtterError,
                   OtterIOError, OtterMemoryError)
from .inference import InferenceSession, NodeArg

__version__ = "0.1.0"

__all__ = ["InferenceSession", "NodeArg", "OtterError", "InvalidModelError", "InvalidArgumentError", "OtterIOError",
           "OtterMemoryError", "NotSupportedError", "NotFoundError", "__version__"]
