"""Convert a GGUF file into an HF-format directory (run with the vLLM venv's python).

The same weights llama.cpp serves become the weights vLLM serves: transformers dequantizes the GGUF
on load. `save_pretrained` refuses a GGUF-quantized model, so the model is rebuilt from its config and
the state dict loaded into it before saving (cpu-recipes.md).
Usage: gguf_to_hf.py GGUF_PATH OUT_DIR [--dtype bfloat16|float32]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("gguf")
    parser.add_argument("out")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    args = parser.parse_args()
    gguf = Path(args.gguf)
    out = Path(args.out)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    dtype = getattr(torch, args.dtype)

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, torch_dtype=torch.float32)
    state = loaded.state_dict()
    del loaded
    config.torch_dtype = dtype
    model = AutoModelForCausalLM.from_config(config, torch_dtype=dtype)
    missing, unexpected = model.load_state_dict(state, strict=False)
    # Tied embeddings legitimately have no separate lm_head tensor.
    missing = [name for name in missing if not (name == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise SystemExit(f"state dict mismatch: missing={missing} unexpected={unexpected}")
    model.to(dtype)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)

    digest = hashlib.sha256()
    for path in sorted(tmp.glob("*.safetensors")):
        digest.update(path.read_bytes())
    gguf_sha = hashlib.sha256(gguf.read_bytes()).hexdigest()
    manifest = {
        "source_gguf": str(gguf),
        "source_gguf_sha256": gguf_sha,
        "dtype": args.dtype,
        "weights_sha256": digest.hexdigest(),
        "has_chat_template": bool(getattr(tokenizer, "chat_template", None)),
    }
    (tmp / "toolcall-matrix.json").write_text(json.dumps(manifest, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(json.dumps(manifest))


if __name__ == "__main__":
    main()
