"""The synthetic tokenizer serve mode gives a model that has none (profiler/tokenizer.py).

Expected values come from the catalog's config.json files (written out here), from arithmetic on
the documented word scheme (bijective base 70 over the syllables ba be bi bo bu da … zu), and
from vLLM 0.32's own loader, random dataset and incremental detokenizer.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT
from transformers import AutoTokenizer

from profiler import tokenizer as tk
from profiler.tokenizer import (
    METADATA_FILE,
    SyntheticTokenizer,
    TokenizerError,
    token_word,
    tokenizer_dir,
    write_tokenizer,
)

CATALOG = ROOT / "analysis" / "catalog" / "models"
WORD = re.compile(r"^(?:[bdfgklmnprstvz][aeiou])+$")

# (catalog model, vocab_size, bos id, eos id, unk id, model_max_length), read off each config.json by
# hand: the tiny models name no bos/eos, so they get the documented defaults 1 and 2 with <unk> at 0;
# llama-3.1-8b names bos 128000 and eos 128001, so <unk> takes the lowest free id, 0.
MODELS = [
    ("tiny-llama-gqa", 2048, 1, 2, 0, 8192),
    ("tiny-llama-mha", 2048, 1, 2, 0, 8192),
    ("tiny-mistral-swa", 2048, 1, 2, 0, 8192),
    ("tiny-gemma3-hybrid", 2048, 1, 2, 0, 8192),
    ("llama-3.1-8b", 128256, 128000, 128001, 0, 131072),
]


def _config(name: str) -> dict:
    return json.loads((CATALOG / name / "config.json").read_text())


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Each catalog model's tokenizer, written once for the module: name → directory."""
    root = tmp_path_factory.mktemp("tokenizers")
    return {name: write_tokenizer(_config(name), root / name) for name, *_ in MODELS}


# -- the word scheme ----------------------------------------------------------------------------------

def test_words_by_hand():
    # id+1 in bijective base 70, digit k (1 … 70) written as syllable k of ba be bi bo bu da … zu:
    # 1 → "ba"; 4 → "bo"; 6 → "da"; 70 → "zu"; 71 = 1·70 + 1 → "ba" "ba"; 76 = 1·70 + 6 → "ba" "da".
    assert token_word(0) == "ba"
    assert token_word(3) == "bo"
    assert token_word(5) == "da"
    assert token_word(69) == "zu"
    assert token_word(70) == "baba"
    assert token_word(75) == "bada"
    assert token_word(4969) == "zuzu"  # 4970 = 70·70 + 70: the largest two-syllable number
    assert token_word(4970) == "bababa"


def test_words_are_distinct_syllable_words_over_two_to_the_18():
    words = [token_word(i) for i in range(1 << 18)]
    assert len(set(words)) == 1 << 18
    assert all(WORD.match(w) for w in words)
    assert max(len(w) for w in words) == 6  # 70 + 70² < 2**18 ≤ 70 + 70² + 70³: three syllables at most


# -- catalog models -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name,vocab,bos,eos,unk,max_len", MODELS)
def test_catalog_tokenizer_loads_with_the_config_ids(written, name, vocab, bos, eos, unk, max_len):
    tok = AutoTokenizer.from_pretrained(written[name])
    assert len(tok) == vocab
    assert tok.vocab_size == vocab  # what vLLM's RandomDataset samples below
    assert (tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (bos, eos, unk)
    assert sorted(tok.all_special_ids) == sorted({bos, eos, unk})
    assert tok.model_max_length == max_len
    assert tok.num_special_tokens_to_add() == 0
    meta = SyntheticTokenizer.model_validate_json((written[name] / METADATA_FILE).read_text())
    assert (meta.vocab_size, meta.bos_token_id, meta.eos_token_id, meta.unk_token_id) == (vocab, bos, eos, unk)
    assert "synthetic" in meta.note.lower()


@pytest.mark.parametrize("name,vocab,bos,eos,unk,max_len", MODELS)
def test_round_trip_of_random_non_special_ids(written, name, vocab, bos, eos, unk, max_len):
    tok = AutoTokenizer.from_pretrained(written[name])
    rng = np.random.default_rng(16)
    allowed = np.setdiff1d(np.arange(vocab), [bos, eos, unk])
    for length in (1, 2, 64, 1000):
        ids = rng.choice(allowed, size=length).tolist()
        text = tok.decode(ids)
        assert tok.encode(text, add_special_tokens=False) == ids
        assert tok.encode(text) == ids  # the server's default adds no special token either
    top = [vocab - 1, vocab - 2]  # the highest ids are words too
    assert tok.encode(tok.decode(top), add_special_tokens=False) == top


def test_decode_is_words_joined_by_single_spaces(written):
    tok = AutoTokenizer.from_pretrained(written["tiny-llama-gqa"])
    assert tok.decode([3, 4, 5]) == "bo bu da"
    assert tok.decode([70, 75, 3]) == "baba bada bo"
    assert tok.decode([2047]) == token_word(2047)
    # 2048 = 29·70 + 18: syllable 29 is "lo" (b d f g k take 1-25, then la le li lo), syllable 18 is "gi"
    assert token_word(2047) == "logi"
    assert tok.decode([1, 3, 2], skip_special_tokens=True) == "bo"


def test_streamed_detokenization_matches_the_full_decode(written):
    """What vLLM's FastIncrementalDetokenizer does (v1/engine/detokenizer.py): a DecodeStream primed with
    the prompt's ids, stepped one generated id at a time; the streamed pieces append to the prompt text."""
    from tokenizers.decoders import DecodeStream

    tok = AutoTokenizer.from_pretrained(written["llama-3.1-8b"])
    prompt, generated = [70, 75, 3, 127999], [5, 128255, 4969, 4970]
    stream = DecodeStream(ids=prompt, skip_special_tokens=True)
    pieces = [stream.step(tok._tokenizer, i) for i in generated]
    assert pieces == [" da", " " + token_word(128255), " zuzu", " bababa"]
    assert tok.decode(prompt) + "".join(pieces) == tok.decode(prompt + generated)


# -- special tokens from other configs -------------------------------------------------------------------

def test_shared_bos_eos_list_eos_and_nested_text_config(tmp_path):
    # phi-4 gives bos and eos the same id (100257): one token serves for both
    tok = AutoTokenizer.from_pretrained(write_tokenizer({"vocab_size": 300, "bos_token_id": 7,
                                                         "eos_token_id": 7}, tmp_path / "shared"))
    assert (tok.bos_token_id, tok.eos_token_id, tok.unk_token_id, len(tok)) == (7, 7, 0, 300)
    assert tok.decode([8]) == token_word(8)
    # eos as a list (llama-3.1-instruct's [128001, 128008, 128009]): its first
    tok = AutoTokenizer.from_pretrained(write_tokenizer({"vocab_size": 300, "bos_token_id": 0,
                                                         "eos_token_id": [9, 10]}, tmp_path / "list"))
    assert (tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 9, 1)
    # a multimodal wrapper: text_config's vocabulary and ids, as vLLM's hf_text_config reads them
    tok = AutoTokenizer.from_pretrained(write_tokenizer(
        {"vocab_size": 999, "text_config": {"vocab_size": 500, "bos_token_id": 2, "eos_token_id": 1,
                                            "max_position_embeddings": 4096}}, tmp_path / "nested"))
    assert (len(tok), tok.bos_token_id, tok.eos_token_id, tok.unk_token_id, tok.model_max_length) == \
        (500, 2, 1, 0, 4096)
    # out of range or not an int: treated as missing, so the defaults after <unk>
    tok = AutoTokenizer.from_pretrained(write_tokenizer({"vocab_size": 300, "bos_token_id": 300,
                                                         "eos_token_id": "2"}, tmp_path / "bad-ids"))
    assert (tok.unk_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    meta = SyntheticTokenizer.model_validate_json((tmp_path / "bad-ids" / METADATA_FILE).read_text())
    assert (meta.bos_from_config, meta.eos_from_config) == (False, False)


# -- refusals -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("vocab,message", [
    (0, "vocab_size 0 is out of range"),
    (-5, "vocab_size -5 is out of range"),
    (3, "vocab_size 3 is out of range"),
    ((1 << 24) + 1, "vocab_size 16,777,217 is out of range"),
    (True, "vocab_size must be a positive integer"),
    (2048.0, "vocab_size must be a positive integer"),
    ("2048", "vocab_size must be a positive integer"),
    (None, "vocab_size must be a positive integer"),
])
def test_bad_vocab_size_is_refused(tmp_path, vocab, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        write_tokenizer({"vocab_size": vocab}, tmp_path / "t")
    assert not (tmp_path / "t").exists()


def test_bad_max_positions_and_an_output_file_are_refused(tmp_path):
    with pytest.raises(TokenizerError, match="max_position_embeddings must be a positive integer, got 0"):
        write_tokenizer({"vocab_size": 300, "max_position_embeddings": 0}, tmp_path / "t")
    (tmp_path / "file").write_text("x")
    with pytest.raises(TokenizerError, match="is not a directory"):
        write_tokenizer({"vocab_size": 300}, tmp_path / "file")


def test_tokenizer_dir():
    sha = "0123456789abcdef" * 4
    assert tokenizer_dir(Path("/r"), sha) == Path("/r/tokenizers/0123456789abcdef")
    for bad in ("0123", sha.upper(), "g" * 64):
        with pytest.raises(TokenizerError, match="model_sha256 must be 64 lowercase hex digits"):
            tokenizer_dir(Path("/r"), bad)


# -- determinism, idempotence, atomicity ------------------------------------------------------------------

def test_two_writes_are_byte_identical(written, tmp_path):
    again = write_tokenizer(_config("llama-3.1-8b"), tmp_path / "again")
    for f in ("tokenizer.json", "tokenizer_config.json", "config.json", METADATA_FILE):
        assert (again / f).read_bytes() == (written["llama-3.1-8b"] / f).read_bytes()


def test_a_second_call_does_not_rewrite(tmp_path, monkeypatch):
    cfg = _config("tiny-llama-gqa")
    out = write_tokenizer(cfg, tmp_path / "t")
    before = {f.name: f.stat().st_mtime_ns for f in out.iterdir()}
    inode = out.stat().st_ino
    builds = []
    monkeypatch.setattr(tk, "_build", lambda *a: builds.append(a))
    assert write_tokenizer(cfg, out) == out
    assert builds == []
    assert {f.name: f.stat().st_mtime_ns for f in out.iterdir()} == before
    assert out.stat().st_ino == inode


def test_another_version_vocab_or_a_damaged_file_is_rewritten(tmp_path, monkeypatch):
    out = write_tokenizer({"vocab_size": 300}, tmp_path / "t")
    assert len(AutoTokenizer.from_pretrained(out)) == 300
    write_tokenizer({"vocab_size": 400}, out)
    assert len(AutoTokenizer.from_pretrained(out)) == 400
    (out / "tokenizer.json").write_text((out / "tokenizer.json").read_text()[:100])  # truncated
    write_tokenizer({"vocab_size": 400}, out)
    assert len(AutoTokenizer.from_pretrained(out)) == 400
    monkeypatch.setattr(tk, "GENERATOR_VERSION", 2)
    write_tokenizer({"vocab_size": 400}, out)
    assert json.loads((out / METADATA_FILE).read_text())["generator_version"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [".t.lock", "t"]  # no temporary directory left


def test_a_crash_mid_write_leaves_nothing_and_the_next_write_cleans_up(tmp_path, monkeypatch):
    real_build = tk._build

    def crash(plan, config, into):
        (into / "tokenizer.json").write_text("{")
        raise RuntimeError("killed mid-write")

    monkeypatch.setattr(tk, "_build", crash)
    with pytest.raises(RuntimeError, match="killed mid-write"):
        write_tokenizer({"vocab_size": 300}, tmp_path / "t")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".t.lock"]
    (tmp_path / ".t.abc123.tmp").mkdir()  # what a writer killed by SIGKILL leaves
    monkeypatch.setattr(tk, "_build", real_build)
    write_tokenizer({"vocab_size": 300}, tmp_path / "t")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".t.lock", "t"]


def test_racing_writers_build_once_and_all_get_the_whole_tokenizer(tmp_path, monkeypatch):
    real_build, builds = tk._build, []

    def counted(plan, config, into):
        builds.append(into)
        real_build(plan, config, into)

    monkeypatch.setattr(tk, "_build", counted)
    start, results, errors = threading.Barrier(4), [], []

    def writer():
        start.wait()
        try:
            results.append(write_tokenizer({"vocab_size": 5000}, tmp_path / "t"))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert results == [tmp_path / "t"] * 4
    assert len(builds) == 1
    assert len(AutoTokenizer.from_pretrained(tmp_path / "t")) == 5000


# -- vLLM's own client ---------------------------------------------------------------------------------------

def test_vllm_random_dataset_prompts_have_the_asked_token_count(written):
    """vLLM 0.32's RandomDataset (benchmarks/datasets/datasets.py) samples non-special ids, decodes them and
    re-encodes until the count matches (gen_prompt_decode_to_target_len); with an exact round trip the
    first try holds, so every prompt is input_len tokens both to the client and to the server's encode."""
    pytest.importorskip("vllm", reason="vLLM's own RandomDataset")
    from vllm.benchmarks.datasets import RandomDataset
    from vllm.tokenizers import get_tokenizer

    tok = get_tokenizer(str(written["tiny-llama-gqa"]))
    assert (len(tok), tok.vocab_size, tok.bos_token_id, tok.eos_token_id) == (2048, 2048, 1, 2)
    requests = RandomDataset(random_seed=0).sample(tokenizer=tok, num_requests=4, input_len=64, output_len=8)
    assert len(requests) == 4
    for r in requests:
        assert r.prompt_len == 64
        assert r.expected_output_len == 8
        assert len(tok.encode(r.prompt, add_special_tokens=False)) == 64
        assert len(tok.encode(r.prompt)) == 64
        words = r.prompt.split(" ")
        assert len(words) == 64 and all(WORD.match(w) for w in words)


def test_vllm_finds_the_config_copy_instead_of_retrying(written, monkeypatch):
    """vLLM 0.32's get_tokenizer parses the tokenizer directory's config (tokenizers/registry.py → get_config,
    with_retry in transformers_utils/repo_utils.py: an ERROR line, time.sleep(2), a second ERROR line when
    there is none). The config copy beside the tokenizer is the model's own, so that parse succeeds at once."""
    pytest.importorskip("vllm", reason="vLLM's own get_tokenizer")
    import vllm.transformers_utils.repo_utils as repo_utils
    from vllm.tokenizers import get_tokenizer
    from vllm.transformers_utils.config import get_config

    def no_retry(seconds):
        raise AssertionError(f"vLLM retried parsing the tokenizer directory's config (slept {seconds} s)")

    monkeypatch.setattr(repo_utils.time, "sleep", no_retry)
    out = written["llama-3.1-8b"]
    assert json.loads((out / "config.json").read_text()) == _config("llama-3.1-8b")
    assert get_config(str(out), trust_remote_code=False, config_format="hf").model_type == "llama"
    assert len(get_tokenizer(str(out))) == 128256


def test_a_changed_config_with_the_same_vocab_rewrites_the_copy(tmp_path):
    out = write_tokenizer({"vocab_size": 300, "model_type": "llama"}, tmp_path / "t")
    write_tokenizer({"vocab_size": 300, "model_type": "llama", "hidden_size": 64}, out)
    assert json.loads((out / "config.json").read_text())["hidden_size"] == 64
