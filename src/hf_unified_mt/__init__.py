# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""hf-unified-mt: research architectures for neural machine translation as Hugging Face models.

Importing the package registers every configuration and model with the Auto classes, marks them for
`register_for_auto_class` (so saved checkpoints carry `auto_map` and their code and load with
`trust_remote_code=True` where the package is not installed), and registers the translation pipeline. It imports the
flat model folder and `presets` only: the training code, the Trainer callbacks included, is `hf_unified_mt.training`
(e.g. `hf_unified_mt.training.callbacks.MultiUnitLossLoggingCallback`).
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from .cache_mt import StatefulDecoderCacheLayer
from .configuration_deep_transformer import DeepTransformerConfig
from .configuration_mt_common import MTConfig
from .configuration_multi_encoder_transformer import MultiEncoderTransformerConfig
from .configuration_multi_pass_transformer import MultiPassTransformerConfig
from .configuration_multi_unit_transformer import MultiUnitTransformerConfig
from .configuration_unified_transformer import UnifiedTransformerConfig
from .modeling_deep_transformer import (
    DeepTransformerForConditionalGeneration,
    DeepTransformerModel,
    DeepTransformerPreTrainedModel,
)
from .modeling_mt_common import shift_tokens_right
from .modeling_multi_encoder_transformer import (
    MultiEncoderTransformerForConditionalGeneration,
    MultiEncoderTransformerModel,
    MultiEncoderTransformerPreTrainedModel,
)
from .modeling_multi_pass_transformer import (
    MultiPassTransformerForConditionalGeneration,
    MultiPassTransformerModel,
    MultiPassTransformerPreTrainedModel,
)
from .modeling_multi_unit_transformer import (
    MultiUnitTransformerForConditionalGeneration,
    MultiUnitTransformerModel,
    MultiUnitTransformerPreTrainedModel,
)
from .modeling_unified_transformer import (
    UnifiedTransformerForConditionalGeneration,
    UnifiedTransformerModel,
    UnifiedTransformerPreTrainedModel,
)
from .pipeline_translation import TranslationPipeline, register_translation_pipeline
from .presets import PRESETS, available_presets, get_config


__version__ = "0.1.0"

# (config class, base model class, model class with the LM head), one entry per architecture.
ARCHITECTURES = {
    "unified_transformer": (
        UnifiedTransformerConfig,
        UnifiedTransformerModel,
        UnifiedTransformerForConditionalGeneration,
    ),
    "multi_encoder_transformer": (
        MultiEncoderTransformerConfig,
        MultiEncoderTransformerModel,
        MultiEncoderTransformerForConditionalGeneration,
    ),
    "multi_pass_transformer": (
        MultiPassTransformerConfig,
        MultiPassTransformerModel,
        MultiPassTransformerForConditionalGeneration,
    ),
    "deep_transformer": (
        DeepTransformerConfig,
        DeepTransformerModel,
        DeepTransformerForConditionalGeneration,
    ),
    "multi_unit_transformer": (
        MultiUnitTransformerConfig,
        MultiUnitTransformerModel,
        MultiUnitTransformerForConditionalGeneration,
    ),
}


def _register() -> None:
    for model_type, (config_class, model_class, lm_class) in ARCHITECTURES.items():
        AutoConfig.register(model_type, config_class, exist_ok=True)
        AutoModel.register(config_class, model_class, exist_ok=True)
        AutoModelForSeq2SeqLM.register(config_class, lm_class, exist_ok=True)
        config_class.register_for_auto_class()
        model_class.register_for_auto_class("AutoModel")
        lm_class.register_for_auto_class("AutoModelForSeq2SeqLM")
    register_translation_pipeline()


_register()


__all__ = [
    "ARCHITECTURES",
    "DeepTransformerConfig",
    "DeepTransformerForConditionalGeneration",
    "DeepTransformerModel",
    "DeepTransformerPreTrainedModel",
    "MTConfig",
    "MultiEncoderTransformerConfig",
    "MultiEncoderTransformerForConditionalGeneration",
    "MultiEncoderTransformerModel",
    "MultiEncoderTransformerPreTrainedModel",
    "MultiPassTransformerConfig",
    "MultiPassTransformerForConditionalGeneration",
    "MultiPassTransformerModel",
    "MultiPassTransformerPreTrainedModel",
    "MultiUnitTransformerConfig",
    "MultiUnitTransformerForConditionalGeneration",
    "MultiUnitTransformerModel",
    "MultiUnitTransformerPreTrainedModel",
    "PRESETS",
    "StatefulDecoderCacheLayer",
    "TranslationPipeline",
    "UnifiedTransformerConfig",
    "UnifiedTransformerForConditionalGeneration",
    "UnifiedTransformerModel",
    "UnifiedTransformerPreTrainedModel",
    "available_presets",
    "get_config",
    "register_translation_pipeline",
    "shift_tokens_right",
]
