# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Multi-Pass Transformer (Gao et al., "Multi-Pass Transformer for Machine Translation", MPT).

A standard Transformer whose encoder stack L_0..L_{N-1} is run for P passes with tied weights. Every pass starts
again from the source embeddings X, and the input of layer k of a pass (the "outer" layer) also receives a
connection c_k built from the layer outputs of the previous pass (the "inner" layers):

    inner pass:  S_{-1} = X,   S_k = L_k(S_{k-1})
    outer pass:  S~_{-1} = X,  S~_k = L_k(S~_{k-1} + c_k)                           Eq. (6), routing pattern (a)
    soft:        c_k = sum_j alpha_kj S_j,  alpha_kj = softmax_j(w_kj)               Eq. (6)
    hard:        c_k = S_{tau_k} for a permutation tau of 0..N-1                     §3.2

The decoder is a standard Transformer decoder reading the last pass, or any earlier pass the caller chooses
(`encoder_pass=`), which then costs only that many passes. No code was released; the equations follow the paper's
text (the package documentation's architecture notes, §5, discuss its readings). The encoder layer is the shared
`MTEncoderLayer` taking the connection as a second input (`MultiPassEncoderLayer`; composed, a Prime layer), the
decoder the shared one (or one of paper 001's decoder variants, `decoder_attention_type`); what is defined here is the
passes, the connections and the training objectives.
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
from transformers import initialization as init
from transformers.cache_utils import Cache
from transformers.generation import GenerationMixin
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput, Seq2SeqModelOutput
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple, logging
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import (
    capture_outputs,
    resolve_hidden_states_indices,
    selected_hidden_states,
)

from .configuration_multi_pass_transformer import MultiPassTransformerConfig, check_pass
from .modeling_decoder_variants import VARIANT_LAYER_NAMES, decoder_layer, decoder_recorders
from .modeling_mt_common import (
    EncoderHiddenStates,
    MTAttention,
    MTDecoder,
    MTEncoderBase,
    MTEncoderLayer,
    MTForConditionalGeneration,
    MTModel,
    MTPreTrainedModel,
    accepts_past_key_values,
)
from .modeling_unified_transformer import UnifiedTransformerEncoderLayer, prime_layer_config


logger = logging.get_logger(__name__)


@dataclass
class MultiPassEncoderOutput(BaseModelOutput):
    r"""
    last_hidden_state (`torch.FloatTensor` of shape `(batch_size, sequence_length, hidden_size)`):
        Output of the pass the decoder reads.
    hidden_states (`tuple(torch.FloatTensor)`, *optional*, returned when `output_hidden_states=True`):
        `encoder_layers + 1` states of the pass the decoder reads, as for any Transformer encoder: the embeddings X
        (the input of every pass), then the output of each layer of that pass (the last one is `last_hidden_state`).
    attentions (`tuple(torch.FloatTensor)`, *optional*, returned when `output_attentions=True`):
        `encoder_layers` self-attention maps of the pass the decoder reads.
    pass_hidden_states (`tuple(torch.FloatTensor)`, *optional*, returned when `output_pass_hidden_states=True`):
        The output of each pass that ran (first to last), i.e. what the decoder would read for each choice of pass.
    per_pass_hidden_states (`tuple(tuple(torch.FloatTensor))`, *optional*, returned when `output_hidden_states=True`):
        For every pass that ran (first to last), its `encoder_layers + 1` states, laid out like `hidden_states`.
    per_pass_attentions (`tuple(tuple(torch.FloatTensor))`, *optional*, returned when `output_attentions=True`):
        For every pass that ran (first to last), its `encoder_layers` self-attention maps.
    """

    pass_hidden_states: tuple[torch.FloatTensor, ...] | None = None
    per_pass_hidden_states: tuple[tuple[torch.FloatTensor, ...], ...] | None = None
    per_pass_attentions: tuple[tuple[torch.FloatTensor, ...], ...] | None = None


@dataclass
class MultiPassSeq2SeqModelOutput(Seq2SeqModelOutput):
    r"""
    encoder_per_pass_hidden_states (`tuple(tuple(torch.FloatTensor))`, *optional*):
        The encoder's `per_pass_hidden_states` (every pass's `encoder_layers + 1` states); `encoder_hidden_states`
        holds those of the pass the decoder reads.
    encoder_per_pass_attentions (`tuple(tuple(torch.FloatTensor))`, *optional*):
        The encoder's `per_pass_attentions`; `encoder_attentions` holds those of the pass the decoder reads.
    """

    encoder_per_pass_hidden_states: tuple[tuple[torch.FloatTensor, ...], ...] | None = None
    encoder_per_pass_attentions: tuple[tuple[torch.FloatTensor, ...], ...] | None = None


@dataclass
class MultiPassSeq2SeqLMOutput(Seq2SeqLMOutput):
    r"""
    encoder_per_pass_hidden_states (`tuple(tuple(torch.FloatTensor))`, *optional*):
        The encoder's `per_pass_hidden_states` (every pass's `encoder_layers + 1` states); `encoder_hidden_states`
        holds those of the pass the decoder reads.
    encoder_per_pass_attentions (`tuple(tuple(torch.FloatTensor))`, *optional*):
        The encoder's `per_pass_attentions`; `encoder_attentions` holds those of the pass the decoder reads.
    """

    encoder_per_pass_hidden_states: tuple[tuple[torch.FloatTensor, ...], ...] | None = None
    encoder_per_pass_attentions: tuple[tuple[torch.FloatTensor, ...], ...] | None = None


class MultiPassEncoderLayer(MTEncoderLayer):
    """The shared Transformer encoder layer, taking the connection c_k from the previous pass as a second input.

    Returns `(output, mid)`, where `mid` is the state after the self-attention sublayer (S^mid, Eq. 2), which routing
    patterns (c)/(d) pass on to the next pass. Without a connection (the first pass) it is `MTEncoderLayer`."""

    def __init__(self, config: MultiPassTransformerConfig, layer_idx: int | None = None):
        super().__init__(config, layer_idx=layer_idx)
        # Figure 4: (a)/(c) add c_k before the residual branch point, (b)/(d) after it.
        self.connect_before_residual = config.routing_pattern in ("a", "c")

    def extra_repr(self) -> str:
        return f"connection={'before the residual' if self.connect_before_residual else 'into the self-attention'}"

    def forward(
        self,
        hidden_states: torch.Tensor,
        connection: torch.Tensor | None = None,  # positional, so that gradient checkpointing carries its gradient
        attention_mask: torch.Tensor | None = None,
        padding_mask: torch.Tensor | None = None,
        stacked_projections: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`stacked_projections`: the self-attention's stacked q/k/v weights (`MTAttention.stacked_input_projections`),
        which the encoder builds once for all the passes in a training forward; built by the attention when None."""
        branch_connection = None
        if connection is not None and self.connect_before_residual:
            # Patterns (a)/(c), Eq. (6): S~_k = AttModule(S~_{k-1} + c_k); c_k also travels on the residual stream.
            hidden_states = hidden_states + connection
        elif connection is not None:
            # Patterns (b)/(d), our reading of "after the residual connection" (§3.2): c_k enters the self-attention
            # branch only, and the identity path carries S~_{k-1} alone: mid = LN(S~_{k-1} + Drop(SA(S~_{k-1} + c_k)))
            # in post-norm.
            branch_connection = connection

        def self_attention(inputs: torch.Tensor) -> torch.Tensor:
            if branch_connection is not None:
                inputs = inputs + branch_connection
            return self.self_attn(
                inputs, attention_mask=attention_mask, stacked_projections=stacked_projections, **kwargs
            )[0]

        mid = self.self_attn_sublayer(hidden_states, self_attention)  # Eq. (2)
        return self.ffn_sublayer(mid, self.ffn), mid  # Eq. (3)


class MultiPassPrimeEncoderLayer(UnifiedTransformerEncoderLayer):
    """Composition: the Unified Transformer's Prime encoder layer (Eq. 4 of Zhao et al.) run by the passes, with the
    connection c_k added to its input (routing pattern (a), Eq. 6 of Gao et al.). Returns `(output, output)`: a Prime
    layer has no state between sublayers, so there is no S^mid."""

    def forward(
        self,
        hidden_states: torch.Tensor,
        connection: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        padding_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if connection is not None:
            hidden_states = hidden_states + connection
        output = super().forward(hidden_states, attention_mask=attention_mask, padding_mask=padding_mask, **kwargs)
        return output, output


class MultiPassConnections(nn.Module):
    """The connections c_0..c_{N-1} into the layers of a pass, from the features S_0..S_{N-1} of the previous pass.

    Soft (Eq. 6): c_k = sum_j alpha_kj S_j with alpha_kj = softmax_j(w_kj), one row of N learned logits per outer layer
    (N² parameters, shared by all pass transitions). Hard (§3.2): c_k = S_{tau_k} for the permutation tau in
    `config.hard_connections`; no parameters."""

    def __init__(self, config: MultiPassTransformerConfig):
        super().__init__()
        self.num_layers = config.encoder_layers
        self.soft = config.connection_type == "soft"
        self.soft_init = config.soft_connection_init
        if self.soft:
            self.logits = nn.Parameter(torch.empty(self.num_layers, self.num_layers))  # w_kj, `init_own_parameters`
        else:
            self.permutation = list(config.hard_connections)  # tau_k

    def extra_repr(self) -> str:
        if self.soft:
            return f"soft, layers={self.num_layers}, init={self.soft_init!r}"
        return f"hard, permutation={self.permutation}"

    def init_own_parameters(self, config) -> None:
        """Soft connection logits: zero (uniform alpha; the paper does not say), or alpha_kk = 0.99 for
        `soft_connection_init="identity"`."""
        if not self.soft:
            return
        n = self.num_layers
        if self.soft_init == "identity" and n > 1:
            init.copy_(self.logits, torch.eye(n) * math.log(99.0 * (n - 1)))  # softmax gives 0.99 on the diagonal
        else:
            init.zeros_(self.logits)

    def weights(self) -> torch.Tensor:
        """alpha, `[N outer, N inner]`; every row sums to 1 (one-hot rows for hard connections)."""
        if self.soft:
            return torch.softmax(self.logits, dim=-1)
        return nn.functional.one_hot(torch.tensor(self.permutation), self.num_layers).float()

    def forward(self, inner_features: list[torch.Tensor]) -> list[torch.Tensor]:
        if not self.soft:
            return [inner_features[j] for j in self.permutation]
        alpha = self.weights().to(inner_features[0].dtype)
        return list(torch.einsum("kj,j...->k...", alpha, torch.stack(inner_features)).unbind(0))


class MultiPassTransformerPreTrainedModel(MTPreTrainedModel):
    config: MultiPassTransformerConfig
    _no_split_modules = ["MultiPassEncoderLayer", "MultiPassPrimeEncoderLayer", "MTDecoderLayer", *VARIANT_LAYER_NAMES]


class MultiPassTransformerEncoder(MultiPassTransformerPreTrainedModel, MTEncoderBase):
    """Embeddings, then the shared stack of `encoder_layers` layers run for up to `num_passes` passes, with the
    connections between passes."""

    _can_record_outputs = {
        "hidden_states": EncoderHiddenStates(MultiPassEncoderLayer, MultiPassPrimeEncoderLayer),
        "attentions": MTAttention,
    }

    def __init__(self, config: MultiPassTransformerConfig):
        super().__init__(config)  # the source embeddings
        self.layers = nn.ModuleList([self.build_layer(config, i) for i in range(config.encoder_layers)])
        self.layer_norm = nn.LayerNorm(config.d_model) if config.normalize_before else None
        # With a single pass there is nothing to connect: the encoder is exactly a plain Transformer encoder.
        self.connections = MultiPassConnections(config) if config.num_passes > 1 else None
        self.connect_from_mid = config.routing_pattern in ("c", "d")  # Figure 4: S^mid instead of S^out
        self.post_init()

    def build_layer(self, config: MultiPassTransformerConfig, layer_idx: int) -> nn.Module:
        """The shared Transformer encoder layer taking the connection c_k, or, composed, a Prime layer."""
        if config.encoder_layer["type"] == "prime":
            return MultiPassPrimeEncoderLayer(prime_layer_config(config, config.encoder_layer), layer_idx)
        return MultiPassEncoderLayer(config, layer_idx)

    def finalize(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Final LayerNorm of a pre-norm stack, at the end of every pass; post-norm returns the states as they are."""
        return self.layer_norm(hidden_states) if self.layer_norm is not None else hidden_states

    def extra_repr(self) -> str:
        config = self.config
        return f"passes={config.num_passes}, routing_pattern={config.routing_pattern!r}"

    @property
    def connection_weights(self) -> torch.Tensor | None:
        """alpha `[N outer, N inner]` (the paper's Figure 5), or None with a single pass."""
        return self.connections.weights().detach() if self.connections is not None else None

    def pass_to_read(self, encoder_pass: int | None) -> int:
        """The pass whose output the decoder reads: the caller's choice; else, in training, the last pass (objectives
        "last" and "sum") or a uniformly drawn one (objective "random", §3.2); else `config.inference_pass`, else the
        last pass."""
        num_passes = self.config.num_passes
        if encoder_pass is not None:
            check_pass(encoder_pass, num_passes, "encoder_pass")
            return encoder_pass
        if self.training:
            if self.config.training_objective == "random":
                # Note: under DistributedDataParallel ranks may draw different passes; a pass-1 draw leaves soft
                # connection logits unused, so use `find_unused_parameters=True` there.
                return int(torch.randint(1, num_passes + 1, ()).item())
            return num_passes
        return self.config.inference_pass or num_passes

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        encoder_pass: int | None = None,
        output_pass_hidden_states: bool = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MultiPassEncoderOutput:
        r"""
        encoder_pass (`int`, *optional*):
            Pass (1-based) whose output is returned for the decoder; only that many passes are computed. Defaults as
            described in `pass_to_read`.
        output_pass_hidden_states (`bool`, *optional*, defaults to `False`):
            Also return the output of every pass that ran, as `pass_hidden_states`.

        `hidden_states` and `attentions` are those of the pass the decoder reads (`encoder_layers + 1` states and
        `encoder_layers` maps, as `config.encoder_layers` says); every pass's are in `per_pass_hidden_states` and
        `per_pass_attentions`.
        """
        return_dict = kwargs.pop("return_dict", getattr(self.config, "return_dict", True))
        requested = kwargs.get("output_hidden_states")
        requested = self.config.output_hidden_states if requested is None else requested
        selection = selected_hidden_states(requested)
        if selection is not None:  # indices select among the read pass's states: record all, select below
            kwargs["output_hidden_states"] = True
        outputs = self.run_passes(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            encoder_pass=encoder_pass,
            return_dict=True,
            **kwargs,
        )
        layers, passes = len(self.layers), outputs.pass_hidden_states
        per_pass_states = per_pass_maps = None
        if outputs.hidden_states is not None:
            # The recorder saw the embeddings X (the input of the first layer call), then every layer call of every
            # pass in order; each pass starts from X, and its last state is the pass's (normalised) output.
            per_pass_states = tuple(
                (outputs.hidden_states[0], *outputs.hidden_states[1 + p * layers : (p + 1) * layers], passes[p])
                for p in range(len(passes))
            )
            if selection is not None:
                kept = resolve_hidden_states_indices(self, selection, num_hidden_states=layers + 1)
                per_pass_states = tuple(
                    tuple(state if i in kept else None for i, state in enumerate(states)) for states in per_pass_states
                )
        if outputs.attentions is not None:
            per_pass_maps = tuple(outputs.attentions[p * layers : (p + 1) * layers] for p in range(len(passes)))
        outputs = MultiPassEncoderOutput(
            last_hidden_state=outputs.last_hidden_state,
            hidden_states=per_pass_states[-1] if per_pass_states is not None else None,
            attentions=per_pass_maps[-1] if per_pass_maps is not None else None,
            pass_hidden_states=passes if output_pass_hidden_states else None,
            per_pass_hidden_states=per_pass_states,
            per_pass_attentions=per_pass_maps,
        )
        return outputs if return_dict else outputs.to_tuple()

    def shared_projections(self, num_passes: int) -> list[tuple[torch.Tensor, torch.Tensor] | None]:
        """Per layer, the stacked q/k/v weights of its self-attention for every pass of a training forward: the
        weights are tied across the passes (Gao et al. §3.2), so one stack serves them all, and the backward sums the
        passes' gradients once before it reaches the three projections. None per layer (each attention builds its
        own, or projects one by one) with a single pass, in evaluation, with Prime layers, and under gradient
        checkpointing, whose recomputation must see every tensor a layer differentiates as an input."""
        shared = num_passes > 1 and self.training and not self.gradient_checkpointing
        return [
            layer.self_attn.stacked_input_projections() if shared and isinstance(layer, MultiPassEncoderLayer) else None
            for layer in self.layers
        ]

    @merge_with_config_defaults
    @capture_outputs
    def run_passes(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        encoder_pass: int | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MultiPassEncoderOutput:
        """Runs the passes; records the hidden states and attention maps of every layer call, in order, and returns
        every pass's output in `pass_hidden_states` (`forward` arranges them per pass)."""
        num_passes = self.pass_to_read(encoder_pass)
        # X: the same embeddings (and dropout mask) start every pass
        embeddings, attention_mask, padding_mask = self.prepare_inputs(input_ids, attention_mask, inputs_embeds)

        pass_outputs = []
        inner_features = None  # S_0..S_{N-1} of the previous pass (S^mid for patterns (c)/(d))
        projections = self.shared_projections(num_passes)
        for _ in range(num_passes):
            if inner_features is None:
                connections = [None] * len(self.layers)
            else:
                connections = self.connections(inner_features)
            # Every pass restarts from the original input, S~_{-1} = X (§3.2 of Gao et al.: the difference
            # from a plain tied 6+6 stack).
            hidden_states, inner_features = embeddings, []
            for layer, connection, stacked in zip(self.layers, connections, projections, strict=True):
                layer_kwargs = kwargs if stacked is None else {**kwargs, "stacked_projections": stacked}
                hidden_states, mid = layer(
                    hidden_states, connection, attention_mask=attention_mask, padding_mask=padding_mask, **layer_kwargs
                )
                inner_features.append(mid if self.connect_from_mid else hidden_states)
            pass_outputs.append(self.finalize(hidden_states))
        return MultiPassEncoderOutput(last_hidden_state=pass_outputs[-1], pass_hidden_states=tuple(pass_outputs))


class MultiPassTransformerDecoder(MultiPassTransformerPreTrainedModel, MTDecoder):
    """The standard Transformer decoder (the paper changes only the encoder), or a decoder variant of paper 001
    composed through `config.decoder_attention_type`."""

    _can_record_outputs = decoder_recorders()
    stacks_cross_attention_projections = True

    def build_layer(self, config: MultiPassTransformerConfig, layer_idx: int) -> nn.Module:
        return decoder_layer(config, layer_idx)


class MultiPassTransformerModel(MultiPassTransformerPreTrainedModel, MTModel):
    """The Multi-Pass encoder and the decoder. `forward(..., encoder_pass=p)` has the decoder read pass p (1-based) of
    the encoder, which then computes only p passes (see `MultiPassTransformerEncoder.pass_to_read`); it is ignored
    when `encoder_outputs` are given, which were computed for one pass already (this is how `generate()` works:
    `generate(..., encoder_pass=1)` hands the choice to the encoder, which runs once)."""

    encoder_class = MultiPassTransformerEncoder
    decoder_class = MultiPassTransformerDecoder
    output_class = MultiPassSeq2SeqModelOutput
    encoder_arguments = ("encoder_pass",)


class MultiPassTransformerForConditionalGeneration(
    MultiPassTransformerPreTrainedModel, MTForConditionalGeneration, GenerationMixin
):
    base_model_class = MultiPassTransformerModel
    output_class = MultiPassSeq2SeqLMOutput

    @accepts_past_key_values
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple[torch.Tensor] | BaseModelOutput | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        encoder_pass: int | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqLMOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, target_length)`, *optional*):
            Target token ids; -100 marks positions ignored by the loss. With `training_objective="sum"` in training
            mode the loss is the sum over passes of the loss of the decoder reading that pass (§3.2); the returned
            logits are those of the last pass.
        encoder_pass (`int`, *optional*):
            Pass (1-based) of the encoder whose output the decoder reads; also a `generate()` argument.
        """
        decoder_kwargs = dict(
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            cache=cache,
            decoder_inputs_embeds=decoder_inputs_embeds,
            labels=labels,
            use_cache=use_cache,
            logits_to_keep=logits_to_keep,
        )
        sum_over_passes = (
            self.training
            and labels is not None
            and encoder_outputs is None
            and encoder_pass is None
            and self.config.training_objective == "sum"
            and self.config.num_passes > 1
        )
        if self.training and labels is None and self.config.training_objective == "sum":
            logger.warning_once(
                "training_objective='sum' needs `labels` in the model call to sum the losses of all passes; without "
                "them only the last pass is trained. With the Trainer, smooth labels with `config.label_smoothing` "
                "(the package's training script moves --label_smoothing_factor there), not with "
                "`label_smoothing_factor`, which takes the labels away from the model."
            )
        if not sum_over_passes:
            return super().forward(
                input_ids,
                encoder_outputs=encoder_outputs,
                inputs_embeds=inputs_embeds,
                encoder_pass=encoder_pass,
                **decoder_kwargs,
                **kwargs,
            )

        # Objective "sum" (§3.2): L(S_{N-1}, T) + L(S~_{N-1}, T) [+ ... for P > 2]; the encoder runs once, the decoder
        # once per pass.
        encoder_kwargs = {key: value for key, value in kwargs.items() if key != "num_items_in_batch"}
        encoder_outputs = self.model.encoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            output_pass_hidden_states=True,
            **encoder_kwargs,
        )
        total_loss, outputs = 0.0, None
        for index, pass_output in enumerate(encoder_outputs.pass_hidden_states):
            per_pass_states, per_pass_maps = encoder_outputs.per_pass_hidden_states, encoder_outputs.per_pass_attentions
            pass_encoder_outputs = MultiPassEncoderOutput(
                last_hidden_state=pass_output,
                hidden_states=per_pass_states[index] if per_pass_states is not None else None,
                attentions=per_pass_maps[index] if per_pass_maps is not None else None,
                per_pass_hidden_states=per_pass_states,
                per_pass_attentions=per_pass_maps,
            )
            outputs = super().forward(encoder_outputs=pass_encoder_outputs, **decoder_kwargs, **kwargs)
            total_loss = total_loss + outputs.loss
        outputs.loss = total_loss
        return outputs


__all__ = [
    "MultiPassEncoderOutput",
    "MultiPassSeq2SeqModelOutput",
    "MultiPassSeq2SeqLMOutput",
    "MultiPassTransformerPreTrainedModel",
    "MultiPassTransformerModel",
    "MultiPassTransformerForConditionalGeneration",
]
