"""The models behave like in-library transformers models (on the tiny Unified Transformer): pipeline, Trainer,
errors, common API. Remote code, checkpointing, config errors, outputs and the auto classes are checked for every
architecture in `test_model_contract.py`."""

import pytest
import torch
from transformers import (
    AutoModelForSeq2SeqLM,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    pipeline,
)
from transformers.data.data_collator import DataCollatorForSeq2Seq
from transformers.modeling_layers import GradientCheckpointingLayer

import hf_unified_mt
from conftest import make_tokenizer, random_batch, tiny_model, trained_tiny_model
from golden.make_golden import CONFIGS as GOLDEN_CONFIGS
from golden.make_golden import build as build_golden
from mt_checks import ListDataset


# ---------------------------------------------------------------------------------------------- pipeline


def test_translation_pipeline_batches_and_matches_generate(tokenizer):
    model = trained_tiny_model()
    translator = hf_unified_mt.TranslationPipeline(model=model, tokenizer=tokenizer, max_new_tokens=6, num_beams=2)
    sentences = ["hola", "el gato ve al perro", "la casa es grande y pequeña"]
    batched = translator(sentences, batch_size=3)
    one_by_one = [translator(s)[0] for s in sentences]
    assert batched == one_by_one
    assert all(set(r) == {"translation_text"} and isinstance(r["translation_text"], str) for r in batched)
    direct = model.generate(**tokenizer(sentences[1:2], return_tensors="pt"), max_new_tokens=6, num_beams=2)
    assert batched[1]["translation_text"] == tokenizer.decode(direct[0], skip_special_tokens=True)
    several = translator("hola mundo", num_return_sequences=2, num_beams=2)
    assert len(several) == 2
    in_process = pipeline("hf-unified-mt-translation", model=model, tokenizer=tokenizer, max_new_tokens=6, num_beams=2)
    assert in_process(sentences) == batched


def test_translation_pipeline_empty_inputs_and_truncation(tokenizer):
    """Issue 31: `pipe([])` gives `[]`; an empty string translates to "" without failing its batch; `truncation=True`
    (as users of transformers' translation pipeline pass it) cuts inputs to the model's length instead of raising."""
    model = trained_tiny_model(max_position_embeddings=16)
    translator = hf_unified_mt.TranslationPipeline(model=model, tokenizer=tokenizer, max_new_tokens=4, num_beams=2)
    assert translator([]) == []
    assert translator("   ") == [{"translation_text": ""}]
    alone = translator(["hola", "el gato"])
    assert translator(["hola", "", "el gato"], batch_size=2) == [alone[0], {"translation_text": ""}, alone[1]]
    assert translator(["", "hola"], num_return_sequences=2)[0] == [{"translation_text": ""}] * 2
    long_input = "el gato ve al perro " * 4
    with pytest.raises(ValueError, match="max_position_embeddings"):
        translator(long_input)
    truncated = translator(long_input, truncation=True)
    cut = tokenizer(long_input, truncation=True, max_length=16, return_tensors="pt")
    direct = model.generate(**cut, max_new_tokens=4, num_beams=2)
    assert truncated == [{"translation_text": tokenizer.decode(direct[0], skip_special_tokens=True)}]


def test_generate_on_an_empty_sentence_is_what_the_readme_says():
    """Issue 31: the README said that empty inputs raise, while `generate()` translates an empty sentence (`</s>`
    alone) like any other input. A sequence of length 0 raises; the README now says so, and that `translate()` and the
    pipeline answer "" for empty strings without calling the model."""
    from pathlib import Path

    from hf_unified_mt.deployment.inference import translate

    model = tiny_model()
    with pytest.raises(ValueError, match="empty"):
        model.generate(torch.zeros(1, 0, dtype=torch.long), max_new_tokens=2)
    assert model.generate(torch.tensor([[2]]), max_new_tokens=2).shape[1] > 1  # `</s>` alone is an input
    assert translate(model, make_tokenizer(), ["", "  "], max_new_tokens=2) == ["", ""]
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").split())
    assert "an empty sentence, which tokenizes to `</s>` alone, is translated like any input" in readme


# ---------------------------------------------------------------------------------------------- training


def _trainer_update(tmp_path, batch_size, accumulation, tokenizer):
    model = tiny_model().train()
    before = [p.detach().clone() for p in model.parameters()]
    generator = torch.Generator().manual_seed(5)
    rows = []
    for i in range(8):  # different lengths, so that token counts per micro-batch differ
        src = torch.randint(4, model.config.vocab_size, (3 + i,), generator=generator).tolist() + [2]
        tgt = torch.randint(4, model.config.vocab_size, (2 + (i * 3) % 7,), generator=generator).tolist() + [2]
        rows.append({"input_ids": src, "attention_mask": [1] * len(src), "labels": tgt})
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path / f"run{batch_size}"),
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation,
        max_steps=1,
        learning_rate=1.0,
        optim="sgd",
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=0.0,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        dataloader_drop_last=False,
        disable_tqdm=True,
        seed=0,
        data_seed=0,
    )
    trainer = Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=ListDataset(rows),
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
    )
    trainer._get_train_sampler = lambda *a, **k: torch.utils.data.SequentialSampler(rows)
    trainer.train()
    return torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)])


def test_trainer_gradient_accumulation_matches_the_doubled_batch(tmp_path, tokenizer):
    accumulated = _trainer_update(tmp_path, batch_size=4, accumulation=2, tokenizer=tokenizer)
    doubled = _trainer_update(tmp_path, batch_size=8, accumulation=1, tokenizer=tokenizer)
    assert doubled.norm() > 0
    ratio = (accumulated.norm() / doubled.norm()).item()
    assert abs(ratio - 1.0) < 1e-3, ratio
    assert torch.allclose(accumulated, doubled, atol=1e-5)


# ---------------------------------------------------------------------------------------------- errors


def test_unknown_preset_and_architecture_are_refused():
    with pytest.raises(ValueError, match="preset"):
        hf_unified_mt.get_config("unified_transformer", "huge")
    with pytest.raises(ValueError, match="architecture"):
        hf_unified_mt.get_config("no_such_model", "base")


def test_over_long_and_empty_inputs_raise():
    model = tiny_model(max_position_embeddings=16)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model.generate(torch.randint(4, 30, (1, 17)), max_new_tokens=2)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model.generate(torch.randint(4, 30, (1, 5)), max_new_tokens=20, min_new_tokens=20)
    with pytest.raises(ValueError, match="empty"):
        model(input_ids=torch.zeros(1, 0, dtype=torch.long), decoder_input_ids=torch.ones(1, 1, dtype=torch.long))


def test_decoding_modes_the_state_cannot_support_are_refused():
    model = tiny_model()
    assistant = tiny_model(seed=1)
    ids, mask = random_batch(model.config.vocab_size)
    with pytest.raises(ValueError, match="stateful"):
        model.generate(ids[:1], assistant_model=assistant, max_new_tokens=4)
    with pytest.raises(ValueError, match="stateful"):
        model.generate(ids[:1], prompt_lookup_num_tokens=2, max_new_tokens=4)
    for cache_implementation in ("static", "quantized"):
        with pytest.raises(ValueError, match="cache_implementation"):
            model.generate(ids[:1], cache_implementation=cache_implementation, max_new_tokens=4)


def test_cache_built_without_config_is_refused():
    from transformers import DynamicCache, EncoderDecoderCache

    model = tiny_model()
    ids, _ = random_batch(model.config.vocab_size)
    with pytest.raises(TypeError, match="config"):
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        model(input_ids=ids, decoder_input_ids=ids[:, :1], cache=cache)


# ---------------------------------------------------------------------------------------------- common API


@pytest.mark.parametrize("arch", list(hf_unified_mt.ARCHITECTURES))
def test_selected_hidden_states_count_each_stack_separately(arch):
    """`output_hidden_states=[...]` selects by index; negative indices count from each stack's own end, although the
    encoder and decoder differ in depth (and MPT / the multi-encoder return more encoder states than layers)."""
    torch.manual_seed(0)
    config = hf_unified_mt.get_config(arch, "tiny", vocab_size=40, encoder_layers=2, decoder_layers=3, dropout=0.0)
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    ids, mask = random_batch(40)
    inputs = dict(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :5])
    with torch.no_grad():
        full = model(**inputs, output_hidden_states=True)
        selected = model(**inputs, output_hidden_states=[0, -1])
    assert len(full.encoder_hidden_states) == config.num_encoder_hidden_layers + 1
    for everything, chosen in (
        (full.encoder_hidden_states, selected.encoder_hidden_states),
        (full.decoder_hidden_states, selected.decoder_hidden_states),
    ):
        assert [i for i, state in enumerate(chosen) if state is not None] == [0, len(everything) - 1]
        assert torch.equal(chosen[-1], everything[-1]) and torch.equal(chosen[0], everything[0])


def test_resize_token_embeddings_and_embedding_accessors():
    model = tiny_model()
    assert model.get_input_embeddings() is model.model.encoder.embed_tokens
    assert model.get_output_embeddings() is model.lm_head
    old = model.config.vocab_size
    model.resize_token_embeddings(old + 5)
    assert model.config.vocab_size == old + 5
    assert model.model.decoder.embed_tokens.weight.shape[0] == old + 5
    assert model.lm_head.weight is model.model.encoder.embed_tokens.weight
    ids, _ = random_batch(old + 5)
    ids[0, 0] = old + 4
    assert model(input_ids=ids, decoder_input_ids=ids).logits.shape[-1] == old + 5


@pytest.mark.parametrize("name", sorted(GOLDEN_CONFIGS))
def test_no_split_modules_name_every_layer_the_model_builds(name):
    """`device_map="auto"` keeps each module of a class in `_no_split_modules` on one device; every layer a
    configuration builds (decoder variants, Prime layers in another architecture's stack) must be one or lie inside
    one, or accelerate may cut a layer between devices."""
    model = build_golden(name)
    kept = set(model._no_split_modules)
    names = {module: path for path, module in model.named_modules()}
    held = [path for path, module in model.named_modules() if type(module).__name__ in kept]
    layers = [names[module] for module in model.modules() if isinstance(module, GradientCheckpointingLayer)]
    loose = [path for path in layers if not any(path == top or path.startswith(top + ".") for top in held)]
    assert layers and not loose, loose  # each layer is kept whole, itself or inside a module kept whole
