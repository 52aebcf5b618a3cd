# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Deep Transformer with depth-scaled initialization and merged attention (Zhang, Titov & Sennrich 2019,
"Improving Deep Transformer with Depth-Scaled Initialization and Merged Attention").

What the paper changes, and where it lives:

* DS-Init (Eq. 15), this architecture's default `init_law`: the weight matrices of layer l are drawn with a variance
  that shrinks with l (`ds_init_law_` in `initialization_mt.py`, which every architecture may use);
* the decoder's first sublayer, selected by `config.decoder_attention_type`: standard self-attention, the original
  average attention network, merged attention (Eq. 16-17, the paper's proposal and this architecture's default) or
  Table 3's variant 6 (`modeling_decoder_variants.py`, which every architecture with a Transformer-style decoder
  composes).

The encoder is the standard post-norm (or pre-norm, `normalize_before`) Transformer encoder of the shared core; source
and target embeddings are separate by default (§7.2).
"""

from torch import nn
from transformers.generation import GenerationMixin

from .configuration_deep_transformer import DeepTransformerConfig
from .configuration_mt_common import MTConfig
from .modeling_decoder_variants import VARIANT_LAYER_NAMES, decoder_layer, decoder_recorders
from .modeling_mt_common import (
    EncoderHiddenStates,
    MTAttention,
    MTDecoder,
    MTEncoder,
    MTEncoderLayer,
    MTForConditionalGeneration,
    MTModel,
    MTPreTrainedModel,
)


class DeepTransformerPreTrainedModel(MTPreTrainedModel):
    config: DeepTransformerConfig
    _no_split_modules = ["MTEncoderLayer", "MTDecoderLayer", *VARIANT_LAYER_NAMES]


class DeepTransformerEncoder(DeepTransformerPreTrainedModel, MTEncoder):
    """The standard Transformer encoder, post-norm (the paper's) or pre-norm."""

    _can_record_outputs = {"hidden_states": EncoderHiddenStates(MTEncoderLayer), "attentions": MTAttention}

    def build_layer(self, config: MTConfig, layer_idx: int) -> nn.Module:
        return MTEncoderLayer(config, layer_idx=layer_idx)


class DeepTransformerDecoder(DeepTransformerPreTrainedModel, MTDecoder):
    """The decoder whose first sublayer is `config.decoder_attention_type` (merged attention by default)."""

    _can_record_outputs = decoder_recorders()
    stacks_cross_attention_projections = True

    def build_layer(self, config: MTConfig, layer_idx: int) -> nn.Module:
        return decoder_layer(config, layer_idx)


class DeepTransformerModel(DeepTransformerPreTrainedModel, MTModel):
    encoder_class = DeepTransformerEncoder
    decoder_class = DeepTransformerDecoder


class DeepTransformerForConditionalGeneration(
    DeepTransformerPreTrainedModel, MTForConditionalGeneration, GenerationMixin
):
    """The Deep Transformer with its output projection.

    Source and target embeddings are separate by design (§7.2: the target embedding is tied to the softmax, not to the
    source; `config.share_encoder_decoder_embeddings=False`), as in Marian with separate vocabularies:

    * `get_input_embeddings()` / `set_input_embeddings()` / `resize_token_embeddings()` act on the **source**
      embedding only (`config.vocab_size`);
    * the target embedding is `get_decoder().embed_tokens` (also `model.get_decoder_input_embeddings()` /
      `model.set_decoder_input_embeddings()`), and `resize_decoder_token_embeddings()` resizes it together with the
      output projection (`config.decoder_vocab_size`), which stays tied to it with `tie_word_embeddings`.

    With `share_encoder_decoder_embeddings=True` there is one matrix and `resize_token_embeddings()` resizes it all.
    """

    base_model_class = DeepTransformerModel


__all__ = [
    "DeepTransformerPreTrainedModel",
    "DeepTransformerModel",
    "DeepTransformerForConditionalGeneration",
]
