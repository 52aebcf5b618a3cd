"""The vocabulary shortlist's table (`hf_unified_mt.deployment.shortlist`, issue 64): built from co-occurrence, read
and written in CTranslate2's vocabulary map format, and a batch's candidates. The shortlisted search itself:
tests/test_onnx.py."""

import numpy as np
import pytest

from conftest import make_tokenizer
from hf_unified_mt.deployment.shortlist import Shortlist, build_shortlist, cooccurrence_shortlist, main, read_pairs


SOURCES = ["hola mundo", "el gato", "el perro", "la casa es grande", "el gato ve al perro", "hola"]
TARGETS = ["hello world", "the cat", "the dog", "the house is big", "the cat sees the dog", "hello"]


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_cooccurrence_keeps_each_source_tokens_best_partners_and_the_frequent_targets():
    tokenizer = make_tokenizer()
    shortlist = build_shortlist(tokenizer, SOURCES, TARGETS, frequent=1, per_source=1, min_count=2)
    rule = {
        tokenizer.convert_ids_to_tokens(key[0]): tokenizer.convert_ids_to_tokens(list(v))
        for key, v in shortlist.rules.items()
    }
    # seen together in at least two pairs, with the best Dice coefficient
    assert rule["gato"] == ["cat"] and rule["perro"] == ["dog"] and rule["hola"] == ["hello"]
    assert "casa" not in rule  # once only: below min_count
    assert tokenizer.convert_ids_to_tokens(list(shortlist.always)) == ["the"]  # the most frequent target
    special = set(tokenizer.all_special_ids)
    assert not special & {key[0] for key in shortlist.rules} and not special & set(shortlist.always.tolist())


def test_cooccurrence_in_chunks_counts_what_one_pass_counts():
    generator = np.random.default_rng(0)
    sources = [generator.integers(0, 50, size=8).tolist() for _ in range(300)]
    targets = [[token + 50 for token in row[:6]] for row in sources]
    one = cooccurrence_shortlist(sources, targets, 100, frequent=5, per_source=3)
    chunked = cooccurrence_shortlist(sources, targets, 100, frequent=5, per_source=3, chunk=7)
    assert one.rules.keys() == chunked.rules.keys()
    assert all(np.array_equal(one.rules[key], chunked.rules[key]) for key in one.rules)
    assert np.array_equal(one.always, chunked.always)
    # each source token's likeliest partner is its own translation (token + 50), unless that is always in anyway
    assert all(key[0] + 50 in rule or key[0] + 50 in one.always for key, rule in one.rules.items())
    assert not any(np.isin(rule, one.always).any() for rule in one.rules.values())
    with pytest.raises(ValueError, match="different numbers"):
        cooccurrence_shortlist(sources, targets[:-1], 100)


def test_candidates_are_the_rules_of_the_batch_those_always_in_and_the_required_ids():
    shortlist = Shortlist({(5,): [10, 11], (6,): [12], (7, 8): [13]}, always=[20])
    batch = np.array([[5, 7, 8, 0], [6, 9, 0, 0]])
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]])
    assert shortlist.candidates(batch, mask, required=[2, 1]).tolist() == [1, 2, 10, 11, 12, 13, 20]
    # padding is no source token: id 8 counted only where the mask keeps it, the bigram (7, 8) only when adjacent
    assert shortlist.candidates(np.array([[5, 7, 9, 8]]), required=[]).tolist() == [10, 11, 20]
    assert shortlist.candidates(np.array([[6, 7, 8]]), np.array([[1, 1, 0]])).tolist() == [12, 20]


def test_vocabulary_map_file_round_trip_and_errors(tmp_path):
    tokenizer = make_tokenizer()
    shortlist = build_shortlist(tokenizer, SOURCES, TARGETS, frequent=2, per_source=3, min_count=1)
    path = tmp_path / "vmap.txt"
    shortlist.write(path, tokenizer)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("\t") and "gato\t" in "\n".join(lines)  # CTranslate2's format: those always in first
    again = Shortlist.read(path, tokenizer)
    assert np.array_equal(again.always, shortlist.always)
    assert again.rules.keys() == shortlist.rules.keys()
    assert all(np.array_equal(again.rules[key], shortlist.rules[key]) for key in shortlist.rules)
    # an n-gram rule as CTranslate2 reads it
    (tmp_path / "bigram.txt").write_text("el gato\tcat\n\tthe\n", encoding="utf-8")
    bigram = Shortlist.read(tmp_path / "bigram.txt", tokenizer)
    cat, the = tokenizer.convert_tokens_to_ids(["cat", "the"])
    assert bigram.candidates(np.array([ids(tokenizer, "el gato")])).tolist() == sorted([cat, the])
    assert bigram.candidates(np.array([ids(tokenizer, "gato el")])).tolist() == [the]
    (tmp_path / "unknown.txt").write_text("gato\tkatze\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"unknown.txt, line 1: tokens \['katze'\] are not in"):
        Shortlist.read(tmp_path / "unknown.txt", tokenizer)
    (tmp_path / "notab.txt").write_text("gato cat\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 1: no tab"):
        Shortlist.read(tmp_path / "notab.txt", tokenizer)


def test_command_line_builds_a_vocabulary_map_and_names_a_bad_line(tmp_path, capsys):
    corpus = tmp_path / "train.tsv"
    corpus.write_text("".join(f"{s}\t{t}\n" for s, t in zip(SOURCES, TARGETS)), encoding="utf-8")
    folder = tmp_path / "tokenizer"
    make_tokenizer().save_pretrained(folder)
    main([str(folder), str(corpus), str(tmp_path / "vmap.txt"), "--frequent", "3"])
    assert "Wrote" in capsys.readouterr().out
    assert len(Shortlist.read(tmp_path / "vmap.txt", make_tokenizer()).always) == 3
    assert read_pairs(corpus) == (SOURCES, TARGETS)
    corpus.write_text("hola\thello\textra\n", encoding="utf-8")
    with pytest.raises(SystemExit) as stop:
        main([str(folder), str(corpus), str(tmp_path / "other.txt")])
    assert stop.value.code == 2
    assert "line 1: expected source<TAB>target, found 3 fields" in capsys.readouterr().err
