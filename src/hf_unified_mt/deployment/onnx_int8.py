# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""ONNX Runtime's int8 quantisation of one exported graph, in the modes of `onnx_format.INT8_QUANTIZATION`
(`quantize_onnx_int8`), with its quantisers kept from changing the process's logging (`_quiet_quantizers`).
ONNX Runtime is imported when a graph is quantised. Adding the int8 graphs to an export folder, under its lock and
recorded in its manifest, is `onnx_folder.add_int8_graphs`, which calls this.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from pathlib import Path

from .onnx_format import BUILD_FOLDER, INT8_QUANTIZATION, int8_mode


@contextlib.contextmanager
def _quiet_quantizers():
    """ONNX Runtime's quantisers log a notice at INFO for every tensor or node they leave in float (integer and boolean
    tensors, matmuls without constant weights) to the root logger, held at ERROR here; and `matmul_nbits_quantizer`
    calls `logging.basicConfig(level=INFO)` when it is imported, which would print every later INFO record of the
    process: while nothing handles the root logger, a placeholder handler makes that call do nothing."""
    root = logging.getLogger()
    level = root.level
    placeholder = logging.NullHandler() if not root.handlers else None
    if placeholder is not None:
        root.addHandler(placeholder)
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)
        if placeholder is not None:
            root.removeHandler(placeholder)


def quantize_onnx_int8(source: str | os.PathLike, target: str | os.PathLike, mode: str = "dynamic") -> None:
    """ONNX Runtime's int8 quantisation of a graph, in `mode` (`INT8_QUANTIZATION`): "dynamic", the weight matrices
    of the matmuls in int8 and their inputs quantised per tensor on the fly (the ONNX counterpart of
    `inference.quantize_int8`), or "per_row", `MatMulNBits` with 8-bit weights and inputs quantised per row. The graph
    is first optimised by ONNX Runtime (`quant_pre_process`), which folds the exporter's weight transposes into the
    initialisers that the quantisers look for."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    mode = int8_mode(mode)
    target = Path(target)
    # ONNX Runtime writes its files by name: into a new folder beside `target`, renamed into place when complete
    with _quiet_quantizers(), tempfile.TemporaryDirectory(dir=target.parent, prefix=BUILD_FOLDER + ".") as scratch:
        prepared, quantized = Path(scratch) / "prepared.onnx", Path(scratch) / target.name
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
        if mode == "dynamic":
            quantize_dynamic(str(prepared), str(quantized), weight_type=QuantType.QInt8)
        else:
            from onnxruntime.quantization.matmul_nbits_quantizer import (
                DefaultWeightOnlyQuantConfig,
                MatMulNBitsQuantizer,
            )

            settings = INT8_QUANTIZATION[mode]
            config = DefaultWeightOnlyQuantConfig(
                bits=settings["bits"], block_size=settings["block_size"], accuracy_level=settings["accuracy_level"]
            )
            quantizer = MatMulNBitsQuantizer(str(prepared), algo_config=config)
            quantizer.process()
            quantizer.model.save_model_to_file(str(quantized))
        os.replace(quantized, target)
