# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""A target-vocabulary shortlist: for each batch, the target tokens worth scoring, from the source tokens it holds,
so that the ONNX Runtime search scores those only (`ORTModelForSeq2SeqLM.from_pretrained(..., shortlist=...)`).

What Marian ships with its small CPU models (its lexical shortlist) and CTranslate2 calls a vocabulary map
(`translate_batch(..., use_vmap=True)`): a table from source n-grams to candidate target tokens, plus tokens that are
always candidates. The file is CTranslate2's format, so that one file serves both:

    <source n-gram, tokens separated by spaces>\\t<target token> <target token> ...
    \\t<target token> ...          (an empty n-gram: the tokens that are always candidates)

`build_shortlist` makes such a table from a parallel corpus by sentence-level co-occurrence: the `frequent` most
frequent target tokens are always in, and every source token keeps the `per_source` other target tokens most likely
to appear in a sentence's translation when it is in the sentence, `c(s, t) / c(s)` (`c` counting sentence pairs; at
least `min_count` together). (Against the Dice coefficient `2 c(s, t) / (c(s) + c(t))`, this covered as many of the
reference tokens of the embedded corpus's validation verses with a third fewer candidates.) A
batch's candidates (`Shortlist.candidates`) are the union of its source tokens' rules, those always in and the
special tokens the search needs (start, </s>, padding, unknown). Nothing here needs ONNX Runtime.

    python -m hf_unified_mt.deployment.shortlist TOKENIZER_DIR train.tsv vmap.txt    # source<TAB>target lines
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np


SHORTLIST_FILE = "vmap.txt"  # an export folder's shortlist (`onnx_export --shortlist_pairs`), as CTranslate2 names it
# On the embedded corpus's validation verses (BPE 6,000): 95% of the reference tokens among a batch of 16's candidates
# (1,330 on average), 91% among a single sentence's
DEFAULT_FREQUENT = 300
DEFAULT_PER_SOURCE = 10
DEFAULT_MIN_COUNT = 2


@dataclasses.dataclass
class Shortlist:
    """Candidate target ids by source n-gram of ids (`rules`), and the ids that are always candidates (`always`)."""

    rules: dict[tuple[int, ...], np.ndarray]
    always: np.ndarray

    def __post_init__(self):
        self.always = np.unique(np.asarray(self.always, dtype=np.int64))
        self.rules = {tuple(int(i) for i in key): np.asarray(ids, dtype=np.int64) for key, ids in self.rules.items()}
        self.longest = max((len(key) for key in self.rules), default=1)

    def candidates(self, input_ids, attention_mask=None, required: Iterable[int] = ()) -> np.ndarray:
        """The sorted candidate ids of a batch: those always in, `required`, and every rule of an n-gram of a row's
        tokens (padding, where `attention_mask` is 0, left out)."""
        ids = np.asarray(input_ids, dtype=np.int64)
        mask = np.ones(ids.shape, dtype=bool) if attention_mask is None else np.asarray(attention_mask).astype(bool)
        found = [self.always, np.fromiter(required, dtype=np.int64)]
        for row, keep in zip(ids, mask):
            tokens = row[keep].tolist()
            for size in range(1, self.longest + 1):
                for start in range(len(tokens) - size + 1):
                    rule = self.rules.get(tuple(tokens[start : start + size]))
                    if rule is not None:
                        found.append(rule)
        return np.unique(np.concatenate(found))

    @classmethod
    def read(cls, path: str | os.PathLike, tokenizer) -> Shortlist:
        """Reads a vocabulary map file (CTranslate2's format, see the module docstring) in the tokens of `tokenizer`.
        A `ValueError` names the first line whose tokens the tokenizer does not have."""
        vocabulary = tokenizer.get_vocab()
        rules, always = {}, []
        with open(path, encoding="utf-8") as file:
            for number, line in enumerate(file, 1):
                line = line.rstrip("\n")
                if not line:
                    continue
                if "\t" not in line:
                    raise ValueError(f"{path}, line {number}: no tab between the source n-gram and its targets")
                source, targets = line.split("\t", 1)
                tokens = [source.split(" ") if source else [], targets.split()]
                unknown = [token for part in tokens for token in part if token not in vocabulary]
                if unknown:
                    raise ValueError(
                        f"{path}, line {number}: tokens {unknown[:5]} are not in the tokenizer's vocabulary (a "
                        "shortlist is made for one tokenizer)"
                    )
                ids = [vocabulary[token] for token in tokens[1]]
                if source:
                    rules[tuple(vocabulary[token] for token in tokens[0])] = ids
                else:
                    always += ids
        return cls(rules, np.asarray(always, dtype=np.int64))

    def write(self, path: str | os.PathLike, tokenizer) -> None:
        """Writes the table as a vocabulary map file in the tokens of `tokenizer` (those always in first)."""
        tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        spaced = [token for token in tokens if token is not None and any(c in token for c in " \t\n")]
        if spaced:
            raise ValueError(f"tokens {spaced[:5]} hold whitespace, which a vocabulary map file cannot")
        lines = ["\t" + " ".join(tokens[i] for i in self.always)]
        for key, ids in sorted(self.rules.items()):
            lines.append(" ".join(tokens[i] for i in key) + "\t" + " ".join(tokens[i] for i in ids))
        Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")

    def __repr__(self) -> str:
        sizes = [len(ids) for ids in self.rules.values()]
        mean = sum(sizes) / len(sizes) if sizes else 0.0
        return f"Shortlist(rules={len(self.rules)}, targets per rule={mean:.1f}, always={len(self.always)})"


def _unique_rows(batch: Sequence[Sequence[int]], exclude: np.ndarray) -> list[np.ndarray]:
    return [np.setdiff1d(np.asarray(row, dtype=np.int64), exclude) for row in batch]


def _merge_counts(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique codes and their summed counts over `(codes, counts)` parts."""
    codes, where = np.unique(np.concatenate([part for part, _ in parts]), return_inverse=True)
    counts = np.bincount(where, weights=np.concatenate([c for _, c in parts]), minlength=len(codes))
    return codes, counts.astype(np.int64)


def cooccurrence_shortlist(
    sources: Iterable[Sequence[int]],
    targets: Iterable[Sequence[int]],
    vocab_size: int,
    frequent: int = DEFAULT_FREQUENT,
    per_source: int = DEFAULT_PER_SOURCE,
    min_count: int = DEFAULT_MIN_COUNT,
    exclude: Iterable[int] = (),
    chunk: int = 2048,
) -> Shortlist:
    """The shortlist of token-id pairs (see the module docstring): the `frequent` most frequent target ids always in;
    per source id, the `per_source` other target ids of highest `c(s, t) / c(s)` seen with it in at least
    `min_count` pairs. `exclude`: ids counted on neither side (special tokens)."""
    if frequent < 0 or per_source < 1 or min_count < 1:
        raise ValueError("frequent >= 0, per_source >= 1 and min_count >= 1 are needed")
    exclude = np.unique(np.fromiter(exclude, dtype=np.int64))
    source_count = np.zeros(vocab_size, dtype=np.int64)
    target_count = np.zeros(vocab_size, dtype=np.int64)
    codes, counts, pending = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), []
    source_iter, target_iter = iter(sources), iter(targets)
    while True:
        source_batch = [row for _, row in zip(range(chunk), source_iter)]
        target_batch = [row for _, row in zip(range(len(source_batch)), target_iter)]
        if len(source_batch) != len(target_batch):
            raise ValueError("sources and targets have different numbers of sentences")
        if not source_batch:
            break
        pairs = []
        for source, target in zip(_unique_rows(source_batch, exclude), _unique_rows(target_batch, exclude)):
            source_count[source] += 1
            target_count[target] += 1
            pairs.append(np.add.outer(source * vocab_size, target).ravel())
        new, new_counts = np.unique(np.concatenate(pairs), return_counts=True)
        pending.append((new, new_counts))
        if sum(len(part) for part, _ in pending) > 20_000_000:
            codes, counts = _merge_counts([(codes, counts), *pending])
            pending = []
    codes, counts = _merge_counts([(codes, counts), *pending])
    ranked = np.argsort(-target_count, kind="stable")
    always = ranked[: min(frequent, int((target_count > 0).sum()))]
    source_ids, target_ids = codes // vocab_size, codes % vocab_size
    keep = (counts >= min_count) & ~np.isin(target_ids, always)
    source_ids, target_ids, counts = source_ids[keep], target_ids[keep], counts[keep]
    likelihood = counts / source_count[source_ids]
    order = np.lexsort((target_ids, -likelihood, source_ids))  # by source id, most likely first (ties: by id)
    source_ids, target_ids = source_ids[order], target_ids[order]
    starts = np.flatnonzero(np.r_[True, source_ids[1:] != source_ids[:-1]])
    ends = np.r_[starts[1:], len(source_ids)]
    rules = {
        (int(source_ids[start]),): np.sort(target_ids[start : min(end, start + per_source)])
        for start, end in zip(starts, ends)
    }
    return Shortlist(rules, always)


def build_shortlist(
    tokenizer,
    sources: Sequence[str],
    targets: Sequence[str],
    frequent: int = DEFAULT_FREQUENT,
    per_source: int = DEFAULT_PER_SOURCE,
    min_count: int = DEFAULT_MIN_COUNT,
) -> Shortlist:
    """The co-occurrence shortlist (`cooccurrence_shortlist`) of a parallel corpus of texts, tokenised by
    `tokenizer` as the model sees them (`text_target=` for the targets), its special tokens left out."""
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
    source_ids = tokenizer(list(sources), add_special_tokens=False)["input_ids"]
    target_ids = tokenizer(text_target=list(targets), add_special_tokens=False)["input_ids"]
    return cooccurrence_shortlist(
        source_ids,
        target_ids,
        len(tokenizer),
        frequent=frequent,
        per_source=per_source,
        min_count=min_count,
        exclude=tokenizer.all_special_ids,
    )


def read_pairs(path: str | os.PathLike) -> tuple[list[str], list[str]]:
    """The `source<TAB>target` lines of a text file (a `ValueError` names a line without exactly one tab)."""
    sources, targets = [], []
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, 1):
            line = line.rstrip("\r\n")
            if not line:
                continue
            parts = line.split("\t")
            if len(parts) != 2:
                raise ValueError(f"{path}, line {number}: expected source<TAB>target, found {len(parts)} fields")
            sources.append(parts[0])
            targets.append(parts[1])
    return sources, targets


def main(argv: list[str] | None = None) -> None:
    """`python -m hf_unified_mt.deployment.shortlist TOKENIZER_DIR PAIRS.tsv OUTPUT [--frequent N] ...`."""
    import argparse

    from transformers import AutoTokenizer

    parser = argparse.ArgumentParser(
        description="Build a vocabulary shortlist (vocabulary map) from a parallel corpus."
    )
    parser.add_argument("tokenizer", help="A model or export folder with the tokenizer the shortlist is for.")
    parser.add_argument("pairs", help="The training corpus: source<TAB>target lines.")
    parser.add_argument("output", help="The vocabulary map file to write (CTranslate2's format).")
    parser.add_argument("--frequent", type=int, default=DEFAULT_FREQUENT, help="Most frequent targets always in.")
    parser.add_argument("--per_source", type=int, default=DEFAULT_PER_SOURCE, help="Targets per source token.")
    parser.add_argument("--min_count", type=int, default=DEFAULT_MIN_COUNT, help="Pairs a token pair needs.")
    args = parser.parse_args(argv)
    try:
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        shortlist = build_shortlist(tokenizer, *read_pairs(args.pairs), args.frequent, args.per_source, args.min_count)
        shortlist.write(args.output, tokenizer)
    except (OSError, ValueError) as error:
        parser.exit(2, f"shortlist: error: {(str(error).splitlines() or [''])[0]}\n")
    print(f"Wrote {args.output}: {shortlist!r}")


if __name__ == "__main__":
    main()
