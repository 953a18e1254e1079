"""The model check-config prices a config as (pptune.check.shape): what it assumed of
a model built from the file's own sizes."""

from __future__ import annotations

from pathlib import Path

from tests.check_json import check_file


def test_a_model_from_the_files_sizes_says_its_vocabulary_and_mtp_quietly(
        tmp_path: Path) -> None:
    """A Megatron-LM script that names its sizes and a tokenizer (no --vocab-size) is
    priced at GPT-2's 50,257 tokens, and an info finding says so (a trial's DeepSeek-V3
    proxy uses a 256k tokenizer); its --mtp-num-layers is the model's own, not a count
    that replaces one ("instead of 0" was said of a model that had none to replace)."""
    script = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 8 --hidden-size 2048 "
              "--num-attention-heads 16 --seq-length 4096 --max-position-embeddings 4096 "
              "--micro-batch-size 1 --global-batch-size 64 --bf16 --mtp-num-layers 1 "
              "--tokenizer-type GPTSentencePieceTokenizer --tokenizer-model tok.model\n")
    _, found, doc = check_file(tmp_path / "run.sh", script, "--gpu", "h100-sxm", by="message")
    assert found["vocab-assumed"] == ("vocabulary size not stated (the tokenizer's): priced at "
                                      "GPT-2's 50,257; --vocab-size (Megatron-LM), vocab_size "
                                      "(pptune) or --hf-config sets it")
    assert "mtp-from-config" not in found and doc["config"]["mtp_layers"] == 1
    _, found, _ = check_file(tmp_path / "v.sh", script.replace("--bf16", "--bf16 --vocab-size "
                                                               "256000"), "--gpu", "h100-sxm")
    assert "vocab-assumed" not in found
