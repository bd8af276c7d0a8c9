"""Make the tiny local model the real-vLLM tests serve (run with the realvllm venv).

    python make_model.py DIR

A random ``LlamaForCausalLM`` (hidden 128, 2 layers, 4 heads, 2 KV heads, vocab 512,
512 positions) saved with safetensors, and a byte-level BPE tokenizer trained on a few
sentences, wrapped as ``PreTrainedTokenizerFast`` with bos/eos/unk and a one-line chat
template. No hub, deterministic (seed 0), about a second.
"""

from __future__ import annotations

import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SENTENCES = [
    "The GPU holds memory for the model server.",
    "A worker process loads the weights and serves requests.",
    "systemd restarts the unit when its main process dies.",
    "The engine core schedules requests for every worker.",
    "Who holds the memory on this host, and can it be reclaimed?",
    "hello world, this is a tiny model that says nothing useful.",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
)


def main(out: str) -> None:
    torch.manual_seed(0)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(SENTENCES * 4, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        model_max_length=512,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    config = LlamaConfig(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=512,
        max_position_embeddings=512,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
    print(f"model: {out} (tokenizer {len(fast)} tokens)")


if __name__ == "__main__":
    main(sys.argv[1])
